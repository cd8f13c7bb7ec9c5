"""SAC-GLAM learner speed: gradient updates per second at batch 128 and 256, on real replay batches.

Fills a replay buffer with uniform-random episodes of Playground-Text (full task by default:
6 objects, 30 steps; HER on, 50/50 batches), then times `SACLearner.update` (critic + policy +
alpha step, target critic swapped in for the next states; with the next-state policy from the
online weights, SAC's default, and from the target forward) after a few warm-up updates. Also
times one inference forward of the same states, the unit the update is made of.

    .venv/bin/python benchmarks/learner_speed.py [--batch-sizes 64 128 256] [--threads 1]

Prints a table and writes benchmarks/results/learner_speed.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro


@dataclass(frozen=True)
class Args:
    config: str = "tune_configs/runs/cpu_simple_sac_her.yaml"
    """Training config whose agent and SAC settings are timed."""
    variant: str = "full"
    """Environment the batches come from: full (6 objects, 30 steps) or simple."""
    batch_sizes: tuple[int, ...] = (64, 128, 256)
    next_policies: tuple[str, ...] = ("online", "target")
    """`SACConfig.next_policy` settings timed (target: one forward less per update)."""
    updates: int = 20
    """Timed updates per batch size (after 3 warm-up updates)."""
    threads: int = 1
    """torch threads (1: as each trial of the figure 2 benchmark runs)."""
    output: Path = Path("benchmarks/results/learner_speed.json")


def main(args: Args) -> None:
    import warnings

    import torch

    from sacglam.config import EnvConfig, TrainConfig
    from sacglam.config_io import load_yaml_config
    from sacglam.learner.sac import SACLearner
    from sacglam.models.agent import GLAMAgent
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.worker import RolloutWorker

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    cfg = load_yaml_config(TrainConfig, args.config)
    env = EnvConfig.variant(args.variant)
    torch.manual_seed(0)
    agent = GLAMAgent(cfg.agent).eval()
    buffer = ReplayBuffer(100_000, cfg.sac.gamma, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 4096:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    results = []
    for batch_size in args.batch_sizes:
        batches = [buffer.sample(batch_size, cfg.sac.n_step, "ratio") for _ in range(args.updates + 3)]
        with torch.inference_mode():
            start = time.perf_counter()
            for batch in batches[3:8]:
                agent(agent.encode(batch.observations, batch.candidates), with_critic=False)
            forward_s = (time.perf_counter() - start) / 5
        for next_policy in args.next_policies:
            learner = SACLearner(agent, replace(cfg.sac, critic_warmup_updates=0, next_policy=next_policy))
            for batch in batches[:3]:
                learner.update(batch)
            start = time.perf_counter()
            for batch in batches[3:]:
                learner.update(batch)
            update_s = (time.perf_counter() - start) / args.updates
            results.append(
                {
                    "batch_size": batch_size,
                    "next_policy": next_policy,
                    "seconds_per_update": update_s,
                    "updates_per_s": 1 / update_s,
                    "seconds_per_policy_forward": forward_s,
                    "update_in_forwards": update_s / forward_s,
                    "gradient_samples_per_s": batch_size / update_s,
                }
            )
    print(
        f"{'batch':>6} {'next pi':>8} {'s/update':>9} {'updates/s':>10} {'samples/s':>10} {'s/forward':>10} {'update/forward':>15}"
    )
    for r in results:
        print(
            f"{r['batch_size']:>6} {r['next_policy']:>8} {r['seconds_per_update']:>9.3f} {r['updates_per_s']:>10.2f} "
            f"{r['gradient_samples_per_s']:>10.0f} {r['seconds_per_policy_forward']:>10.3f} {r['update_in_forwards']:>15.1f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "benchmark": "learner_speed",
                "config": args.config,
                "variant": args.variant,
                "threads": args.threads,
                "model": cfg.agent.model,
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
