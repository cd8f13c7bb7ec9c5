"""Autotelic mode against uniform goals: analyse finished trials of
`tune_configs/experiments/autotelic.yaml` (or single `sacglam train` runs of its trial configs),
like `benchmarks/studies/figure2.py` analyses a whole grid, and write the summary, the plot and the rows.

    .venv/bin/python benchmarks/studies/figure2.py --experiment tune_configs/experiments/autotelic.yaml --form cpu \\
        --storage runs/tune-autotelic --output benchmarks/studies/results/autotelic/cpu        # the whole grid
    .venv/bin/python benchmarks/studies/autotelic.py --directories runs/tune-autotelic/autotelic-cpu [more]  # finished trials

A directory holds one sub-directory per trial named `<variant>,seed=<n>` with the run in `run/`
(Tune's layout); trials that did not reach `--env-steps` are left out. Writes figure2.json
(per method: training success, the last evaluation per goal set and type, the goal sampler's
last figures and discovered/mastered curves), figure2.png and results.csv into `--output`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import tyro

from sacglam.experiments.figure2 import figure2_summary, plot_figure2
from sacglam.experiments.results import trial_rows
from sacglam.report import read_metrics


@dataclass(frozen=True)
class Args:
    directories: tuple[Path, ...]
    """Directories of trials (`<variant>,seed=<n>/run/metrics.jsonl`)."""
    output: Path = Path("benchmarks/studies/results/autotelic/cpu")
    env_steps: int = 64_512
    """Trials that logged fewer env steps are left out (unfinished)."""
    window: int = 6400
    """Env steps the training success looks back over."""


def main(args: Args) -> None:
    rows = []
    for root in args.directories:
        for trial in sorted(root.iterdir()):
            run = trial / "run"
            if ",seed=" not in trial.name or not (run / "metrics.jsonl").exists():
                continue
            records = read_metrics(run)
            if not records or max(r["env_steps"] for r in records) < args.env_steps:
                continue
            variant, seed = trial.name.split(",seed=")
            rows += trial_rows(trial.name, {"variant": variant, "seed": int(seed)}, run)
    summary = figure2_summary(rows, window=args.window)
    args.output.mkdir(parents=True, exist_ok=True)
    report = summary | {"trials": sorted({r["trial"] for r in rows}), "directories": [str(d) for d in args.directories]}
    (args.output / "figure2.json").write_text(json.dumps(report, indent=1, default=float))
    plot_figure2(summary, args.output / "figure2.png", "Autotelic mode at CPU scale: full task, 64.5k env steps")
    keys = sorted({k for r in rows for k in r})
    pacsv.write_csv(pa.table({k: [r.get(k) for r in rows] for k in keys}), args.output / "results.csv")
    print(f"{'method':<14} {'seeds':>5} {'train eval':>10} {'held-out eval':>13} {'discovered':>10}")
    for name, method in summary["methods"].items():
        e, g = method["evaluation"], method["goals"]
        discovered = g.get("goals/discovered", {}).get("mean", float("nan"))
        print(
            f"{name:<14} {len(method['seeds']):>5} {e['train/sampled/all']['mean']:>10.3f} "
            f"{e['test/sampled/all']['mean']:>13.3f} {discovered:>10.0f}"
        )
    print(f"wrote {args.output}/figure2.json, figure2.png, results.csv")


if __name__ == "__main__":
    main(tyro.cli(Args))
