"""SAC-GLAM learner speed: gradient updates per second at batch 128 and 256, on real replay batches.

Fills a replay buffer with uniform-random episodes of Playground-Text (full task by default:
6 objects, 30 steps; HER on, 50/50 batches), then times `SACLearner.update` (critic + policy +
alpha step, target critic swapped in for the next states; with the next-state policy from the
online weights, SAC's default, and from the target forward) after a few warm-up updates. Also
times one inference forward of the same states, the unit the update is made of, and counts the
FLOPs of one update (torch's FlopCounterMode on the ops actually run: forwards, backward, target
pass) to compare the update's wall time with FLOPs / the fp32 matmul rate measured in the same run
at the same thread count (`wall / FLOP time`: 1.0 would be every FLOP at matmul speed). With
`--compile`, the same agent with every transformer block compiled (`agent.compile`) is timed too.

    .venv/bin/python benchmarks/speed/learner_speed.py [--batch-sizes 64 128 256] [--threads 1] [--compile]

Prints a table and writes benchmarks/speed/results/learner_speed/learner_speed.json.
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
    compile: bool = False
    """Also time the same agent with `agent.compile` (every transformer block compiled; its
    compilation happens in the warm-up updates). FLOPs are counted on the eager agent."""
    output: Path = Path("benchmarks/speed/results/learner_speed/learner_speed.json")


def main(args: Args) -> None:
    import warnings

    import torch
    from scoring import matmul_rate  # a sibling script: its folder is on sys.path when run
    from torch.utils.flop_counter import FlopCounterMode

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
    agents = {"eager": GLAMAgent(cfg.agent).eval()}
    if args.compile:
        agents["compiled"] = GLAMAgent(replace(cfg.agent, compile=True)).eval()
        agents["compiled"].load_state_dict(agents["eager"].state_dict())
    buffer = ReplayBuffer(100_000, cfg.sac.gamma, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 4096:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    matmul_gflops = matmul_rate()
    results = []
    for batch_size in args.batch_sizes:
        batches = [buffer.sample(batch_size, cfg.sac.n_step, "ratio") for _ in range(args.updates + 3)]
        forward_s = {}
        for mode, agent in agents.items():
            with torch.inference_mode():
                agent(agent.encode(batches[0].observations, batches[0].candidates), with_critic=False)  # compiles
                start = time.perf_counter()
                for batch in batches[3:8]:
                    agent(agent.encode(batch.observations, batch.candidates), with_critic=False)
                forward_s[mode] = (time.perf_counter() - start) / 5
        for next_policy in args.next_policies:
            flops = 0.0
            for mode, agent in agents.items():  # eager first: its update's FLOPs count for both
                learner = SACLearner(agent, replace(cfg.sac, critic_warmup_updates=0, next_policy=next_policy))
                for batch in batches[:3]:
                    learner.update(batch)
                start = time.perf_counter()
                for batch in batches[3:]:
                    learner.update(batch)
                update_s = (time.perf_counter() - start) / args.updates
                if mode == "eager":
                    with FlopCounterMode(display=False) as counter:  # one more update, counted, not timed
                        learner.update(batches[3])
                    flops = float(counter.get_total_flops())
                results.append(
                    {
                        "batch_size": batch_size,
                        "next_policy": next_policy,
                        "agent": mode,
                        "seconds_per_update": update_s,
                        "updates_per_s": 1 / update_s,
                        "seconds_per_policy_forward": forward_s[mode],
                        "update_in_forwards": update_s / forward_s[mode],
                        "gradient_samples_per_s": batch_size / update_s,
                        "gflop_per_update": flops / 1e9,
                        "matmul_gflop_per_s": matmul_gflops,
                        "wall_over_flop_time": update_s / (flops / (matmul_gflops * 1e9)),
                    }
                )
    print(f"fp32 matmul rate ({args.threads} thread(s), 2048^3): {matmul_gflops:.0f} GFLOP/s")
    print(
        f"{'batch':>6} {'next pi':>8} {'agent':>9} {'s/update':>9} {'updates/s':>10} {'samples/s':>10} {'s/forward':>10} "
        f"{'update/forward':>15} {'GFLOP/update':>13} {'wall/FLOP time':>15}"
    )
    for r in results:
        print(
            f"{r['batch_size']:>6} {r['next_policy']:>8} {r['agent']:>9} {r['seconds_per_update']:>9.3f} {r['updates_per_s']:>10.2f} "
            f"{r['gradient_samples_per_s']:>10.0f} {r['seconds_per_policy_forward']:>10.3f} "
            f"{r['update_in_forwards']:>15.1f} {r['gflop_per_update']:>13.1f} {r['wall_over_flop_time']:>15.2f}"
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
