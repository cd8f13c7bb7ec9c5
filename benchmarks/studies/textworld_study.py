"""TextWorld at CPU scale (docs/textworld.md, "Results"): SAC-GLAM+HER, SAC-GLAM and PPO-GLAM with
the tiny model on treasure hunter games (`tune_configs/runs/textworld_<method>.yaml`), several
seeds, and reference lines on the same games: uniform random, TextWorld's walkthrough (the
expert) and SmolLM2-135M-Instruct zero-shot, sampled and greedy.

Each run is `sacglam train --config ... --seed S` in its own process with one torch thread,
`--workers` at a time; a run that was stopped continues with `--resume`, a finished one is kept.
The references are one `sacglam evaluate --config tune_configs/runs/textworld_sac_her.yaml` run
on the same fixed evaluation episodes as the runs' evaluations (`--reference-episodes` each).

    .venv/bin/python benchmarks/studies/textworld_study.py [--seeds 0 1 2] [--workers 2] [--analyse-only]
    .venv/bin/python benchmarks/studies/textworld_study.py --methods sac-her --flags="--env.tw-games 100" \
        --runs runs/textworld-100 --output benchmarks/studies/results/textworld_study/100-games   # 100 games per level

Writes benchmarks/studies/results/textworld_study/10-games/textworld.json and curves.png, and prints the table. (Not
named textworld.py: run as a script, that name would shadow the `textworld` package.)
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tyro

METHODS = ("sac-her", "sac", "ppo")
SETS = ("train", "test")
POLICIES = ("greedy", "sampled")
REFERENCES = ("random", "expert", "llm-sampled", "llm-greedy")


def config_path(method: str) -> str:
    return f"tune_configs/runs/textworld_{method.replace('-', '_')}.yaml"


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = METHODS
    workers: int = 2
    """Training processes at a time (one torch thread each)."""
    references: bool = True
    """Also evaluate the reference policies (random, expert, the pre-trained model zero-shot)."""
    reference_episodes: int = 64
    """Episodes per goal set for each reference policy (SmolLM2 on 2 CPU cores takes about 0.3 s
    per step; the runs' own evaluations use 128)."""
    reference_model: str = "smollm2-135m"
    flags: str = ""
    """Command-line settings added to every run and to the references, e.g.
    `--flags="--env.tw-games 100"` (the `=` form: the value starts with dashes)."""
    runs: Path = Path("runs/textworld")
    analyse_only: bool = False
    """Only read what exists and write the results."""
    output: Path = Path("benchmarks/studies/results/textworld_study/10-games")


def _sacglam() -> str:
    return str(Path(sys.executable).parent / "sacglam")


def _run(command: list[str], log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    with log.open("a") as out:
        subprocess.run(command, check=True, env=env, stdout=out, stderr=subprocess.STDOUT)
    print(f"done in {time.perf_counter() - start:.0f} s: {' '.join(command[:3])} ... (log {log})", flush=True)


def train(args: Args, method: str, seed: int) -> None:
    """Run (or resume, or skip when finished) one method and seed."""
    directory = args.runs / f"{method}-seed{seed}"
    if (directory / "learner.pt").exists():
        return
    if (directory / "checkpoints" / "latest").exists():
        command = [_sacglam(), "train", "--resume", str(directory), "--no-progress"]
    else:
        command = [_sacglam(), "train", "--config", config_path(method), "--seed", str(seed)]
        command += ["--output-dir", str(directory), "--no-progress", *shlex.split(args.flags)]
    args.runs.mkdir(parents=True, exist_ok=True)
    _run(command, args.runs / f"{method}-seed{seed}.log")


def references(args: Args) -> None:
    """Random, expert and the pre-trained model zero-shot on the runs' games (skipped when done)."""
    output = args.runs / "references.json"
    if output.exists():
        return
    command = [_sacglam(), "evaluate", "--config", config_path("sac-her"), "--policies", *REFERENCES]
    command += ["--agent.model", args.reference_model, "--episodes", str(args.reference_episodes)]
    command += [
        "--seed",
        "10000",
        "--output",
        str(output),
        "--no-progress",
        *shlex.split(args.flags),
    ]  # 10000: as a run's evaluations
    args.runs.mkdir(parents=True, exist_ok=True)
    _run(command, args.runs / "references.log")


def evaluations(directory: Path) -> list[dict]:
    """Each evaluation record of a run: env steps and success per goal set and policy."""
    path = directory / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    out = []
    for row in rows:
        cells = {f"{s}/{p}": row[f"eval/{s}/{p}/all"] for s in SETS for p in POLICIES if f"eval/{s}/{p}/all" in row}
        if cells:
            out.append({"env_steps": row["env_steps"], **cells})
    return out


def analyse(args: Args) -> dict:
    runs = {}
    for method in args.methods:
        for seed in args.seeds:
            directory = args.runs / f"{method}-seed{seed}"
            curve = evaluations(directory)
            if curve:
                runs[f"{method}-seed{seed}"] = {
                    "method": method,
                    "seed": seed,
                    "finished": (directory / "learner.pt").exists(),
                    "curve": curve,
                    "final": curve[-1],
                }
    summary = {}
    for method in args.methods:
        finals = [r["final"] for r in runs.values() if r["method"] == method and r["finished"]]
        if finals:
            summary[method] = {
                cell: {"mean": statistics.mean(f[cell] for f in finals), "per_seed": [f[cell] for f in finals]}
                for cell in (f"{s}/{p}" for s in SETS for p in POLICIES)
            }
    refs: dict[str, dict[str, float]] = {}
    path = args.runs / "references.json"
    if path.exists():
        for result in json.loads(path.read_text())["results"]:
            refs.setdefault(result["policy"], {})[result["goal_set"]] = result["success_by_goal_type"]["all"]["success"]
    return {"benchmark": "textworld", "args": {k: str(v) for k, v in vars(args).items()}, "runs": runs,
            "summary": summary, "references": refs}  # fmt: skip


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"sac-her": "tab:blue", "sac": "tab:green", "ppo": "tab:orange"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, goal_set in zip(axes, SETS):
        for run in report["runs"].values():
            steps = [c["env_steps"] for c in run["curve"]]
            ax.plot(steps, [c[f"{goal_set}/greedy"] for c in run["curve"]], color=colours[run["method"]],
                    alpha=0.8, label=run["method"])  # fmt: skip
        for name, style in (("random", "dashed"), ("llm-sampled", "dotted")):
            value = report["references"].get(name, {}).get(goal_set)
            if value is not None:
                label = "uniform random" if name == "random" else "SmolLM2 zero-shot (sampled)"
                ax.axhline(value, color="black", linestyle=style, label=label)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(dict(zip(labels, handles)).values(), dict(zip(labels, handles)).keys(), fontsize=8)
        ax.set(xlabel="env steps", title=f"{goal_set} games, greedy policy", ylim=(0, 1.02))
    axes[0].set_ylabel("success")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(report: dict) -> None:
    cells = [f"{s}/{p}" for s in SETS for p in POLICIES]
    print(f"{'run':<14} " + " ".join(f"{c:>14}" for c in cells))
    for name, run in report["runs"].items():
        print(f"{name:<14} " + " ".join(f"{run['final'].get(c, float('nan')):>14.3f}" for c in cells))
    for name, values in report["references"].items():
        print(f"{name:<14} " + " ".join(f"{values.get(c.split('/')[0], float('nan')):>14.3f}" for c in cells))


def main(args: Args) -> None:
    if not args.analyse_only:
        jobs = [(m, s) for s in args.seeds for m in args.methods]
        with ThreadPoolExecutor(args.workers) as pool:
            futures = [pool.submit(train, args, m, s) for m, s in jobs]
            if args.references:
                futures.append(pool.submit(references, args))
            for future in futures:
                future.result()
    report = analyse(args)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "textworld.json").write_text(json.dumps(report, indent=2))
    if report["runs"]:
        plot(report, args.output / "curves.png")
    print_table(report)
    print(f"wrote {args.output / 'textworld.json'}")


if __name__ == "__main__":
    main(tyro.cli(Args))
