"""Playground-Text throughput: env-steps per second with a uniform-random policy, social partner on.

Measures the single environment and the vectorized form (`PlaygroundTextVector`), on the full task
(6 objects, 8,470 goals, 30 steps) and the simplified one (3 objects, single goals, 8 steps), pinned
to one CPU core. Episodes auto-reset, so reset cost is included. The random policy's own pick
(`random.choice`) is included too: it is what the loop a rollout worker runs costs, minus the model.

    .venv/bin/python benchmarks/env_throughput.py [--steps 200000] [--num-envs 32] [--repeats 3]

Prints a table and writes benchmarks/results/env_throughput.json. Target: >= 10,000 env-steps/s for
the vectorized form on one core.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from sacglam.config import EnvConfig


@dataclass(frozen=True)
class Args:
    steps: int = 200_000
    """Env steps per measurement."""
    num_envs: int = 32
    """Environments in the vectorized form."""
    repeats: int = 3
    """Measurements per row; the median is reported."""
    output: Path = Path("benchmarks/results/env_throughput.json")


def single_env_rate(env_config: EnvConfig, steps: int, seed: int) -> float:
    env, rng = env_config.make(), random.Random(seed)
    obs, info = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            obs, info = env.reset()
    return steps / (time.perf_counter() - start)


def vector_env_rate(env_config: EnvConfig, steps: int, num_envs: int, seed: int) -> float:
    vec, rng = env_config.make_vector(num_envs), random.Random(seed)
    obs, info = vec.reset(seed=seed)
    calls = max(1, steps // num_envs)
    start = time.perf_counter()
    for _ in range(calls):
        obs, rewards, terminated, truncated, info = vec.step([rng.choice(c) for c in info["candidates"]])
    return calls * num_envs / (time.perf_counter() - start)


def main(args: Args) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    rows = []
    for variant in ("full", "simple"):
        env_config = EnvConfig.variant(variant)
        for form in ("single", f"vector x{args.num_envs}"):
            rates = [
                single_env_rate(env_config, args.steps, seed)
                if form == "single"
                else vector_env_rate(env_config, args.steps, args.num_envs, seed)
                for seed in range(args.repeats)
            ]
            rows.append(
                {"variant": variant, "form": form, "env_steps_per_s": statistics.median(rates), "all_runs": rates}
            )
    print(f"{'variant':<8} {'form':<12} {'env-steps/s (median of ' + str(args.repeats) + ')':>30}")
    for row in rows:
        print(f"{row['variant']:<8} {row['form']:<12} {row['env_steps_per_s']:>30,.0f}")
    report = {
        "benchmark": "env_throughput",
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {"python": platform.python_version(), "processor": platform.processor(), "cores_used": 1},
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
