"""The sanity environments (`sacglam/envs/sanity.py`, docs/results/sanity.md): SAC-GLAM+HER, SAC-GLAM and
PPO-GLAM with the tiny model on SayWord, CarryWord and GoalCorridor, several seeds, one budget.

Each (environment, method, seed) is one run of `tune_configs/runs/sanity_<method>.yaml` with the
environment swapped in, through the pipeline's local runner, one torch thread, `--workers` runs at
a time. Evaluations (64 episodes, greedy and sampled) every `--eval-every` env steps give the env
steps each run needs to reach greedy success 0.9, which `tests/test_sanity.py`'s budgets are read
against.

    .venv/bin/python benchmarks/studies/sanity.py [--seeds 0 1 2] [--workers 2] [--total-env-steps 8192]

Writes benchmarks/studies/results/sanity/sanity.json and prints the table.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import tyro

ENVIRONMENTS = ("SayWord", "CarryWord", "GoalCorridor")
METHODS = ("sac-her", "sac", "ppo")
SOLVED = 0.9  # greedy success that counts as solved


def config_path(method: str) -> str:
    return f"tune_configs/runs/sanity_{method.replace('-', '_')}.yaml"


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (0, 1, 2)
    environments: tuple[str, ...] = ENVIRONMENTS
    methods: tuple[str, ...] = METHODS
    total_env_steps: int = 8192
    eval_every: int = 1024
    workers: int = 2
    """Training processes at a time (one torch thread each)."""
    runs: Path = Path("runs/sanity")
    output: Path = Path("benchmarks/studies/results/sanity/sanity.json")


def sanity_config(environment: str, method: str, seed: int, total_env_steps: int, eval_every: int, output_dir: str):
    """The sanity config of `method` on `environment` (a class of `sacglam.envs.sanity`)."""
    from dataclasses import replace

    from sacglam.config import EnvConfig, TrainConfig
    from sacglam.config_io import load_yaml_config

    base = load_yaml_config(TrainConfig, config_path(method))
    return replace(
        base,
        env=EnvConfig(name=f"sacglam.envs.sanity:{environment}"),
        seed=seed,
        total_env_steps=total_env_steps,
        eval_every=eval_every,
        output_dir=output_dir,
        progress=False,
        runner="local",
    ).resolved_again(warm_start_steps=False)  # the new environment's words; the file's warm start


def train_and_evaluate(environment: str, method: str, seed: int, total_env_steps: int, eval_every: int,
                       directory: Path, sampled: bool = True, stop_at: float | None = None) -> dict:  # fmt: skip
    """One run in this process on one torch thread (afresh: `directory` is emptied first): its
    greedy and (unless `sampled` is False: None) sampled success at every evaluation, and the env
    steps to greedy success 0.9. Leaving the sampled evaluation out changes no greedy figure.
    With `stop_at`, the run ends at the first evaluation after the start whose greedy success
    reaches it (the curve ends there), and otherwise runs to `total_env_steps`."""
    import shutil
    import warnings
    from dataclasses import replace

    import torch

    from sacglam.pipeline.run import run_pipeline

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    shutil.rmtree(directory, ignore_errors=True)
    cfg = sanity_config(environment, method, seed, total_env_steps, eval_every, str(directory))
    if not sampled:
        cfg = replace(cfg, eval_modes=("greedy",))
    start = time.perf_counter()
    greedy = "eval/train/greedy/all"
    reached = None if stop_at is None else (lambda e: e["env_steps"] > 0 and e[greedy] >= stop_at)
    run_pipeline(cfg, announce=lambda _: None, stop_when=reached)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    key = "eval/train/{}/all"
    curve = [
        (r["env_steps"], r[key.format("greedy")], r.get(key.format("sampled")))
        for r in rows
        if key.format("greedy") in r
    ]
    solved_at = next((step for step, greedy, _ in curve if greedy >= SOLVED and step > 0), None)
    return {"environment": environment, "method": method, "seed": seed, "seconds": seconds, "curve": curve,
            "solved_at": solved_at}  # fmt: skip


def run_one(environment: str, method: str, seed: int, args: Args) -> dict:
    directory = args.runs / f"{environment}-{method}-seed{seed}"
    return train_and_evaluate(environment, method, seed, args.total_env_steps, args.eval_every, directory)


def main(args: Args) -> None:
    jobs = [(e, m, s) for e in args.environments for m in args.methods for s in args.seeds]
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(run_one, *zip(*jobs), [args] * len(jobs)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "sanity", "solved": SOLVED, "args": {k: str(v) for k, v in vars(args).items()},
              "runs": results}  # fmt: skip
    args.output.write_text(json.dumps(report, indent=2))
    print(f"{'environment':<13} {'method':<8} {'seed':>4} {'solved at':>9} {'final greedy':>12} {'s':>5}")
    for r in results:
        final = r["curve"][-1][1]
        print(
            f"{r['environment']:<13} {r['method']:<8} {r['seed']:>4} {r['solved_at'] or '-':>9} {final:>12.2f} {r['seconds']:>5.0f}"
        )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
