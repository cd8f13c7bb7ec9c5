"""The paper's figure 2 at CPU scale: SAC-GLAM+HER, SAC-GLAM and PPO-GLAM on the full
Playground-Text task, 3 seeds each, through `sacglam tune` (the project's trainers and pipeline).

Runs the `cpu-full` form of `tune_configs/experiments/figure2.yaml` (25.6k env steps; `cpu-full-64k` is the
documented longer run), then writes, next to a copy of the results table:
- figure2.png: training success (last 6.4k steps) against env steps and against seconds, mean ± std
  over seeds, and the last evaluation's success per goal type (sampled and greedy);
- figure2.json: per method and seed, the curves, final training success, env steps to 0.2, the
  largest fall below an earlier peak (max drawdown, the stability study's measure of collapse), every
  evaluation figure (train and held-out goals, sampled and greedy, per goal type), training
  seconds, seconds per env step; and the full-task acceptance checks;
and prints a table.

    .venv/bin/python benchmarks/studies/figure2.py [--form cpu-full] [--fresh]
    .venv/bin/python benchmarks/studies/figure2.py --results runs/tune/figure2-cpu-full   # analyse only
    # the stability study (tune_configs/experiments/stability.yaml) against cpu-full's SAC+HER and PPO-GLAM:
    .venv/bin/python benchmarks/studies/figure2.py --results runs/tune/stability-cpu-full \
        --also runs/tune/figure2-cpu-full --output benchmarks/studies/results/figure2/stability-cpu-full
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import tyro


@dataclass(frozen=True)
class Args:
    experiment: Path = Path("tune_configs/experiments/figure2.yaml")
    form: str = "cpu-full"
    """`cpu-full` (25.6k env steps), `cpu-full-64k` (the longer run), `cpu-full-64k-b128` (its SAC at
    batch 128), `cpu-full-64k-32x4` / `cpu-full-64k-16x8` (its SAC's gradient samples as 4 steps of
    32 / 8 steps of 16 per 32 env steps), or any other form of `--experiment`."""
    storage: Path = Path("runs/tune")
    """Where Tune keeps the trials (`<storage>/figure2-<form>`)."""
    fresh: bool = False
    """Delete an earlier run of this form under `storage` first (otherwise it must not exist)."""
    results: Path | None = None
    """Analyse this experiment directory (written by `sacglam tune`) instead of running."""
    also: tuple[Path, ...] = ()
    """Further experiment directories whose trials join the analysis (methods by variant name),
    e.g. the PPO-GLAM trials of an earlier run of the same settings."""
    output: Path | None = None
    """Default: benchmarks/studies/results/figure2/<form>."""
    window: int = 6400
    """Env steps the training success looks back over."""
    threshold: float = 0.2
    """Training success whose first env step is compared between methods."""


def _fmt_steps(steps: list) -> str:
    return ", ".join("never" if s is None else f"{s / 1000:.1f}k" for s in steps)


def main(args: Args) -> None:
    from sacglam.experiments.figure2 import figure2_summary, plot_figure2
    from sacglam.experiments.results import load_table

    start = time.perf_counter()
    experiment_dir = args.results
    if experiment_dir is None:
        from sacglam.experiments.tune_runner import run_grid

        target = args.storage / f"figure2-{args.form}"
        if args.fresh and target.exists():
            shutil.rmtree(target)
        experiment_dir = run_grid(args.experiment, args.form, storage=args.storage)
    wall = time.perf_counter() - start
    output = args.output or Path("benchmarks/studies/results/figure2") / args.form
    output.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "experiment.json"):
        source = Path(experiment_dir) / name
        if source.exists() and source.resolve() != (output / name).resolve():  # re-analysing a copy in place
            shutil.copy(source, output / name)
    rows = load_table(Path(experiment_dir))
    for extra in args.also:  # methods this run already has are not taken twice
        present = {r.get("variant") for r in rows}
        rows += [r for r in load_table(extra) if r.get("variant") not in present]
    summary = figure2_summary(rows, args.window, args.threshold)
    summary |= {
        "benchmark": "figure2",
        "form": args.form,
        "experiment_dir": str(experiment_dir),
        "wall_seconds": wall if args.results is None else None,
    }
    (output / "figure2.json").write_text(json.dumps(summary, indent=2))
    plot_figure2(summary, output / "figure2.png", f"Figure 2 at CPU scale ({args.form})")

    print(
        f"{'method':<9} {'success per seed':<20} {'mean':>5} {'to ' + str(args.threshold):>16} "
        f"{'eval s/g':>10} {'held-out':>8} {'drawdown':>16} {'s/run':>12} {'ms/step':>8}"
    )
    for name, m in summary["methods"].items():
        evaluation = m["evaluation"]
        sampled = evaluation.get("train/sampled/all", {}).get("mean", float("nan"))
        greedy = evaluation.get("train/greedy/all", {}).get("mean", float("nan"))
        held_out = evaluation.get("test/sampled/all", {}).get("mean", float("nan"))
        seconds = f"{min(m['training_seconds']):.0f}-{max(m['training_seconds']):.0f}"
        print(
            f"{name:<9} {', '.join(f'{v:.2f}' for v in m['final_training_success']):<20} "
            f"{m['final_training_success_mean']:>5.2f} {_fmt_steps(m['steps_to_threshold']):>16} "
            f"{sampled:>4.2f}/{greedy:<4.2f} {held_out:>8.2f} {', '.join(f'{v:.2f}' for v in m['max_drawdown']):>16} {seconds:>12} {1000 * m['seconds_per_env_step_mean']:>8.2f}"
        )
    for name, method_checks in summary.get("checks_by_method", {"": summary["checks"]}).items():
        for key, value in method_checks.items():
            print(f"{name + ': ' if name else ''}{key}: {value}")
    if summary["wall_seconds"] is not None:
        print(f"whole benchmark: {summary['wall_seconds'] / 60:.1f} min")
    print(f"wrote {output / 'figure2.json'} and {output / 'figure2.png'}")


if __name__ == "__main__":
    main(tyro.cli(Args))
