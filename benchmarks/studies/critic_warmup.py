"""The critic warm-up, head only (pi frozen) against through the shared LLM weights: SAC-GLAM+HER on
the simplified and the full task, 3 seeds each, through `sacglam tune tune_configs/experiments/warmup.yaml`.

For each trial it reads the evaluation curve of the sampled policy on the train goals and reports:
- start: success before any update (the warm-started policy);
- early low: the lowest success at the evaluations up to `--early` env steps (the warm-up and the
  first policy updates: where a fresh critic can wreck the policy), and its drop below the start;
- final: sampled and greedy success on the train goals and sampled success on the held-out goals
  at the end of the budget, and the success of the last ~200 training episodes;
and the mean per configuration. Writes `<output>/<form>.json` and a copy of the results table.

    .venv/bin/python benchmarks/studies/critic_warmup.py --form cpu        # runs the grid (about 14 min), then analyses
    .venv/bin/python benchmarks/studies/critic_warmup.py --form cpu-full   # about 30 min
    .venv/bin/python benchmarks/studies/critic_warmup.py --results runs/tune/warmup-cpu   # analyse only
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import tyro

GRID_KEY = "sac.warmup_head_only"
LABELS = {True: "head only (pi frozen)", False: "shared weights"}


@dataclass(frozen=True)
class Args:
    form: str = "cpu"
    """`cpu` (simplified task, 15k env steps) or `cpu-full` (full task, 25.6k env steps)."""
    results: Path | None = None
    """Analyse this experiment directory instead of running the grid."""
    storage: Path = Path("runs/tune")
    early: int = 5000
    """Env steps that count as early (the warm-up is 100 updates: 1.6k env steps after learning starts)."""
    output: Path = Path("benchmarks/studies/results/critic_warmup")


def analyse(directory: Path, early: int) -> dict:
    import pyarrow.parquet as pq

    info = json.loads((directory / "experiment.json").read_text())
    metric = info["metric"]
    goals = metric.split("/")[1]
    held_out = metric.replace(f"/{goals}/", f"/{'simple-test' if goals == 'simple-train' else 'test'}/")
    greedy = metric.replace("/sampled/", "/greedy/")
    rows = pq.read_table(directory / "results.parquet").to_pylist()
    trials: dict[tuple, list[dict]] = defaultdict(list)
    training: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row.get(metric) is not None:
            trials[(row[GRID_KEY], row["seed"])].append(row)
        if row.get("train/success") is not None:
            training[(row[GRID_KEY], row["seed"])].append(row)
    per_trial = []
    for (head_only, seed), evals in sorted(trials.items(), key=lambda kv: (not kv[0][0], kv[0][1])):
        evals.sort(key=lambda r: r["env_steps"])
        curve = [r[metric] for r in evals]
        early_low = min(r[metric] for r in evals if 0 < r["env_steps"] <= early)
        per_trial.append(
            {
                "head_only": head_only,
                "seed": seed,
                "curve": curve,
                "env_steps": [r["env_steps"] for r in evals],
                "start": curve[0],
                "early_low": early_low,
                "early_drop": curve[0] - early_low,
                "final": curve[-1],
                "final_greedy": evals[-1][greedy],
                "final_held_out": evals[-1][held_out],
                "final_training": max(training[(head_only, seed)], key=lambda r: r["env_steps"])["train/success"],
            }
        )
    summary = {}
    for head_only in (True, False):
        runs = [t for t in per_trial if t["head_only"] is head_only]
        summary[LABELS[head_only]] = {
            key: statistics.mean(t[key] for t in runs)
            for key in ("start", "early_low", "early_drop", "final", "final_greedy", "final_held_out", "final_training")
        } | {"seeds": len(runs), "seeds_dropping_0.1_early": sum(t["early_drop"] >= 0.1 for t in runs)}
    return {
        "experiment": str(directory),
        "metric": metric,
        "early_env_steps": early,
        "trials": per_trial,
        "mean": summary,
    }


def main(args: Args) -> None:
    directory = args.results
    if directory is None:
        directory = args.storage / f"warmup-{args.form}"
        subprocess.run(
            [
                str(Path(sys.executable).parent / "sacglam"),
                "tune",
                "tune_configs/experiments/warmup.yaml",
                "--form",
                args.form,
                "--storage",
                str(args.storage),
            ],
            check=True,
        )
    result = analyse(directory, args.early)
    form = json.loads((directory / "experiment.json").read_text())["form"]
    print(f"{result['metric']}: start -> lowest up to {args.early} env steps -> final (sampled; greedy; held-out)")
    print(
        f"{'warm-up':<24} {'seed':>4} {'start':>6} {'early low':>9} {'final':>6} {'greedy':>6} {'held-out':>8} {'training':>8}"
    )
    for t in result["trials"]:
        print(
            f"{LABELS[t['head_only']]:<24} {t['seed']:>4} {t['start']:>6.2f} {t['early_low']:>9.2f} "
            f"{t['final']:>6.2f} {t['final_greedy']:>6.2f} {t['final_held_out']:>8.2f} {t['final_training']:>8.2f}"
        )
    for label, m in result["mean"].items():
        print(
            f"{label:<24} mean {m['start']:>6.2f} {m['early_low']:>9.2f} {m['final']:>6.2f} {m['final_greedy']:>6.2f} "
            f"{m['final_held_out']:>8.2f} {m['final_training']:>8.2f}   seeds dropping >= 0.1 early: "
            f"{m['seeds_dropping_0.1_early']}/{m['seeds']}"
        )
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{form}.json").write_text(json.dumps(result, indent=2))
    shutil.copy(directory / "results.csv", out / f"{form}-results.csv")
    if (directory / "plot.png").exists():
        shutil.copy(directory / "plot.png", out / f"{form}.png")
    print(f"wrote {out / f'{form}.json'}")


if __name__ == "__main__":
    main(tyro.cli(Args))
