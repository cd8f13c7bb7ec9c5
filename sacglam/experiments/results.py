"""An experiment's results: one tidy table, the paper's plot layout and a summary.

The table (`results.csv`, `results.parquet`) has one row per trial and env step: the trial's name,
its coordinates (variant, grid values, seed), its `budget` (total_env_steps), `env_steps`,
`seconds` (training time, evaluations excluded) and every metric logged at that step (training
and evaluation records merged).

`sacglam plot DIR` reads it and writes `plot.png` (success against env steps and against seconds,
mean and standard deviation over seeds, one curve per configuration) and `summary.md` (final
success, env steps to 0.8, area under the curve; seeds whose trial stopped before its budget are
counted as unfinished).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sacglam.errors import UserInputError
from sacglam.report import METRICS_FILE, read_metrics


class ExperimentNotFoundError(UserInputError, FileNotFoundError):
    """A directory that holds no experiment results (or no Tune experiment to resume)."""


THRESHOLD = 0.8


class UnknownMetricError(UserInputError, KeyError):
    """A metric no trial of the experiment logged."""


def trial_rows(
    trial_name: str, coordinates: dict[str, Any], run_dir: Path, budget: int | None = None
) -> list[dict[str, Any]]:
    """One row per env step of a run's `metrics.jsonl` (`budget`: the trial's total_env_steps)."""
    by_step: dict[int, dict[str, Any]] = {}
    for record in read_metrics(run_dir):
        by_step.setdefault(record["env_steps"], {}).update(record)
    rows = []
    for step in sorted(by_step):
        record = by_step[step]
        row = (
            {"trial": trial_name}
            | {k: v for k, v in coordinates.items()}
            | {"budget": budget, "env_steps": step, "seconds": record.get("time/train_seconds")}
        )
        row |= {k: v for k, v in record.items() if k not in ("env_steps",) and isinstance(v, (int, float))}
        rows.append(row)
    return rows


def write_results_table(experiment_dir: Path, experiment, trial_paths: dict[str, Path]) -> Path:
    rows = []
    for trial in experiment.trials:  # the experiment's order: grid values as written, seeds last
        run_dir = trial_paths[trial.name] / "run" if trial.name in trial_paths else None
        if run_dir is not None and (run_dir / METRICS_FILE).exists():
            rows += trial_rows(trial.name, trial.coordinates, run_dir, trial.train_config().total_env_steps)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = pa.table({c: [row.get(c) for row in rows] for c in columns}) if rows else pa.table({})
    pq.write_table(table, experiment_dir / "results.parquet")
    pacsv.write_csv(table, experiment_dir / "results.csv")
    return experiment_dir / "results.parquet"


# ------------------------------------------------------------------ summary and plot


def _configuration(row: dict[str, Any], coordinate_keys: list[str]) -> str:
    """`variant, key=value, ...` without the seed (the curves average over it)."""
    parts = [] if row.get("variant") in (None, "default") else [str(row["variant"])]
    parts += [
        f"{k.split('.')[-1]}={row[k]}"
        for k in coordinate_keys
        if k not in ("seed", "variant") and row.get(k) is not None
    ]
    return ", ".join(parts) or "default"


def load_table(experiment_dir: Path) -> list[dict[str, Any]]:
    """The rows of an experiment's results table: `results.parquet`, or `results.csv` (the copy
    the benchmarks keep under benchmarks/studies/results/; empty cells read as None)."""
    experiment_dir = Path(experiment_dir)
    if (experiment_dir / "results.parquet").exists():
        return pq.read_table(experiment_dir / "results.parquet").to_pylist()
    if (experiment_dir / "results.csv").exists():
        return pacsv.read_csv(experiment_dir / "results.csv").to_pylist()
    raise ExperimentNotFoundError(
        f"{experiment_dir} holds no results.parquet or results.csv: pass the directory `sacglam tune` "
        "wrote (<storage>/<experiment>-<form>/) or a copy under benchmarks/studies/results/"
    )


def curves(rows: list[dict[str, Any]], metric: str, coordinate_keys: list[str]) -> dict[str, dict[Any, list[tuple]]]:
    """configuration -> seed -> [(env_steps, seconds, value)] for the rows that have the metric."""
    out: dict[str, dict[Any, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        value = row.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        out[_configuration(row, coordinate_keys)][row.get("seed")].append(
            (row["env_steps"], row.get("seconds") or 0.0, value)
        )
    return out


ENDED_BY_DESIGN = ("run/time_limit_at", "run/stopped_early_at")  # a trial that stopped where it was told to


def short_of_budget(rows: list[dict[str, Any]], budgets: dict[str, int] | None = None) -> set[str]:
    """The trials whose last record is before their budget (`budgets`, else the table's `budget`
    column), other than those that ended at their `time_limit_s` (or a stop rule): interrupted
    or failed."""
    reached: dict[str, tuple[int, Any]] = {}
    by_design = set()
    for row in rows:
        if row["env_steps"] >= reached.get(row["trial"], (-1, None))[0]:
            reached[row["trial"]] = (int(row["env_steps"]), row.get("budget"))
        if any(row.get(key) is not None for key in ENDED_BY_DESIGN):
            by_design.add(row["trial"])
    if budgets is not None:
        reached = {t: (steps, budgets.get(t)) for t, (steps, _) in reached.items()}
    return {t for t, (steps, budget) in reached.items() if budget is not None and steps < budget} - by_design


def incomplete_trials(experiment, rows: list[dict[str, Any]]) -> list[str]:
    """The names of the experiment's trials that are short of their budget (`short_of_budget`) or
    have no record: interrupted, failed, or not started; a resume continues them."""
    budgets = {t.name: t.train_config().total_env_steps for t in experiment.trials}
    recorded, short = {row["trial"] for row in rows}, short_of_budget(rows, budgets)
    return [t.name for t in experiment.trials if t.name not in recorded or t.name in short]


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def summarize(per_seed: dict[Any, list[tuple]]) -> dict[str, Any]:
    finals, first_hits, areas = [], [], []
    for points in per_seed.values():
        points = sorted(points)
        finals.append(points[-1][2])
        hit = next((s for s, _, v in points if v >= THRESHOLD), None)
        first_hits.append(hit)
        span = points[-1][0] - points[0][0]
        area = sum((b[0] - a[0]) * (a[2] + b[2]) / 2 for a, b in zip(points, points[1:]))
        areas.append(area / span if span else points[0][2])
    final_mean, final_std = _mean_std(finals)
    auc_mean, _ = _mean_std(areas)
    return {
        "seeds": len(finals),
        "final_mean": final_mean,
        "final_std": final_std,
        "steps_to_threshold": first_hits,
        "auc": auc_mean,
    }


def plot_experiment(experiment_dir: str | Path, metric: str | None = None) -> tuple[Path, Path]:
    """Write plot.png and summary.md for an experiment directory made by `sacglam tune`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    experiment_dir = Path(experiment_dir)
    if not (experiment_dir / "results.parquet").exists():
        raise ExperimentNotFoundError(
            f"{experiment_dir} has no results.parquet: give a directory written by `sacglam tune`"
        )
    info_path = experiment_dir / "experiment.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    rows = load_table(experiment_dir)
    logged = sorted({k for row in rows for k, v in row.items() if k.startswith("eval/") and v is not None})
    if not logged:
        raise ExperimentNotFoundError(f"{experiment_dir}: no trial has an evaluation record yet; nothing to plot")
    metric = metric or info.get("metric") or next((k for k in logged if k.endswith("/sampled/all")), logged[0])
    if not any(row.get(metric) is not None for row in rows):
        shown = ", ".join(k for k in logged if k.endswith("/all")) or ", ".join(logged[:8])
        raise UnknownMetricError(
            f"no trial in {experiment_dir} logged the metric {metric!r}: choose one of {shown} (--metric)"
        )
    coordinate_keys = ["variant", *info.get("grid_keys", []), "seed"]
    data = curves(rows, metric, coordinate_keys)
    stopped = defaultdict(set)  # configuration -> seeds whose trial ended before its budget
    short = short_of_budget(rows)
    for row in rows:
        if row["trial"] in short:
            stopped[_configuration(row, coordinate_keys)].add(row.get("seed"))
    fig, (by_steps, by_seconds) = plt.subplots(1, 2, figsize=(12, 4.5))
    lines = [
        f"# {info.get('experiment', experiment_dir.name)} ({info.get('form', '')})",
        "",
        info.get("description", ""),
        "",
        f"Metric: `{metric}`; mean ± standard deviation over seeds (population, ddof 0); area under the curve "
        "normalised by the env-step range. `(k unfinished)`: k seeds whose trial stopped before its budget, other than "
        "at its time limit (their last record counts as final).",
        "",
        f"| configuration | seeds | final | env steps to {THRESHOLD} (per seed) | AUC |",
        "| --- | --- | --- | --- | --- |",
    ]
    for configuration, per_seed in data.items():  # in the experiment's trial order
        steps = sorted({s for points in per_seed.values() for s, _, _ in points})
        common = [s for s in steps if all(any(p[0] == s for p in pts) for pts in per_seed.values())]
        stats = [_mean_std([next(p[2] for p in pts if p[0] == s) for pts in per_seed.values()]) for s in common]
        seconds = [_mean_std([next(p[1] for p in pts if p[0] == s) for pts in per_seed.values()])[0] for s in common]
        means = [m for m, _ in stats]
        lows = [m - sd for m, sd in stats]
        highs = [m + sd for m, sd in stats]
        for axis, x in ((by_steps, common), (by_seconds, seconds)):
            axis.plot(x, means, marker="o", markersize=3, label=configuration)
            axis.fill_between(x, lows, highs, alpha=0.2)
        summary = summarize(per_seed)
        hits = ", ".join("not reached" if h is None else f"{h / 1000:.1f}k" for h in summary["steps_to_threshold"])
        unfinished = f" ({len(stopped[configuration])} unfinished)" if stopped.get(configuration) else ""
        lines.append(
            f"| {configuration} | {summary['seeds']}{unfinished} | {summary['final_mean']:.2f} ± {summary['final_std']:.2f} "
            f"| {hits} | {summary['auc']:.2f} |"
        )
    by_steps.set(xlabel="env steps", ylabel=metric, ylim=(0, 1))
    by_seconds.set(xlabel="training seconds", ylabel=metric, ylim=(0, 1))
    by_steps.legend(fontsize=7)
    fig.suptitle(f"{info.get('experiment', experiment_dir.name)}: {metric}")
    fig.tight_layout()
    png = experiment_dir / "plot.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    lines += ["", "![plot](plot.png)", ""]
    summary_path = experiment_dir / "summary.md"
    summary_path.write_text("\n".join(lines))
    return png, summary_path
