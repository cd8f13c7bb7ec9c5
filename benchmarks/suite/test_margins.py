"""The margins of every test whose assertion depends on a training run: each test's statistic
measured on several seeds and on several CPU kernel sets, against the threshold the test asserts.

Floating-point results differ between CPUs (AVX-512 against AVX2 kernels) as they do between
seeds, and a training run turns a difference in the last bit into another trajectory. A test that
trains must pass on any correct machine, so its margin is measured here under each kernel set
this machine can run, each job a fresh process with the kernel switches set before torch loads:

- `native`: the machine's own kernels (AVX-512 where the CPU has it);
- `avx2`: `ATEN_CPU_CAPABILITY=avx2`, `ONEDNN_MAX_CPU_ISA=AVX2`, `MKL_ENABLE_INSTRUCTIONS=AVX2`:
  what an AVX2-only machine runs (an AVX2 machine cannot run AVX-512 kernels);
- `default`: `ATEN_CPU_CAPABILITY=default`, ATen's kernels without vector instructions: another
  rounding still, as a stand-in for a third kind of CPU.

    .venv/bin/python benchmarks/suite/test_margins.py [--tests learning sanity critic newcomer] [--seeds 0 1 2] [--kernels native default]

Writes benchmarks/suite/results/test_margins/test_margins.json (every job's statistic, its kernel set as torch
reports it, its seconds) and prints per test the statistic on every seed and kernel set, the
threshold and the smallest margin. Each job runs on one torch thread, `--workers` at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[2]
KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
}
TESTS = ("learning", "sanity", "critic", "newcomer")


@dataclass(frozen=True)
class Args:
    tests: tuple[str, ...] = TESTS
    seeds: tuple[int, ...] = (0, 1, 2)
    kernels: tuple[str, ...] = ("native", "default")
    workers: int = 2
    """Jobs at a time (one torch thread each)."""
    sanity_budget: int | None = None
    """Run every sanity job to this many env steps instead of its test's budget (evaluations every
    1,024 all the same): the curves a new budget is chosen from."""
    sanity_extra: int = 0
    """Run every sanity job this many env steps past its test's budget (capped at 8,192); the
    statistic is still read at the test's budget, the rest of the curve shows what more would give."""
    output: Path = Path("benchmarks/suite/results/test_margins/test_margins.json")
    table_only: bool = False
    """Print the table of the output's runs, as the tests read them today, and run nothing."""
    merge: bool = True
    """Keep the jobs of an earlier output that this run does not redo (other tests, seeds or kernels)."""


# ---------------------------------------------------------------------------- jobs (in a child process)


def job_specs(test: str, sanity_budget: int | None = None, sanity_extra: int = 0) -> list[dict]:
    """The jobs of one test, per seed: each a dict naming what to run."""
    sys.path.insert(0, str(ROOT))
    if test == "sanity":
        from tests.test_sanity import TARGETS

        return [{"test": "sanity", "environment": e, "method": m,
                 "budget": sanity_budget or max(b, min(b + sanity_extra, 8192))}
                for (e, m), (b, _) in TARGETS.items()]  # fmt: skip
    if test == "critic":
        return [{"test": "critic", "objective": o} for o in ("uniform", "likelihood")]
    return [{"test": test}]


def run_job(spec: dict, seed: int) -> dict:
    """Run one job in this process; returns its statistics (what the test asserts on)."""
    import tempfile

    import torch

    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if spec["test"] == "learning":
            from sacglam.pipeline.run import run_pipeline
            from tests.test_sac_training import learning_curve, learning_rise, learning_test_config

            run_pipeline(learning_test_config(seed, Path(tmp) / "run"), announce=lambda _: None)
            curve = learning_curve(Path(tmp) / "run")
            return {"curve": curve, "statistic": learning_rise(curve)}
        if spec["test"] == "sanity":
            from tests.test_sanity import EVAL_EVERY, SANITY, TARGETS, sanity_statistic

            budget = spec["budget"]
            result = SANITY.train_and_evaluate(
                spec["environment"], spec["method"], seed, budget, EVAL_EVERY, Path(tmp) / "run", sampled=False
            )
            test_budget = TARGETS[spec["environment"], spec["method"]][0]
            curve = [point for point in result["curve"] if point[0] <= test_budget]
            return {"curve": result["curve"], "statistic": sanity_statistic(curve)}
        if spec["test"] == "critic":
            from tests.test_sanity import critic_fit_error

            return {"statistic": critic_fit_error(spec["objective"], seed)}
        if spec["test"] == "newcomer":
            from tests.test_exploration import newcomer_run

            return newcomer_run(seed, Path(tmp) / "run")
    raise ValueError(f"unknown test {spec['test']!r}")


# ---------------------------------------------------------------------------- the parent


def launch(spec: dict, seed: int, kernel: str) -> dict:
    """`run_job` in a fresh process under `kernel`'s switches."""
    env = {**os.environ, **KERNELS[kernel], "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--job", json.dumps({"spec": spec, "seed": seed})],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"job {spec} seed {seed} kernel {kernel} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**spec, "seed": seed, "kernel": kernel, "seconds": time.perf_counter() - start, **result}


def thresholds() -> dict[str, tuple[str, float]]:
    """Per job label: (`>=` or `<`, the threshold its test asserts)."""
    sys.path.insert(0, str(ROOT))
    from tests.test_exploration import NEWCOMER_MIN_GAIN, NEWCOMER_MIN_UNTRAINED_RATIO
    from tests.test_sac_training import LEARNING_TEST_MIN_RISE
    from tests.test_sanity import CRITIC_FIT_BLIND, CRITIC_FIT_READS, TARGETS

    out = {"learning": (">=", LEARNING_TEST_MIN_RISE), "critic/uniform": ("<", CRITIC_FIT_READS),
           "critic/likelihood": (">", CRITIC_FIT_BLIND), "newcomer/untrained_ratio": (">=", NEWCOMER_MIN_UNTRAINED_RATIO),
           "newcomer/gain": (">=", NEWCOMER_MIN_GAIN)}  # fmt: skip
    out |= {f"sanity/{e}/{m}": (">=", target) for (e, m), (_, target) in TARGETS.items()}
    return out


def label(run: dict) -> list[tuple[str, float | None]]:
    """(label, statistic) pairs of a job, the statistic read as the test reads it now: a sanity
    run's at its test's budget of today (None when the run stopped short of it)."""
    if run["test"] == "sanity":
        sys.path.insert(0, str(ROOT))
        from tests.test_sanity import TARGETS, sanity_statistic

        budget = TARGETS[run["environment"], run["method"]][0]
        curve = [point for point in run["curve"] if point[0] <= budget]
        value = sanity_statistic(curve) if curve[-1][0] == budget else None
        return [(f"sanity/{run['environment']}/{run['method']}", value)]
    if run["test"] == "critic":
        return [(f"critic/{run['objective']}", run["statistic"])]
    if run["test"] == "newcomer":
        return [("newcomer/untrained_ratio", run["untrained_ratio"]), ("newcomer/gain", run["gain"])]
    return [(run["test"], run["statistic"])]


def margin(direction: str, threshold: float, value: float) -> float:
    return value - threshold if direction in (">=", ">") else threshold - value


def print_table(runs: list[dict]) -> None:
    """Per test statistic: its value on every seed and kernel set, the threshold, the smallest
    margin (negative: a run that fails the test), as a Markdown table."""
    limits = thresholds()
    rows: dict[str, dict[tuple[int, str], float | None]] = {}
    for run in runs:
        for name, value in label(run):
            rows.setdefault(name, {})[run["seed"], run["kernel"]] = value
    seeds = sorted({seed for cells in rows.values() for seed, _ in cells})
    kernels = sorted({kernel for cells in rows.values() for _, kernel in cells}, key=list(KERNELS).index)
    head = [f"seed {seed} ({', '.join(kernels)})" for seed in seeds]
    print("| test statistic | " + " | ".join(head) + " | threshold | smallest margin |")
    print("| --- " * (len(head) + 3) + "|")
    for name in sorted(rows):
        direction, threshold = limits[name]
        cells = rows[name]
        per_seed = [
            ", ".join("-" if cells.get((s, k)) is None else f"{cells[s, k]:.3f}" for k in kernels) for s in seeds
        ]
        measured = [v for v in cells.values() if v is not None]
        smallest = min(margin(direction, threshold, v) for v in measured) if measured else float("nan")
        print(f"| {name} | " + " | ".join(per_seed) + f" | {direction} {threshold:g} | {smallest:.3f} |")


RUN_KEYS = ("test", "environment", "method", "objective", "budget", "seed", "kernel")


def run_key(run: dict) -> str:
    return json.dumps({k: v for k, v in run.items() if k in RUN_KEYS}, sort_keys=True)


def main(args: Args) -> None:
    if args.table_only:
        print_table(json.loads(args.output.read_text())["runs"])
        return
    jobs = [(spec, seed, kernel) for test in args.tests for spec in job_specs(test, args.sanity_budget, args.sanity_extra)
            for seed in args.seeds for kernel in args.kernels]  # fmt: skip
    jobs.sort(key=lambda job: -job[0].get("budget", 0))  # the longest first, so the workers end together
    earlier = json.loads(args.output.read_text()).get("runs", []) if args.merge and args.output.exists() else []
    redone = {run_key({**spec, "seed": seed, "kernel": kernel}) for spec, seed, kernel in jobs}
    kept = [r for r in earlier if "test" in r and run_key(r) not in redone]
    runs: list[dict] = []
    failures: list[str] = []
    lock = threading.Lock()

    def save() -> None:  # after every job, so a run cut short keeps what it measured
        args.output.parent.mkdir(parents=True, exist_ok=True)
        body = {"kernels": {k: KERNELS[k] for k in args.kernels}, "runs": kept + runs}
        args.output.write_text(json.dumps(body, indent=2))

    def one(job: tuple[dict, int, str]) -> None:
        try:
            run = launch(*job)
        except RuntimeError as error:
            with lock:
                failures.append(str(error))
            print(str(error).splitlines()[0], file=sys.stderr, flush=True)
            return
        with lock:
            runs.append(run)
            save()
        print(f"{len(runs) + len(failures)}/{len(jobs)} {label(run)} {run['kernel']} seed {run['seed']} "
              f"{run['seconds']:.0f} s", flush=True)  # fmt: skip

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, jobs))
    save()
    print_table(kept + runs)
    if failures:
        raise SystemExit(f"{len(failures)} job(s) failed; the first:\n{failures[0]}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        job = json.loads(sys.argv[2])
        import torch

        result = run_job(job["spec"], job["seed"])
        print(json.dumps({**result, "capability": torch.backends.cpu.get_cpu_capability()}))
    else:
        main(tyro.cli(Args))
