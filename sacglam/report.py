"""A run's report: `report.md` (success before and after, per goal set and mode, and the last
training figures) and `curves.png` (evaluation success and training success against env steps),
written into the run directory from its `metrics.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def write_report(run_dir: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = _records(run_dir)
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    trains = [r for r in records if "train/success" in r]
    overall = sorted(k for k in evals[-1] if k.startswith("eval/") and k.endswith("/all")) if evals else []
    lines = [f"# Run report: {run_dir}", ""]
    config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}
    if config:
        lines += [f"{config.get('algo')} on {config['agent']['model']}, {config.get('total_env_steps')} env steps, "
                  f"runner {config.get('runner', 'local')}", ""]
    if evals:
        lines += ["| success (all goal types) | before | after |", "| --- | --- | --- |"]
        lines += [f"| {k.removeprefix('eval/')} | {evals[0][k]:.3f} | {evals[-1][k]:.3f} |" for k in overall]
        lines += ["", f"before: env step {evals[0]['env_steps']}; after: env step {evals[-1]['env_steps']}", ""]
    if trains:
        last = trains[-1]
        keys = ["train/success", "learner/gradient_steps", "alpha", "loss/critic", "buffer/transitions",
                "buffer/relabeled_fraction", "inference/policy_lag_max", "sync/bytes", "sync/seconds",
                "time/env_steps_per_s", "time/updates_per_s"]
        lines += ["| last training record | value |", "| --- | --- |"]
        lines += [f"| {k} | {last[k]:.4g} |" for k in keys if isinstance(last.get(k), (int, float))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key in overall:
        axes[0].plot([r["env_steps"] for r in evals], [r[key] for r in evals], marker="o", label=key.removeprefix("eval/"))
    axes[0].set(xlabel="env steps", ylabel="success rate", title="evaluation", ylim=(0, 1))
    axes[0].legend(fontsize=7)
    axes[1].plot([r["env_steps"] for r in trains], [r["train/success"] for r in trains])
    axes[1].set(xlabel="env steps", ylabel="success rate", title="training episodes (recent ~200)", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=100)
    plt.close(fig)
    lines += ["", "![curves](curves.png)", ""]
    report = run_dir / "report.md"
    report.write_text("\n".join(lines))
    return report
