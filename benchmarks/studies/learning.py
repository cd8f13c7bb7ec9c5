"""Learning curves: SAC-GLAM+HER, SAC-GLAM and PPO-GLAM on the simplified Playground-Text with the
tiny causal model, several seeds, the same env-step budget (the paper's figure 2 layout).

Each (config, seed) trains in its own process (`--workers` at a time, `--threads-per-worker`
torch threads each) through the project's own trainer. Success is the sampled policy's
evaluation on the train goals; greedy and held-out test-goal success are reported too.

    .venv/bin/python benchmarks/studies/learning.py [--seeds 0 1 2] [--workers 2]

Writes benchmarks/studies/results/learning/learning.json and learning.png, and prints a summary table with the
env steps each method needs to reach 0.8 sampled success.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

import tyro

CONFIGS = (
    "tune_configs/runs/cpu_simple_sac_her.yaml",
    "tune_configs/runs/cpu_simple_sac.yaml",
    "tune_configs/runs/cpu_simple_ppo.yaml",
)
THRESHOLD = 0.8


@dataclass(frozen=True)
class Args:
    configs: tuple[str, ...] = CONFIGS
    """Training configs (YAML) to compare."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds per config."""
    workers: int = 2
    """Training processes at a time."""
    threads_per_worker: int = 1
    """torch threads per process."""
    total_env_steps: int | None = None
    """Override every config's budget (None: the configs' own)."""
    output: Path = Path("benchmarks/studies/results/learning/learning")
    """Output prefix: <output>.json, <output>.png; runs go under runs/learning/."""


def run_one(config_path: str, seed: int, threads: int, total_env_steps: int | None) -> dict:
    """Train one (config, seed) in this process; return its evaluation records."""
    import warnings

    import torch

    from sacglam.config import TrainConfig
    from sacglam.config_io import load_yaml_config
    from sacglam.pipeline.run import run_pipeline
    from sacglam.report import read_metrics

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    cfg = load_yaml_config(TrainConfig, config_path)
    out = Path("runs/learning") / f"{Path(config_path).stem}-seed{seed}"
    cfg = replace(
        cfg, seed=seed, output_dir=out, progress=False, total_env_steps=total_env_steps or cfg.total_env_steps
    )
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time (a run refuses a directory with checkpoints)
    start = time.perf_counter()
    run_pipeline(cfg)
    records = read_metrics(out)
    goals, held_out = cfg.env.goals, cfg.env.held_out.goals
    evals = [
        {
            "env_steps": r["env_steps"],
            "train_seconds": r["time/train_seconds"],
            "sampled": r[f"eval/{goals}/sampled/all"],
            "greedy": r[f"eval/{goals}/greedy/all"],
            "test_sampled": r[f"eval/{held_out}/sampled/all"],
            "test_greedy": r[f"eval/{held_out}/greedy/all"],
        }
        for r in records
        if f"eval/{goals}/sampled/all" in r
    ]
    return {
        "config": config_path,
        "algo": cfg.algo,
        "seed": seed,
        "evals": evals,
        "wall_seconds": time.perf_counter() - start,
    }


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarise(runs: list[dict]) -> dict:
    by_algo: dict[str, list[dict]] = {}
    for run in runs:
        by_algo.setdefault(run["algo"], []).append(run)
    summary = {}
    for algo, seeds in by_algo.items():
        steps = [e["env_steps"] for e in seeds[0]["evals"]]
        curve = {}
        for key in ("sampled", "greedy", "test_sampled", "test_greedy", "train_seconds"):
            per_step = [[s["evals"][i][key] for s in seeds] for i in range(len(steps))]
            curve[key] = [mean_std(v) for v in per_step]
        reach = []
        for s in seeds:
            hits = [e["env_steps"] for e in s["evals"] if e["sampled"] >= THRESHOLD]
            reach.append(hits[0] if hits else None)
        summary[algo] = {
            "seeds": [s["seed"] for s in seeds],
            "env_steps": steps,
            "curve": curve,
            "steps_to_0.8_per_seed": reach,
            "final": {k: curve[k][-1] for k in ("sampled", "greedy", "test_sampled", "test_greedy")},
            "train_seconds_final": curve["train_seconds"][-1],
        }
    return summary


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for algo, s in summary.items():
        mean = [m for m, _ in s["curve"]["sampled"]]
        std = [d for _, d in s["curve"]["sampled"]]
        seconds = [m for m, _ in s["curve"]["train_seconds"]]
        label = {"sac-her": "SAC-GLAM+HER", "sac": "SAC-GLAM", "ppo": "PPO-GLAM"}.get(algo, algo)
        for ax, x in ((by_steps, s["env_steps"]), (by_time, seconds)):
            ax.plot(x, mean, label=label)
            ax.fill_between(x, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)], alpha=0.2)
    by_steps.set_xlabel("environment steps")
    by_time.set_xlabel("training time (s, evaluations excluded)")
    by_steps.set_ylabel("success rate (sampled policy, train goals)")
    for ax in (by_steps, by_time):
        ax.axhline(THRESHOLD, color="grey", lw=0.5, ls="--")
        ax.grid(alpha=0.3)
    by_steps.legend()
    fig.suptitle("Simplified Playground-Text, tiny causal model: mean and std over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args: Args) -> None:
    jobs = [(c, s) for c in args.configs for s in args.seeds]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run_one, c, s, args.threads_per_worker, args.total_env_steps) for c, s in jobs]
        runs = []
        for future in futures:
            runs.append(future.result())
            print(f"done: {runs[-1]['config']} seed {runs[-1]['seed']} ({runs[-1]['wall_seconds']:.0f} s)", flush=True)
    summary = summarise(runs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "learning",
        "args": {k: str(v) for k, v in vars(args).items()},
        "wall_seconds": time.perf_counter() - start,
        "summary": summary,
        "runs": runs,
    }
    args.output.with_suffix(".json").write_text(json.dumps(report, indent=2))
    plot(summary, args.output.with_suffix(".png"))
    print(
        f"\n{'method':<8} {'steps to 0.8 (per seed)':<26} {'final sampled':>14} {'final greedy':>13} {'test sampled':>13} {'train s':>8}"
    )
    for algo, s in summary.items():
        reach = ", ".join("-" if r is None else f"{r / 1000:.1f}k" for r in s["steps_to_0.8_per_seed"])
        f = s["final"]
        print(
            f"{algo:<8} {reach:<26} {f['sampled'][0]:>8.2f}±{f['sampled'][1]:.2f} {f['greedy'][0]:>7.2f}±{f['greedy'][1]:.2f} "
            f"{f['test_sampled'][0]:>7.2f}±{f['test_sampled'][1]:.2f} {s['train_seconds_final'][0]:>8.0f}"
        )
    print(f"total wall time {report['wall_seconds']:.0f} s; wrote {args.output.with_suffix('.json')} and .png")


if __name__ == "__main__":
    main(tyro.cli(Args))
