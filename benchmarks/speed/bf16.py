"""bfloat16 on SmolLM2-135M: its log pi against float32, the batch-composition gap that PPO's old
policy had, and forward speed, on this machine's CPU.

On the embedded SmolLM2 (LoRA r8, value head, the candidate-list prompt), over the training rows
of a PPO rollout of uniform-random full-task episodes (`--rows` rows):
- log pi of the actions taken, bfloat16 base against float32 (same weights): max and mean gap;
- the rollout pass's log pi_old (chunks of 256 states in rollout order: what the learner used
  before the old policy was taken per minibatch) against each minibatch's own forward, for
  minibatch sizes `--minibatches`: max and mean |log ratio| and the share of rows outside the
  0.2 clip range before any update, in each dtype;
- inference forward of 32 full-task states, states/s in each dtype;
- an SAC-GLAM update of the SmolLM2 study's agent (LoRA r16 on the top 4 blocks, twin critics of
  width 1024), batch 16 of simplified-task transitions: seconds in each dtype (median of 3).

    .venv/bin/python benchmarks/speed/bf16.py [--rows 48] [--minibatches 24 8] [--threads 2]

Prints a table and writes benchmarks/speed/results/bf16/bf16.json.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import tyro


@dataclass(frozen=True)
class Args:
    rows: int = 48
    minibatches: tuple[int, ...] = (24, 8)
    threads: int = 2
    repeats: int = 3
    output: Path = Path("benchmarks/speed/results/bf16/bf16.json")


def main(args: Args) -> None:
    import warnings

    import numpy as np
    import torch

    from sacglam.config import AgentConfig, EnvConfig, PPOConfig
    from sacglam.learner.ppo import PPOLearner
    from sacglam.learner.ppo_rollout import rollout_from_segments
    from sacglam.models import GLAMAgent
    from sacglam.rollout_workers.worker import RolloutWorker

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    env = EnvConfig.variant("full")
    episodes: list = []
    for episode in RolloutWorker(env, 16, seed=0).collect(env.max_steps, None).episodes:
        if sum(e.length for e in episodes) < args.rows:
            episodes.append(episode)
    agents, rollouts, speed = {}, {}, {}
    for dtype in ("float32", "bfloat16"):
        torch.manual_seed(0)
        agent = GLAMAgent(
            AgentConfig(
                model="smollm2-135m",
                lora_r=8,
                critic="value",
                critic_width=256,
                prompt_template="candidates",
                dtype=dtype,
                device="cpu",
            )
        ).eval()
        rollouts[dtype], _ = rollout_from_segments(agent, episodes, PPOConfig(), np.random.default_rng(0))
        agents[dtype] = agent
        batch = agent.encode(rollouts[dtype].observations[:32], rollouts[dtype].candidates[:32])
        seconds = []
        with torch.inference_mode():
            agent(batch, with_critic=False)
            for _ in range(args.repeats):
                start = time.perf_counter()
                agent(batch, with_critic=False)
                seconds.append(time.perf_counter() - start)
        speed[dtype] = 32 / statistics.median(seconds)
    update_seconds = sac_update_seconds(args)
    gap = (rollouts["bfloat16"].old_log_prob - rollouts["float32"].old_log_prob).abs()
    composition = []
    for dtype, agent in agents.items():
        rollout = rollouts[dtype]
        for size in args.minibatches:
            learner = PPOLearner(agent, PPOConfig(minibatch_size=size), seed=0)
            shares = [share for _, share in learner.minibatches(len(rollout.actions))]
            per_minibatch = learner.old_policy(rollout, shares).log_prob
            log_ratio = (per_minibatch - rollout.old_log_prob).abs()
            composition.append(
                {
                    "dtype": dtype,
                    "minibatch_size": size,
                    "max_abs_log_ratio": float(log_ratio.max()),
                    "mean_abs_log_ratio": float(log_ratio.mean()),
                    "outside_clip_0.2": float(((log_ratio.exp() - 1).abs() > 0.2).float().mean()),
                }
            )
    report = {
        "benchmark": "bf16",
        "model": "smollm2-135m",
        "rows": len(rollouts["float32"].actions),
        "threads": args.threads,
        "log_pi_gap_bf16_vs_fp32": {"max": float(gap.max()), "mean": float(gap.mean())},
        "rollout_pass_vs_minibatch": composition,
        "forward_states_per_s": speed,
        "sac_update_seconds": update_seconds,
    }
    print(f"SmolLM2-135M, {report['rows']} full-task rows, {args.threads} threads")
    g = report["log_pi_gap_bf16_vs_fp32"]
    print(f"log pi(a|s), bfloat16 against float32: max {g['max']:.3f}, mean {g['mean']:.3f}")
    print("rollout-pass log pi_old against the minibatch's own forward (the first step's |log ratio| before the fix):")
    for r in composition:
        print(
            f"  {r['dtype']:>8}, minibatch {r['minibatch_size']:>3}: max {r['max_abs_log_ratio']:.3f}, "
            f"mean {r['mean_abs_log_ratio']:.4f}, outside the clip range {100 * r['outside_clip_0.2']:.0f}%"
        )
    print("forward, 32 states: " + ", ".join(f"{d} {s:.1f} states/s" for d, s in speed.items()))
    print(
        "SAC update, batch 16, LoRA on the top 4 blocks: "
        + ", ".join(f"{d} {s:.2f} s" for d, s in update_seconds.items())
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


def sac_update_seconds(args: Args) -> dict[str, float]:
    """Median seconds of an SAC update of the study's agent in each dtype (after one warm-up)."""
    import torch

    from sacglam.config import AgentConfig, EnvConfig, SACConfig
    from sacglam.learner.sac import SACLearner
    from sacglam.models import GLAMAgent
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.worker import RolloutWorker

    env = EnvConfig.variant("simple")
    buffer = ReplayBuffer(100_000, 0.9, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 1024:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    batches = [buffer.sample(16, 3, "ratio") for _ in range(args.repeats + 1)]
    out = {}
    for dtype in ("float32", "bfloat16"):
        torch.manual_seed(0)
        agent = GLAMAgent(
            AgentConfig(
                model="smollm2-135m",
                lora_r=16,
                lora_layers=4,
                critic="action",
                critic_width=1024,
                n_critics=2,
                prompt_template="candidates",
                dtype=dtype,
                device="cpu",
            )
        ).eval()
        learner = SACLearner(agent, SACConfig.with_her(batch_size=16, gamma=0.9, critic_warmup_updates=0))
        learner.update(batches[0])
        seconds = []
        for batch in batches[1:]:
            start = time.perf_counter()
            learner.update(batch)
            seconds.append(time.perf_counter() - start)
        out[dtype] = statistics.median(seconds)
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
