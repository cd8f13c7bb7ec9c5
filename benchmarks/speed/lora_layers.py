"""LoRA on the top k blocks (`agent.lora_layers`): SmolLM2 SAC update time and FLOPs at k = all, 8, 4, 2.

One run, one set of replay batches (the simplified Playground-Text, HER on, 50/50, uniform-random
episodes), the demo's SmolLM2 agent (LoRA r16, the candidate-list prompt, critic width 256) with
LoRA on every block and on the top k only. For each k:
- the wall time of `SACLearner.update` (median over `--updates` updates after one warm-up);
- the same update taken apart, each part timed and its FLOPs counted (torch's FlopCounterMode on
  the ops actually run): the current states' frozen trunk (no autograd), their forward through the
  trained blocks (LM head and critic included), the backward, the next states' trunk, the
  target-critic forward (top blocks, no LM head) and the online policy forward (top blocks). With
  k = all there is no trunk: the forwards run every block. What the parts leave of the update
  (encoding, losses, clipping, Adam, Polyak) is reported as `rest`.
Target: k = 4 at least 1.7x faster than k = all.

    .venv/bin/python benchmarks/speed/lora_layers.py [--layers 0 8 4 2] [--batch-size 16] [--threads 2]

Prints a table and writes benchmarks/speed/results/lora_layers/lora_layers.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro


@dataclass(frozen=True)
class Args:
    config: str = "tune_configs/runs/demo_smollm2.yaml"
    """Training config whose agent and SAC settings are timed (the demo's SmolLM2 phase)."""
    variant: str = "simple"
    """Environment the batches come from: simple (3 objects, 8 steps) or full."""
    layers: tuple[int, ...] = (0, 8, 4, 2)
    """LoRA blocks timed (0: every block, `lora_layers` unset)."""
    batch_size: int = 16
    updates: int = 5
    """Timed updates per setting (after one warm-up update); the median is reported."""
    threads: int = 2
    output: Path = Path("benchmarks/speed/results/lora_layers/lora_layers.json")


PARTS = ("current trunk", "current top forward", "backward", "next trunk", "next target Q", "next online pi")


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def update_parts(learner, batch) -> dict[str, tuple[float, float]]:
    """Each part of one update (see the module docstring): (seconds, FLOPs). The weights are not
    stepped, so the parts can be repeated on the same learner."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from sacglam.learner.sac import swapped_parameters
    from sacglam.learner.sac_losses import entropy_targets, sac_losses

    agent, cfg = learner.agent, learner.config
    rows = (~batch.terminal).nonzero().flatten().tolist()
    current = agent.encode(batch.observations, batch.candidates)
    following = agent.encode([batch.next_observations[i] for i in rows], [batch.next_candidates[i] for i in rows])

    def losses_of(out):
        next_log_pi, next_q, next_mask = learner._next_state_values(batch)
        actions = batch.actions
        q_taken = out.q_critics.gather(2, actions[None, :, None].expand(out.q_critics.shape[0], -1, 1)).squeeze(2)
        losses = sac_losses(
            log_pi=out.log_pi,
            q_taken=q_taken,
            q_all=out.q,
            mask=out.mask,
            reward=batch.reward,
            discount=batch.discount,
            terminal=batch.terminal,
            next_log_pi=next_log_pi,
            next_q_target=next_q,
            next_mask=next_mask,
            log_alpha=learner.log_alpha,
            target_entropy=entropy_targets(out.mask, cfg.target_entropy, cfg.target_entropy_ratio),
        )
        return losses.critic + losses.policy

    def measured(fn) -> tuple[float, float]:
        _, seconds = _timed(fn)
        with FlopCounterMode(display=False) as counter:
            fn()
        return seconds, float(counter.get_total_flops())

    def backward() -> tuple[float, float]:
        timings = []
        for count in (False, True):
            loss = losses_of(agent(current, trunk=agent.frozen_trunk(current)))
            if count:
                with FlopCounterMode(display=False) as counter:
                    loss.backward()
            else:
                _, seconds = _timed(loss.backward)
            timings.append(seconds if not count else float(counter.get_total_flops()))
            agent.zero_grad(set_to_none=True)
            learner.log_alpha.grad = None
        return timings[0], timings[1]

    trunk = agent.frozen_trunk(current)
    next_trunk = agent.frozen_trunk(following)
    out = {}
    with torch.no_grad():
        out["current trunk"] = measured(lambda: agent.frozen_trunk(current)) if trunk is not None else (0.0, 0.0)
        out["next trunk"] = measured(lambda: agent.frozen_trunk(following)) if trunk is not None else (0.0, 0.0)
        with swapped_parameters(learner._online, learner.target):
            out["next target Q"] = measured(lambda: agent.q_values(following, next_trunk))
        out["next online pi"] = measured(lambda: agent(following, with_critic=False, trunk=next_trunk))
    out["current top forward"] = measured(lambda: agent(current, trunk=trunk))
    out["backward"] = backward()
    return out


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
    env = EnvConfig.variant(args.variant)  # type: ignore[arg-type]
    buffer = ReplayBuffer(100_000, cfg.sac.gamma, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 2048:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    batches = [buffer.sample(args.batch_size, cfg.sac.n_step, "ratio") for _ in range(args.updates + 1)]
    sac = replace(cfg.sac, critic_warmup_updates=0, batch_size=args.batch_size)
    results = []
    for k in args.layers:
        torch.manual_seed(0)
        agent = GLAMAgent(replace(cfg.agent, lora_layers=k or None)).eval()
        learner = SACLearner(agent, sac)
        learner.update(batches[0])
        seconds = [_timed(lambda b=b, learner=learner: learner.update(b))[1] for b in batches[1:]]
        parts = [update_parts(learner, b) for b in batches[1:4]]
        part_s = {name: statistics.median(p[name][0] for p in parts) for name in PARTS}
        part_gflop = {name: statistics.median(p[name][1] for p in parts) / 1e9 for name in PARTS}
        update_s = statistics.median(seconds)
        results.append(
            {
                "lora_layers": k or "all",
                "trainable_parameters": sum(p.numel() for p in agent.parameters() if p.requires_grad),
                "shares_frozen_trunk": agent.shares_frozen_trunk,
                "seconds_per_update": update_s,
                "update_seconds": seconds,
                "part_seconds": part_s | {"rest": update_s - sum(part_s.values())},
                "part_gflop": part_gflop,
                "gflop_per_update": sum(part_gflop.values()),
            }
        )
        del agent, learner
    base = results[0]["seconds_per_update"]
    for r in results:
        r["speedup_over_all"] = base / r["seconds_per_update"]
    header = f"{'k':>4} {'s/update':>9} {'speed-up':>9} {'GFLOP':>7} " + " ".join(f"{n:>20}" for n in PARTS)
    print(f"SmolLM2 SAC update, batch {args.batch_size}, {args.threads} threads; parts: seconds (GFLOP)")
    print(header)
    for r in results:
        cells = " ".join(f"{r['part_seconds'][n]:>10.3f} ({r['part_gflop'][n]:>6.1f})" for n in PARTS)
        print(
            f"{r['lora_layers']:>4} {r['seconds_per_update']:>9.3f} {r['speedup_over_all']:>8.2f}x "
            f"{r['gflop_per_update']:>7.1f} {cells}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "benchmark": "lora_layers",
                "config": args.config,
                "variant": args.variant,
                "batch_size": args.batch_size,
                "threads": args.threads,
                "host": platform.processor() or platform.machine(),
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
