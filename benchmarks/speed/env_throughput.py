"""Environment throughput: env-steps per second with a uniform-random policy, social partner on.

Measures the single environment and the vectorized form (`PlaygroundTextVector`, `TextVectorEnv`),
on Playground-Text's full task (6 objects, 8,470 goals, 30 steps) and simplified one (3 objects,
single goals, 8 steps), on BabyAI-Text's MixedLocal (4 objects, 40 steps; fewer steps per
measurement, it is slower) and on TextWorld treasure hunter games (levels 2, 4, 6, 10 games each,
10 steps; fewer still), pinned to one CPU core. Episodes auto-reset, so reset cost is
included. The random policy's own pick (`random.choice`) is included too: it is what the loop a
rollout worker runs costs, minus the model. For BabyAI-Text and TextWorld a third row times a
single environment driven by its expert (`expert_action()` at every step: the BabyAI bot,
TextWorld's walkthrough), the cost of the expert baseline.

    .venv/bin/python benchmarks/speed/env_throughput.py [--steps 200000] [--babyai-steps 20000] [--num-envs 32] [--repeats 3]
    .venv/bin/python benchmarks/speed/env_throughput.py --variants textworld --output benchmarks/speed/results/env_throughput/env_throughput_textworld.json

Prints a table and writes benchmarks/speed/results/env_throughput/env_throughput.json. Target (Playground-Text): >=
10,000 env-steps/s for the vectorized form on one core.
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
    """Env steps per measurement (Playground-Text)."""
    babyai_steps: int = 20_000
    """Env steps per measurement (BabyAI-Text)."""
    textworld_steps: int = 2_000
    """Env steps per measurement (TextWorld: an interpreter per game, milliseconds a step)."""
    variants: tuple[str, ...] = ("full", "simple", "babyai-mixed", "textworld")
    """What to measure: Playground-Text's full and simple, BabyAI-Text, TextWorld (the treasure
    hunter games of tune_configs/runs/textworld_sac_her.yaml)."""
    num_envs: int = 32
    """Environments in the vectorized form."""
    repeats: int = 3
    """Measurements per row; the median is reported."""
    output: Path = Path("benchmarks/speed/results/env_throughput/env_throughput.json")


def single_env_rate(env_config: EnvConfig, steps: int, seed: int) -> float:
    env, rng = env_config.make(), random.Random(seed)
    obs, info = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            obs, info = env.reset()
    return steps / (time.perf_counter() - start)


def expert_env_rate(env_config: EnvConfig, steps: int, seed: int) -> float:
    env = env_config.make()
    obs, info = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
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


def measure(form: str, env_config: EnvConfig, steps: int, num_envs: int, seed: int) -> float:
    if form == "single":
        return single_env_rate(env_config, steps, seed)
    if form == "single, bot":
        return expert_env_rate(env_config, steps, seed)
    return vector_env_rate(env_config, steps, num_envs, seed)


def main(args: Args) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    rows = []
    for variant in args.variants:
        expert = variant.startswith("babyai") or variant == "textworld"
        if variant == "textworld":
            env_config = EnvConfig(name="textworld", tw_challenge="treasure_hunter", tw_levels=(2, 4, 6), max_steps=10)
            steps = args.textworld_steps
        else:
            env_config = EnvConfig.variant(variant)  # type: ignore[arg-type]
            steps = args.babyai_steps if variant.startswith("babyai") else args.steps
        forms = ["single", f"vector x{args.num_envs}"] + (["single, bot"] if expert else [])
        for form in forms:
            rates = [measure(form, env_config, steps, args.num_envs, seed) for seed in range(args.repeats)]
            rate = statistics.median(rates)
            rows.append(
                {
                    "variant": variant,
                    "form": form,
                    "env_steps_per_s": rate,
                    "ms_per_env_step": 1000.0 / rate,
                    "all_runs": rates,
                }
            )
    print(f"{'variant':<13} {'form':<12} {'env-steps/s (median of ' + str(args.repeats) + ')':>30} {'ms/step':>9}")
    for row in rows:
        print(f"{row['variant']:<13} {row['form']:<12} {row['env_steps_per_s']:>30,.0f} {row['ms_per_env_step']:>9.4f}")
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
