"""The learning test's margins: `tests/test_sac_training.py::test_sac_her_learns_the_simplified_task`
run over several seeds and torch thread counts (floating-point results differ between thread
counts as they do between CPUs), with the rise it asserts and the margin each run clears it by.

    .venv/bin/python benchmarks/test_margins.py [--seeds 0 1 2 3 4] [--threads 1 2]

Writes benchmarks/results/test_margins.json and prints a table. Each run is a separate process;
as many run at once as the cores hold at that thread count (torch threads that outnumber the
cores spin against each other and slow a run down many times over).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Seeds of the learning test's run (the test itself runs seed 0)."""
    threads: tuple[int, ...] = (1, 2)
    """torch thread counts (the test itself runs on 1)."""
    output: Path = Path("benchmarks/results/test_margins.json")


def run_one(seed: int, threads: int) -> dict:
    import torch

    sys.path.insert(0, str(ROOT))
    from sacglam.pipeline.run import run_pipeline
    from tests.test_sac_training import learning_curve, learning_rise, learning_test_config

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        run_pipeline(learning_test_config(seed, Path(tmp) / "run"))
        seconds = time.perf_counter() - start
        curve = learning_curve(Path(tmp) / "run")
    return {"seed": seed, "threads": threads, "curve": curve, "rise": learning_rise(curve), "seconds": seconds}


def main(args: Args) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.test_sac_training import LEARNING_TEST_MIN_RISE

    runs = []
    for threads in args.threads:
        workers = max(1, (os.cpu_count() or 1) // threads)
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            runs += list(pool.map(run_one, args.seeds, [threads] * len(args.seeds)))
    print(
        "learning test: sampled train-goal success at 0, 3k, 6k, 9k, 12k env steps; rise: the best after 0 minus 0; "
        f"asserted rise >= {LEARNING_TEST_MIN_RISE}"
    )
    print(f"{'seed':>4} {'threads':>7}  {'curve':<40} {'rise':>6} {'margin':>7} {'seconds':>8}")
    for r in runs:
        curve = " ".join(f"{v:.3f}" for v in r["curve"])
        print(
            f"{r['seed']:>4} {r['threads']:>7}  {curve:<40} {r['rise']:>6.3f} {r['rise'] - LEARNING_TEST_MIN_RISE:>7.3f} {r['seconds']:>8.0f}"
        )
    worst = min(r["rise"] for r in runs)
    print(f"smallest rise {worst:.3f}: {worst / LEARNING_TEST_MIN_RISE:.1f}x the asserted {LEARNING_TEST_MIN_RISE}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"min_rise": LEARNING_TEST_MIN_RISE, "runs": runs}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(Args))
