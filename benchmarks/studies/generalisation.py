"""SAC-GLAM+HER on held-out goals: each remedy for entropy collapse, relabel flooding and
actor/critic coupling against today's settings and PPO-GLAM, 5 seeds, greedy and sampled, per
goal type; and the chosen settings against today's on the full task.

Runs a form of `tune_configs/experiments/generalisation.yaml` through `sacglam tune` (resumed when
it was started before: kill it and run the same command again), then writes, per variant, every
seed's final evaluation (train and held-out goals, greedy and sampled, per goal type), the
learner's health figures at the end (entropy and relabeled share per goal type, alpha, the
probability the policy gives its critic's argmax), mean and standard deviation over seeds, each
variant's difference from `today` with its standard error, and the acceptance checks of a
`--chosen` variant.

    .venv/bin/python benchmarks/studies/generalisation.py --form cpu            # 55 runs: about 3.5 h on 2 cores
    .venv/bin/python benchmarks/studies/generalisation.py --form cpu-combined   # the combinations, 5 seeds
    .venv/bin/python benchmarks/studies/generalisation.py --results runs/tune/generalisation-cpu \\
        --also runs/tune/generalisation-cpu-combined --chosen <variant>   # analyse only

Writes benchmarks/studies/results/generalisation/<form>.json and prints Markdown tables.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro

EXPERIMENT = Path("tune_configs/experiments/generalisation.yaml")
TODAY, PPO = "today", "ppo"
# The figures compared, as `<goal set role>/<policy>/<goal type>`: train = the goals trained on.
FIGURES = (
    "train/greedy/all",
    "held_out/greedy/all",
    "held_out/greedy/grow",
    "held_out/greedy/grasp",
    "train/greedy/grow",
    "train/sampled/all",
    "held_out/sampled/all",
    "held_out/sampled/grow",
)
HEALTH = ("entropy/grasp", "entropy/grow", "alpha", "batch/relabeled_share/grow", "buffer/relabeled_share/grow")
GRADIENTS = ("grad_norm/critic_shared", "grad_norm/policy_shared", "grad_cosine/shared")  # the last measured


@dataclass(frozen=True)
class Args:
    form: str = "cpu"
    """The experiment form to run (and analyse): `cpu`, `cpu-combined`, `cpu-full-64k`."""
    storage: Path = Path("runs/tune")
    results: Path | None = None
    """Analyse this experiment directory instead of running (`<storage>/generalisation-<form>`)."""
    also: tuple[Path, ...] = ()
    """Further experiment directories whose variants join the analysis (e.g. the planned runs
    beside the combinations): a variant already present is not taken twice."""
    chosen: str | None = None
    """The variant whose acceptance checks are computed (against `today` and `ppo`)."""
    output: Path | None = None
    """Default: benchmarks/studies/results/generalisation/<form>.json."""


def _final_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per trial: its last evaluation merged over the last training record's figures."""
    by_trial: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_trial.setdefault(row["trial"], []).append(row)
    final = {}
    for trial, trial_rows in by_trial.items():
        trial_rows.sort(key=lambda r: r["env_steps"])
        evals = [r for r in trial_rows if any(k.startswith("eval/") and r[k] is not None for k in r)]
        trains = [r for r in trial_rows if r.get("entropy") is not None or r.get("loss/policy") is not None]
        if not evals or evals[-1]["env_steps"] < (evals[-1].get("budget") or 0):
            continue  # not evaluated yet, or still running (its final evaluation comes at its budget)
        merged = {k: v for k, v in (trains[-1] if trains else {}).items() if v is not None}
        merged |= {k: v for k, v in evals[-1].items() if v is not None}
        merged["final_env_steps"] = evals[-1]["env_steps"]
        final[trial] = merged
    return final


def _goal_sets(row: dict[str, Any]) -> tuple[str, str]:
    """(the goals trained on, the held-out goals) of a row, from its evaluation keys."""
    sets = sorted({k.split("/")[1] for k in row if k.startswith("eval/")})
    held = [s for s in sets if s.endswith("test")]
    train = [s for s in sets if not s.endswith("test")]
    return train[0], held[0]


def _figure(row: dict[str, Any], figure: str) -> float | None:
    role, policy, goal_type = figure.split("/")
    train, held = _goal_sets(row)
    value = row.get(f"eval/{train if role == 'train' else held}/{policy}/{goal_type}")
    return None if value is None else float(value)


def _stats(values: list[float]) -> dict[str, Any]:
    mean = statistics.fmean(values) if values else float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"per_seed": values, "mean": mean, "sd": sd, "n": len(values)}


WINDOW = 6400  # env steps the training success looks back over (the full task's figure 2 measure)
WINDOW_FIGURE = "training_success_last_6.4k"


def _window_success(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per trial: the success of its training episodes over the last `WINDOW` env steps."""
    from sacglam.experiments.figure2 import trial_summary

    by_trial: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_trial.setdefault(row["trial"], []).append(row)
    return {
        trial: trial_summary(sorted(trial_rows, key=lambda r: r["env_steps"]), WINDOW, 0.2)["final_training_success"]
        for trial, trial_rows in by_trial.items()
    }


def variant_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: each figure's per-seed values, mean and sd; the health figures likewise."""
    finals = _final_rows(rows)
    window = _window_success(rows)
    for trial, row in finals.items():
        row["training_success_window"] = window.get(trial)
    variants: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(finals.values(), key=lambda r: r.get("seed", 0)):
        variants.setdefault(str(row["variant"]), []).append(row)
    out = {}
    for name, seeds in variants.items():
        train, held = _goal_sets(seeds[0])
        entry: dict[str, Any] = {
            "seeds": [r.get("seed") for r in seeds],
            "env_steps": [r["final_env_steps"] for r in seeds],
            "training_seconds": [r.get("time/train_seconds") for r in seeds],
            "eval_episodes": seeds[0].get("eval_episodes"),
            "figures": {},
            "health": {},
        }
        for figure in FIGURES:
            values = [v for r in seeds if (v := _figure(r, figure)) is not None]
            entry["figures"][figure] = _stats(values)
        values = [float(r["training_success_window"]) for r in seeds if r.get("training_success_window") is not None]
        entry["figures"][WINDOW_FIGURE] = _stats(values)
        for key in HEALTH + GRADIENTS:
            values = [float(r[key]) for r in seeds if r.get(key) is not None]
            if values:
                entry["health"][key] = _stats(values)
        for policy in ("greedy", "sampled"):
            key = f"eval_pi_q_argmax/{held}/{policy}/grow"
            values = [float(r[key]) for r in seeds if r.get(key) is not None]
            if values:
                entry["health"][f"pi_q_argmax/held_out/{policy}/grow"] = _stats(values)
        out[name] = entry
    return out


def difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """Mean of a minus mean of b, and the standard error of that difference (independent seeds)."""
    se = math.sqrt(a["sd"] ** 2 / max(a["n"], 1) + b["sd"] ** 2 / max(b["n"], 1))
    diff = a["mean"] - b["mean"]
    return {"difference": diff, "standard_error": se, "in_standard_errors": diff / se if se > 0 else float("inf")}


def comparisons(variants: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for reference in (TODAY, PPO):
        if reference not in variants:
            continue
        for name, entry in variants.items():
            if name == reference:
                continue
            out.setdefault(name, {})[f"vs_{reference}"] = {
                figure: difference(entry["figures"][figure], variants[reference]["figures"][figure])
                for figure in entry["figures"]
                if entry["figures"][figure]["n"] and variants[reference]["figures"].get(figure, {}).get("n")
            }
    return out


def acceptance(variants: dict[str, Any], chosen: str) -> dict[str, Any]:
    """The issue's checks for the chosen variant on this form: on a form without PPO-GLAM (the
    full task at 64k env steps), that its training success is at least today's; otherwise (the
    simplified task, 5 seeds) against PPO-GLAM and today's settings."""
    mine, today = variants[chosen]["figures"], variants[TODAY]["figures"]
    if PPO not in variants:
        return {
            "training success >= today's": mine[WINDOW_FIGURE]["mean"] >= today[WINDOW_FIGURE]["mean"],
            "training success gain over today": difference(mine[WINDOW_FIGURE], today[WINDOW_FIGURE]),
        }
    ppo = variants[PPO]["figures"]
    held_gain = difference(mine["held_out/greedy/all"], today["held_out/greedy/all"])
    return {
        "train greedy >= PPO-GLAM's": mine["train/greedy/all"]["mean"] >= ppo["train/greedy/all"]["mean"],
        "held-out greedy >= PPO-GLAM's": mine["held_out/greedy/all"]["mean"] >= ppo["held_out/greedy/all"]["mean"],
        "held-out greedy above today's by > 2 standard errors": held_gain["in_standard_errors"] > 2,
        "held-out greedy sd over seeds <= 0.08": mine["held_out/greedy/all"]["sd"] <= 0.08,
        "held-out gain over today": held_gain,
    }


def _provenance(command: str) -> dict[str, Any]:
    """`provenance` as benchmarks/manifest.py reads it (command, commit, machine, date), and the
    machine's CPU in detail (the kernels differ between CPU kinds: docs/development/testing.md)."""

    def run(*command: str) -> str:
        try:
            return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "")
    machine = {
        "processor": model or platform.processor() or platform.machine(),
        "avx512": " avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "cores": run("nproc"),
    }
    isa = "AVX-512" + (" with bf16" if machine["avx512_bf16"] else "") if machine["avx512"] else "AVX2"
    return {
        "provenance": {
            "command": command,
            "commit": run("git", "rev-parse", "--short", "HEAD"),
            "machine": f"{machine['cores']}-core {machine['processor']}, {isa}",
            "date": datetime.date.today().isoformat(),
        },
        "machine_detail": machine,
    }


def _cell(stats: dict[str, Any]) -> str:
    return f"{stats['mean']:.2f} ({stats['sd']:.2f})" if stats["n"] else "-"


def print_tables(summary: dict[str, Any]) -> None:
    variants, compared = summary["variants"], summary["comparisons"]
    figures = (*FIGURES, WINDOW_FIGURE)
    print("| variant | seeds | " + " | ".join(f.replace("held_out", "held-out") for f in figures) + " |")
    print("| --- | --- |" + " --- |" * len(figures))
    for name, entry in variants.items():
        print(f"| {name} | {len(entry['seeds'])} | " + " | ".join(_cell(entry["figures"][f]) for f in figures) + " |")
    print()
    episodes = sorted({str(entry.get("eval_episodes")) for entry in variants.values()})
    print(
        "Mean (sd) over seeds of each seed's final evaluation; "
        f"{' or '.join(episodes)} episodes per goal set and policy; the training episodes' success "
        f"over the last {WINDOW} env steps.\n"
    )
    print(
        "| variant | held-out greedy vs today (SE) | vs PPO-GLAM (SE) | held-out greedy per seed | "
        + " | ".join(HEALTH)
        + " | pi(critic argmax), held-out grow, greedy |"
    )
    print("| --- | --- | --- | --- |" + " --- |" * (len(HEALTH) + 1))
    for name, entry in variants.items():
        cells = []
        for reference in (TODAY, PPO):
            d = compared.get(name, {}).get(f"vs_{reference}", {}).get("held_out/greedy/all")
            cells.append("-" if d is None else f"{d['difference']:+.3f} ({d['standard_error']:.3f})")
        seeds = ", ".join(f"{v:.2f}" for v in entry["figures"]["held_out/greedy/all"]["per_seed"])
        health = [_cell(entry["health"][k]) if k in entry["health"] else "-" for k in HEALTH]
        pq = entry["health"].get("pi_q_argmax/held_out/greedy/grow")
        print(
            f"| {name} | {cells[0]} | {cells[1]} | {seeds} | " + " | ".join(health) + f" | {_cell(pq) if pq else '-'} |"
        )
    if "acceptance" in summary:
        print(f"\nAcceptance of {summary['chosen']}:")
        for check, value in summary["acceptance"].items():
            print(f"- {check}: {value}")


def load_rows(experiment_dir: Path) -> list[dict[str, Any]]:
    """The experiment's results table, or, while its grid still runs (the table is written at the
    end), the rows of every trial's metrics so far (a trial directory is named `<variant>,seed=<n>`)."""
    from sacglam.experiments.results import load_table, trial_rows

    def config(trial: str) -> dict[str, Any]:
        path = experiment_dir / trial / "run" / "config.json"
        return json.loads(path.read_text()) if path.exists() else {}

    if (experiment_dir / "results.parquet").exists() or (experiment_dir / "results.csv").exists():
        rows = load_table(experiment_dir)
        configs = {trial: config(trial) for trial in {row["trial"] for row in rows}}
    else:
        rows, configs = [], {}
        for run in sorted(experiment_dir.glob("*,seed=*/run")):
            if (run / "metrics.jsonl").exists():
                variant, seed = run.parent.name.rsplit(",seed=", 1)
                configs[run.parent.name] = config(run.parent.name)
                budget = configs[run.parent.name]["total_env_steps"]
                rows += trial_rows(run.parent.name, {"variant": variant, "seed": int(seed)}, run, budget)
    for row in rows:  # each trial's evaluation size, from its run's config
        row["eval_episodes"] = configs[row["trial"]].get("eval_episodes")
    return rows


def main(args: Args) -> None:
    start = time.perf_counter()
    experiment_dir = args.results
    if experiment_dir is None:
        from sacglam.experiments.tune_runner import experiment_storage, run_grid

        started = experiment_storage(EXPERIMENT, args.form, args.storage).exists()
        experiment_dir = run_grid(EXPERIMENT, args.form, storage=args.storage, resume=started)
    rows = load_rows(Path(experiment_dir))
    for extra in args.also:
        present = {r.get("variant") for r in rows}
        rows += [r for r in load_rows(extra) if r.get("variant") not in present]
    variants = variant_summary(rows)
    summary: dict[str, Any] = {
        "benchmark": "generalisation",
        "form": args.form,
        "experiment_dirs": [str(experiment_dir), *map(str, args.also)],
        **_provenance(
            f".venv/bin/python benchmarks/studies/generalisation.py --form {args.form}"
            + "".join(f" --also {a}" for a in args.also)
            + (f" --chosen {args.chosen}" if args.chosen else "")
        ),
        "variants": variants,
        "comparisons": comparisons(variants),
        "wall_seconds": time.perf_counter() - start if args.results is None else None,
    }
    if args.chosen is not None:
        summary["chosen"] = args.chosen
        summary["acceptance"] = acceptance(variants, args.chosen)
    output = args.output or Path("benchmarks/studies/results/generalisation") / f"{args.form}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(summary, indent=2))
    print_tables(summary)
    print(f"\nwrote {output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
