"""What SAC-GLAM's health figures and the critic's own weights cost per update: seconds per
`SACLearner.update` of the tiny model on replay batches of the simplified task, with the paper's
shared weights against `agent.critic_weights: own` (the critic's copy of the top 1 or 2 blocks),
and with the per-loss gradient norms measured every 16 updates against never.

Every setting is timed in rounds, one after another within a round, so that a machine that slows
down mid-run slows them alike; the figure is the median over rounds of each round's mean.

    .venv/bin/python benchmarks/speed/update_cost.py [--rounds 5] [--updates 32] [--threads 1]

Prints a table and writes benchmarks/speed/results/update_cost/update_cost.json.
"""

from __future__ import annotations

import datetime
import json
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

SETTINGS = {
    "shared, diagnostics every 16": ({}, {}),
    "shared, no diagnostics": ({}, {"grad_diagnostics_every": 0}),
    "own critic (1 block), diagnostics every 16": ({"critic_weights": "own", "critic_blocks": 1}, {}),
    "own critic (2 blocks), diagnostics every 16": ({"critic_weights": "own", "critic_blocks": 2}, {}),
}


@dataclass(frozen=True)
class Args:
    config: str = "tune_configs/runs/cpu_simple_sac_her.yaml"
    """The run config whose agent and SAC settings are timed (batch 128, twin critics)."""
    rounds: int = 5
    updates: int = 32
    """Timed updates per setting and round (after 4 warm-up updates in the first)."""
    threads: int = 1
    output: Path = Path("benchmarks/speed/results/update_cost/update_cost.json")


def main(args: Args) -> None:
    import torch

    from sacglam.config import EnvConfig, TrainConfig
    from sacglam.config_io import load_yaml_config
    from sacglam.learner.sac import SACLearner
    from sacglam.models.agent import GLAMAgent
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.worker import RolloutWorker

    torch.set_num_threads(args.threads)
    cfg = load_yaml_config(TrainConfig, args.config)
    env = EnvConfig.variant("simple")
    buffer = ReplayBuffer(100_000, cfg.sac.gamma, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 4096:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    batches = [buffer.sample(cfg.sac.batch_size, cfg.sac.n_step, "ratio") for _ in range(args.updates)]
    learners = {}
    for name, (agent_changes, sac_changes) in SETTINGS.items():
        torch.manual_seed(0)
        agent = GLAMAgent(replace(cfg.agent, **agent_changes)).eval()
        learner = SACLearner(agent, replace(cfg.sac, critic_warmup_updates=0, **sac_changes))
        for batch in batches[:4]:
            learner.update(batch)
        learners[name] = learner
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            start = time.perf_counter()
            for batch in batches:
                learner.update(batch)
            seconds[name].append((time.perf_counter() - start) / len(batches))
    base = statistics.median(seconds["shared, diagnostics every 16"])
    rows = [
        {
            "setting": name,
            "seconds_per_update": statistics.median(values),
            "per_round": values,
            "relative_to_shared_with_diagnostics": statistics.median(values) / base,
        }
        for name, values in seconds.items()
    ]
    print(f"{'setting':<46} {'ms/update':>10} {'x shared':>9}")
    for row in rows:
        print(
            f"{row['setting']:<46} {1000 * row['seconds_per_update']:>10.1f} {row['relative_to_shared_with_diagnostics']:>9.3f}"
        )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "")
    isa = "AVX-512" if " avx512f" in flags else "AVX2"
    report = {
        "provenance": {
            "command": f".venv/bin/python benchmarks/speed/update_cost.py --rounds {args.rounds} --updates "
            f"{args.updates} --threads {args.threads}",
            "commit": commit,
            "machine": f"{model or platform.processor()}, {isa}, {args.threads} torch thread(s)",
            "date": datetime.date.today().isoformat(),
        },
        "benchmark": "update_cost",
        "config": args.config,
        "batch_size": cfg.sac.batch_size,
        "results": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
