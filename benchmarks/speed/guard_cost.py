"""The protocol guard's cost per env step: an environment written elsewhere (`module:Class`) is
stepped through `ProtocolGuard` (`sacglam/envs/guard.py`) in every run; this times the same
uniformly random play of the tests' Dial environment bare and guarded, on one core, and reports
the difference (best of `--repeats`, to keep other load out).

    .venv/bin/python benchmarks/speed/guard_cost.py [--steps 100000] [--repeats 5]

Prints a table and writes benchmarks/speed/results/guard_cost/guard_cost.json.
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium
import tyro

from sacglam.envs.guard import ProtocolGuard

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Args:
    steps: int = 100_000
    """Env steps per measurement."""
    repeats: int = 5
    """Measurements of each form; the fastest counts."""
    output: Path = Path("benchmarks/speed/results/guard_cost/guard_cost.json")


def _dial() -> type[gymnasium.Env]:
    """The tests' Dial environment (`tests/broken_envs.py`), a protocol environment of 4 steps."""
    sys.path.insert(0, str(ROOT))
    from tests.broken_envs import Dial

    return Dial


def microseconds_per_step(env: gymnasium.Env, steps: int) -> float:
    """Uniformly random candidates, episodes reset as they end (their resets included)."""
    rng = random.Random(0)
    _, info = env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            _, info = env.reset()
    return (time.perf_counter() - start) / steps * 1e6


def main(args: Args) -> dict:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    Dial = _dial()
    forms = {"bare": lambda: Dial(max_steps=6), "guarded": lambda: ProtocolGuard(Dial(max_steps=6))}
    best = {
        name: min(microseconds_per_step(make(), args.steps) for _ in range(args.repeats))
        for name, make in forms.items()
    }
    result = {
        "machine": platform.processor() or platform.machine(),
        "steps": args.steps,
        "repeats": args.repeats,
        "us_per_step": best,
        "guard_us_per_step": best["guarded"] - best["bare"],
    }
    print("| form | us per env step |\n| --- | --- |")
    for name, value in best.items():
        print(f"| {name} | {value:.2f} |")
    print(f"| the guard | {result['guard_us_per_step']:.2f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(tyro.cli(Args))
