"""Throughput of the actor-learner pipeline against the in-process trainer, and weight-sync cost.

Same model (tiny causal by default), same environments (simplified Playground-Text), same
environment count and the same SAC schedule (2 updates per 32 env steps, batch 128); only the
hosting changes: the `local` runner (every component in this process, torch on all cores) against
Ray with 1, 2 and 4 rollout workers (1 inference actor, the replay actor, 1 learner). Env-steps/s
and updates/s are over training time (evaluations excluded); the weight sync is the time from
rank 0's publish to the inference actor's acknowledgement, and the bytes of one broadcast.

    .venv/bin/python benchmarks/pipeline.py [--total-env-steps 4096] [--workers 1 2 4]

Prints a table and writes benchmarks/results/pipeline.json.
"""

from __future__ import annotations

import json
import platform
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro


@dataclass(frozen=True)
class Args:
    config: str = "tune_configs/runs/cpu_simple_sac_her.yaml"
    """Training config (YAML) whose model, environment and SAC schedule every variant uses."""
    total_env_steps: int = 4096
    """Env steps per variant."""
    workers: tuple[int, ...] = (1, 2, 4)
    """Rollout-worker counts of the Ray variants."""
    ray_cpus: int = 4
    """Logical CPUs of the local Ray (actors take fractions of them; the machine's cores are shared)."""
    learner_threads: int = 2
    """torch threads of the Ray learner (the in-process trainer uses torch's default: every core).
    The learner is the bottleneck of the paper's schedule; inference and workers wait on it."""
    output: Path = Path("benchmarks/results/pipeline.json")


def run_variant(cfg, name: str) -> dict:
    from sacglam.pipeline.run import run_pipeline
    from sacglam.report import read_metrics

    out = Path("runs/bench-pipeline") / name
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    run_pipeline(replace(cfg, output_dir=out), announce=lambda _: None)
    wall = time.perf_counter() - started
    rows = read_metrics(out)
    last = [r for r in rows if "time/env_steps_per_s" in r][-1]
    syncs = [r["sync/seconds"] for r in rows if "sync/seconds" in r]
    return {
        "variant": name,
        "env_steps": last["env_steps"],
        "updates": last["learner/gradient_steps"],
        "train_seconds": last["time/train_seconds"],
        "wall_seconds": wall,
        "env_steps_per_s": last["time/env_steps_per_s"],
        "updates_per_s": last["time/updates_per_s"],
        "policy_lag_max": max(r.get("inference/policy_lag_max", 0) for r in rows),
        "sync_seconds_median": sorted(syncs)[len(syncs) // 2] if syncs else None,
        "sync_bytes": last.get("sync/bytes"),
        "inference_mean_batch_states": last.get("inference/mean_batch_states"),
    }


def main(args: Args) -> None:
    import warnings

    import ray

    from sacglam.config import PipelineConfig, ResourcesConfig, TrainConfig
    from sacglam.config_io import load_yaml_config

    warnings.filterwarnings("ignore")
    base = load_yaml_config(TrainConfig, args.config)
    base = replace(base, total_env_steps=args.total_env_steps, eval_every=10**9, eval_episodes=4, progress=False)
    results = [run_variant(replace(base, runner="local"), "in-process (local runner)")]
    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, logging_level="WARNING")
    for workers in args.workers:
        share = 1.0 / workers
        pipeline = PipelineConfig(
            rollout_workers=workers,
            learners=1,
            max_steps_ahead=base.num_envs,
            resources=ResourcesConfig(
                worker_cpus=share,
                inference_cpus=1.0,
                learner_cpus=1.0,
                replay_cpus=0.5,
                learner_threads=args.learner_threads,
            ),
        )
        results.append(run_variant(replace(base, runner="ray", pipeline=pipeline), f"ray, {workers} rollout worker(s)"))
    ray.shutdown()
    reference = results[0]
    for r in results:
        r["env_steps_per_s_vs_in_process"] = r["env_steps_per_s"] / reference["env_steps_per_s"]
    header = f"{'variant':<28} {'env steps/s':>11} {'x in-proc':>9} {'updates/s':>9} {'lag max':>7} {'sync ms':>8} {'sync KB':>8} {'batch':>6}"
    print(header)
    for r in results:
        sync_ms = f"{1000 * r['sync_seconds_median']:.1f}" if r["sync_seconds_median"] is not None else "-"
        sync_kb = f"{r['sync_bytes'] / 1024:.0f}" if r["sync_bytes"] else "-"
        batch = f"{r['inference_mean_batch_states']:.1f}" if r["inference_mean_batch_states"] else "-"
        print(
            f"{r['variant']:<28} {r['env_steps_per_s']:>11.1f} {r['env_steps_per_s_vs_in_process']:>9.2f} "
            f"{r['updates_per_s']:>9.2f} {r['policy_lag_max']:>7} {sync_ms:>8} {sync_kb:>8} {batch:>6}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "benchmark": "pipeline",
                "config": args.config,
                "total_env_steps": args.total_env_steps,
                "machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
