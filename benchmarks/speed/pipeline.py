"""Throughput of the actor-learner pipeline against the in-process trainer, with and without a
slow environment, and weight-sync cost.

Same model (tiny causal by default), same environments (simplified Playground-Text), same
environment count and the same SAC schedule (2 updates per 32 env steps, batch 128); only the
hosting changes: the `local` runner (every component in this process, torch on all cores) against
Ray with 1, 2 and 4 rollout workers (1 inference actor, the replay actor, 1 learner). Env-steps/s
and updates/s are over training time (evaluations excluded); the weight sync is the time from
rank 0's publish to the inference actor's acknowledgement, and the bytes of one broadcast.

Two blocks of rows. `paper schedule`: the config's schedule as it is, no latency; on 2 cores its
learner bounds throughput, so this block measures what the pipeline's hosting costs.
`collection-bound`: 2 updates per `--latency-update-every` (256) env steps, collection allowed
one update period (256 env steps) ahead, 4 vector steps per worker call (`--chunk-steps`), so the
learner no longer bounds throughput, at each latency of `--latencies-ms`: every environment step made that
much slower (`env.step_latency_ms`, a sleep standing in for a slow engine; a worker steps its
environments one after another, so a vector step of N environments waits N times it). Rollout
workers exist to overlap such waits with each other and with inference and learning.

A third block, `two nodes`: the collection-bound schedule at `--nodes-latency-ms` (5 ms) on a Ray
cluster of three nodes on this machine (`ray.cluster_utils.Cluster`): a head holding the inference
actor, the learner and the replay actor (custom resource `head_node`), and two worker nodes
(`env_node`) over which the rollout workers are spread (placement strategy SPREAD); every actor
asks for the same CPUs as on the single-node Ray (the head has `--ray-cpus` - 1 logical CPUs, each
worker node 1). What
it measures is the cost of the cross-node hops (object transfers between raylets' object stores,
actor calls across nodes); what it cannot show is a real network's bandwidth and latency, since
the nodes share this machine's loopback, memory and cores.

    .venv/bin/python benchmarks/speed/pipeline.py [--total-env-steps 4096] [--workers 1 2 4] [--latencies-ms 0 5]

Prints a table and writes benchmarks/speed/results/pipeline/pipeline.json.
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
    latencies_ms: tuple[float, ...] = (0.0, 5.0)
    """Environment latencies (ms per env step) of the collection-bound block."""
    paper_block: bool = True
    """Run the paper-schedule block (False: the collection-bound block only)."""
    chunk_steps: int = 4
    """Vector steps per rollout-worker call in the collection-bound block (`pipeline.chunk_steps`;
    fewer round trips to the driver per env step; the paper-schedule block keeps 1)."""
    latency_update_every: int = 256
    """The collection-bound block's `sac.update_every` (2 updates per this many env steps): light
    enough that the learner does not bound throughput, so what the environment costs shows."""
    ray_cpus: int = 4
    """Logical CPUs of the local Ray (actors take fractions of them; the machine's cores are shared)."""
    learner_threads: int = 2
    """torch threads of the Ray learner (the in-process trainer uses torch's default: every core).
    The learner is the bottleneck of the paper's schedule; inference and workers wait on it."""
    nodes_block: bool = True
    """Run the two-node block (rollout workers spread over two simulated worker nodes)."""
    nodes_workers: tuple[int, ...] = (2, 4)
    """Rollout-worker counts of the two-node block (spread over the two worker nodes)."""
    nodes_latency_ms: float = 5.0
    """Environment latency of the two-node block."""
    output: Path = Path("benchmarks/speed/results/pipeline/pipeline.json")


def run_variant(cfg, name: str, latency_ms: float, block: str) -> dict:
    from sacglam.pipeline.run import run_pipeline
    from sacglam.report import read_metrics

    out = Path("runs/bench-pipeline") / block / f"{latency_ms:g}ms" / name
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    run_pipeline(replace(cfg, output_dir=out), announce=lambda _: None)
    wall = time.perf_counter() - started
    rows = read_metrics(out)
    last = [r for r in rows if "time/env_steps_per_s" in r][-1]
    syncs = [r["sync/seconds"] for r in rows if "sync/seconds" in r]
    return {
        "variant": name,
        "latency_ms": latency_ms,
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


HEAD, ENV = "head_node", "env_node"  # the two-node block's custom resources
ON_NODES = {"rollout-worker": {ENV: 1}, "inference": {HEAD: 1}, "learner": {HEAD: 1}, "replay": {HEAD: 1}}


def ray_pipeline(args: Args, workers: int, max_steps_ahead: int, chunk_steps: int, nodes: bool = False):
    from sacglam.config import PipelineConfig, ResourcesConfig

    return PipelineConfig(
        rollout_workers=workers,
        learners=1,
        max_steps_ahead=max_steps_ahead,
        chunk_steps=chunk_steps,
        resources=ResourcesConfig(
            worker_cpus=1.0 / workers,
            inference_cpus=1.0,
            learner_cpus=1.0,
            replay_cpus=0.5,
            learner_threads=args.learner_threads,
            node_resources=ON_NODES if nodes else {},
            placement_strategy="SPREAD" if nodes else "PACK",
        ),
    )


def two_node_cluster(args: Args):
    """A head (`head_node`, `args.ray_cpus` - 1 logical CPUs: inference, learner, replay) and two
    worker nodes (`env_node`, 1 logical CPU each: the rollout workers) on this machine; this
    process joins it."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": args.ray_cpus - 1, "resources": {HEAD: 8}, "include_dashboard": False},
    )
    for _ in range(2):  # the rollout workers ask for 1 CPU in all (1 / workers each)
        cluster.add_node(num_cpus=1, resources={ENV: 8})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING")
    return cluster


def main(args: Args) -> None:
    import warnings

    import ray

    from sacglam.config import TrainConfig
    from sacglam.config_io import load_yaml_config

    warnings.filterwarnings("ignore")
    base = load_yaml_config(TrainConfig, args.config)
    base = replace(base, total_env_steps=args.total_env_steps, eval_every=10**9, eval_episodes=4, progress=False)
    # Block 1: the config's own schedule, no latency. Block 2: a collection-bound schedule at each
    # latency (see the module docstring).
    # The collection-bound block lets collection run one update period ahead (the paper schedule
    # block: one vector step), so environment waits overlap the learner's updates.
    lighter = replace(base, sac=replace(base.sac, update_every=args.latency_update_every))
    blocks = [("paper schedule", base, 0.0)] if args.paper_block else []
    blocks += [("collection-bound", lighter, latency) for latency in args.latencies_ms]
    if args.nodes_block:
        blocks.append(("two nodes", lighter, args.nodes_latency_ms))
    runs = []  # (block, latency, variant name, config)
    for block, cfg, latency in blocks:
        cfg = replace(cfg, env=replace(cfg.env, step_latency_ms=latency))
        ahead = cfg.sac.update_every if block != "paper schedule" else cfg.num_envs
        chunk = args.chunk_steps if block != "paper schedule" else 1
        if block == "two nodes":  # compared with the single-node rows of the same latency
            for workers in args.nodes_workers:
                pipeline = ray_pipeline(args, workers, ahead, chunk, nodes=True)
                name = f"ray, {workers} workers on 2 nodes"
                runs.append((block, latency, name, replace(cfg, runner="ray", pipeline=pipeline)))
            continue
        local = replace(cfg, runner="local", pipeline=replace(cfg.pipeline, max_steps_ahead=ahead, chunk_steps=chunk))
        runs.append((block, latency, "in-process (local runner)", local))
        for workers in args.workers:
            pipeline = ray_pipeline(args, workers, ahead, chunk)
            runs.append(
                (block, latency, f"ray, {workers} rollout worker(s)", replace(cfg, runner="ray", pipeline=pipeline))
            )
    results = []
    # In-process variants first, before Ray starts, so Ray's daemons cost them nothing.
    for block, latency, name, cfg in [r for r in runs if r[3].runner == "local"]:
        results.append(run_variant(cfg, name, latency, block) | {"block": block})
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False, logging_level="WARNING")
    for block, latency, name, cfg in [r for r in runs if r[3].runner == "ray" and r[0] != "two nodes"]:
        results.append(run_variant(cfg, name, latency, block) | {"block": block})
    ray.shutdown()
    if args.nodes_block:
        cluster = two_node_cluster(args)
        for block, latency, name, cfg in [r for r in runs if r[0] == "two nodes"]:
            results.append(run_variant(cfg, name, latency, block) | {"block": block})
        ray.shutdown()
        cluster.shutdown()
    order = {(block, latency): i for i, (block, _, latency) in enumerate(blocks)}
    results.sort(key=lambda r: (order[(r["block"], r["latency_ms"])], r["variant"] != "in-process (local runner)"))
    for r in results:
        # the two-node rows compare with the single-node collection-bound rows of their latency
        kind = "collection-bound" if r["block"] == "two nodes" else r["block"]
        same = [x for x in results if (x["block"], x["latency_ms"]) == (kind, r["latency_ms"])]
        reference = next((x for x in same if x["variant"].startswith("in-process")), None)
        if reference is not None:
            r["env_steps_per_s_vs_in_process"] = r["env_steps_per_s"] / reference["env_steps_per_s"]
        one_worker = [x for x in same if x["variant"].startswith("ray, 1 ")]
        if one_worker:
            r["env_steps_per_s_vs_1_worker"] = r["env_steps_per_s"] / one_worker[0]["env_steps_per_s"]
    header = (
        f"{'block':<17} {'latency':>7} {'variant':<28} {'env steps/s':>11} {'x in-proc':>9} {'x 1 worker':>10} "
        f"{'updates/s':>9} {'lag max':>7} {'sync ms':>8} {'sync KB':>8} {'batch':>6}"
    )
    print(header)
    for r in results:
        sync_ms = f"{1000 * r['sync_seconds_median']:.1f}" if r["sync_seconds_median"] is not None else "-"
        sync_kb = f"{r['sync_bytes'] / 1024:.0f}" if r["sync_bytes"] else "-"
        batch = f"{r['inference_mean_batch_states']:.1f}" if r["inference_mean_batch_states"] else "-"
        vs_one = f"{r['env_steps_per_s_vs_1_worker']:.2f}" if "env_steps_per_s_vs_1_worker" in r else "-"
        print(
            f"{r['block']:<17} {r['latency_ms']:>5g}ms {r['variant']:<28} {r['env_steps_per_s']:>11.1f} "
            f"{r.get('env_steps_per_s_vs_in_process', float('nan')):>9.2f} {vs_one:>10} "
            f"{r['updates_per_s']:>9.2f} {r['policy_lag_max']:>7} {sync_ms:>8} {sync_kb:>8} {batch:>6}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "benchmark": "pipeline",
                "config": args.config,
                "total_env_steps": args.total_env_steps,
                "latency_update_every": args.latency_update_every,
                "machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
