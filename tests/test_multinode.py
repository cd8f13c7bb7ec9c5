"""The pipeline on a Ray cluster of several nodes (`ray.cluster_utils.Cluster`: a head and two
worker nodes on this machine, each its own raylet with its own resources), its run directory on
S3 (moto's server on 127.0.0.1): rollout workers and the replay actor are placed by custom
resources on a node without the driver; that node is removed mid-run and the run finishes with the
replay actor restored from the last checkpoint on the surviving node; PPO-GLAM submitted with
`ray job submit`; a Ray Tune trial whose actors span the nodes."""

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

from sacglam.config import AgentConfig, PipelineConfig, PPOConfig, ResourcesConfig, TrainConfig  # noqa: E402
from sacglam.learner.distributed import free_port  # noqa: E402
from sacglam.pipeline.run import run_pipeline  # noqa: E402
from sacglam.runtime.checkpoint import CheckpointStore, seal_step  # noqa: E402
from sacglam.runtime.storage import StoragePath  # noqa: E402
from tests.helpers import tiny_pipeline_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray]
ENV_NODE, HEAD_NODE = "env_node", "head_node"  # custom resources the worker nodes and the head advertise
PLACES = {  # environments on the worker nodes; the model (inference, learner) on the head, as GPUs would be
    "rollout-worker": {ENV_NODE: 1},
    "replay": {ENV_NODE: 1},
    "rollout-storage": {ENV_NODE: 1},
    "inference": {HEAD_NODE: 1},
    "learner": {HEAD_NODE: 1},
}
SMALL = ResourcesConfig(worker_cpus=0.25, inference_cpus=0.5, learner_cpus=0.5, replay_cpus=0.25, node_resources=PLACES)


@pytest.fixture(scope="module")
def nodes(s3_server):
    """A head (the driver's node, advertising `head_node`: inference and learners) and two worker
    nodes advertising `env_node`; the dashboard on the head, for `ray job submit`. (s3_server first: the nodes'
    processes inherit its credentials.)"""
    from ray.cluster_utils import Cluster

    ray.shutdown()  # the shared single-node cluster, if an earlier test started it (tests/conftest.py)
    dashboard_port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {HEAD_NODE: 4},
            "include_dashboard": True,
            "dashboard_port": dashboard_port,
            # each node's agent on a port of its own: they share this machine (the head's serves jobs)
            "dashboard_agent_listen_port": free_port(),
        },
    )
    workers = [
        cluster.add_node(num_cpus=2, resources={ENV_NODE: 4}, dashboard_agent_listen_port=free_port()) for _ in range(2)
    ]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING")
    yield {
        "cluster": cluster,
        "head": cluster.head_node.node_id,
        "workers": workers,
        "dashboard": f"http://127.0.0.1:{dashboard_port}",
    }
    ray.shutdown()
    cluster.shutdown()


def _sac(uri: str, **changes) -> TrainConfig:
    """The shared tiny SAC-GLAM+HER run, through Ray across the nodes, its directory `uri`."""
    return tiny_pipeline_config(
        Path("unused"),
        "unused",
        output_dir=uri,
        total_env_steps=768,
        eval_every=10_000,
        log_every=128,
        runner="ray",
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=256, resources=SMALL),
        **changes,
    )


def _node_of(handle) -> str:
    return ray.get(handle.actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def _records(run: StoragePath) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_node_holding_the_rollout_workers_and_the_replay_actor_is_lost_mid_run(nodes, s3_server):
    """SAC-GLAM+HER with its workers and replay actor on a worker node (by `env_node`), the
    inference actor and learner on the head. After the first checkpoint (256 env steps) that node is
    removed: Ray re-places their bundles on the other worker node, restarts the actors (the replay
    actor restores the checkpoint from S3) and the run finishes its budget. What is lost: the
    replay transitions added after the checkpoint, no counter."""
    cluster = nodes["cluster"]
    uri = s3_server("sac")
    cfg = _sac(uri)
    seen: dict = {}

    def lose_the_env_node(driver):
        if "removed_at" not in seen and driver.c.env_steps >= 384:
            replay = _node_of(driver.parts.storage)
            seen["placement"] = {
                "replay": replay,
                "workers": {_node_of(w) for w in driver.parts.workers},
                "inference": _node_of(driver.parts.inference[0]),
                "learner": _node_of(driver.parts.learners[0]),
            }
            seen["removed_at"], seen["checkpoint"] = driver.c.env_steps, driver.store.latest()
            seen["checkpoint_step"] = seal_step(seen["checkpoint"])
            seen["updates_at_removal"] = driver.c.updates
            (node,) = [n for n in nodes["workers"] if n.node_id == replay]
            seen["start"] = time.monotonic()
            cluster.remove_node(node, allow_graceful=False)
        elif "removed_at" in seen and "recovered_after_s" not in seen:
            # (a chunk or two may still finish before the node's processes are gone)
            node = _node_of(driver.parts.storage)
            if node != seen["placement"]["replay"]:
                seen["recovered_after_s"] = time.monotonic() - seen["start"]
                seen["replay_after"], seen["recovered_at"] = node, driver.c.env_steps
                seen["restored_from"] = ray.get(
                    driver.parts.storage.actor.__ray_call__.remote(lambda self: self.restored_from)
                )

    final = run_pipeline(cfg, on_chunk=lose_the_env_node, announce=lambda _: None)
    placement = seen["placement"]
    assert placement["replay"] != nodes["head"] and placement["workers"] == {placement["replay"]}
    assert placement["inference"] == placement["learner"] == nodes["head"]
    assert "replay_after" in seen, f"the replay actor was not seen on another node after the removal: {seen}"
    assert seen["replay_after"] not in (placement["replay"], nodes["head"])  # the surviving worker node
    # the first checkpoint: at 256 env steps, or a chunk later when a worker's chunk was in flight
    assert seen["restored_from"] == str(seen["checkpoint"]) and 256 <= seen["checkpoint_step"] < 256 + cfg.num_envs
    run = StoragePath(uri)
    records = [r for r in _records(run) if "learner/gradient_steps" in r]
    assert records[-1]["env_steps"] >= cfg.total_env_steps and 0 <= final["eval/simple-train/sampled/all"] <= 1
    steps = [r["env_steps"] for r in records]
    updates = [r["learner/gradient_steps"] for r in records]
    assert steps == sorted(steps) and updates == sorted(updates)  # no counter went back
    assert updates[-1] > seen["updates_at_removal"]
    # The replay buffer lost what it received after the checkpoint until it was back (the removed
    # node's processes may finish a chunk or two after the removal), and the lost workers' open
    # episodes: those open at the checkpoint (a restarted worker starts fresh episodes) and at the
    # loss, at most num_envs x max_steps each. Nothing else.
    newest = CheckpointStore(run / "checkpoints").latest_intact()[0]
    header = json.loads((newest / "replay" / "header.json").read_text())
    lost = records[-1]["env_steps"] - header["added_transitions"]
    open_episodes = cfg.num_envs * cfg.env.max_steps
    assert 0 < lost <= seen["recovered_at"] - seen["checkpoint_step"] + 2 * open_episodes, (lost, seen)
    print(
        f"\nnode lost at {seen['removed_at']} env steps (checkpoint at {seen['checkpoint_step']}): {lost} env transitions lost from "
        f"the replay buffer; the replay actor answered from the other node {seen['recovered_after_s']:.1f} s after the "
        f"removal (at {seen['recovered_at']} env steps)"
    )


def test_ppo_submitted_with_ray_job_submit_runs_across_the_nodes(nodes, s3_server, tmp_path):
    uri = s3_server("ppo")
    cfg = replace(
        _sac(
            uri,
            algo="ppo",
            agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32, critic="value"),
            ppo=PPOConfig(rollout_steps=128, minibatch_size=32, epochs=2),
        ),
        total_env_steps=256,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=128, resources=SMALL),
    )
    config = tmp_path / "ppo.yaml"
    config.write_text(yaml.safe_dump(json.loads(json.dumps(asdict(cfg), default=str))))
    submit = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", nodes["dashboard"], "--"]
    command = [sys.executable, "-m", "sacglam.cli", "train", "--config", str(config), "--no-progress"]
    deadline = time.monotonic() + 120
    while True:  # the head's job agent may still be starting (a busy machine)
        done = subprocess.run(
            submit + command, capture_output=True, text=True, timeout=300, env=os.environ | {"RAY_ADDRESS": ""}
        )
        if "No available agent" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in done.stdout.lower()
    run = StoragePath(uri)
    records = _records(run)
    assert records[-1]["env_steps"] >= 256 and any("loss/policy" in r or "ppo/clip_fraction" in r for r in records)
    assert CheckpointStore(run / "checkpoints").latest().name == "step-000000256"


def test_a_tune_trial_spans_the_nodes_with_its_run_on_s3(nodes, s3_server, tmp_path):
    from sacglam.experiments.tune_runner import run_grid

    storage = s3_server("tune")
    small = {
        "total_env_steps": 256,
        "eval_every": 256,
        "eval_episodes": 4,
        "log_every": 64,
        "num_envs": 8,
        "warm_start_steps": 2,
        "runner": "ray",
        "agent": {"critic_width": 32},
        "sac": {"batch_size": 16, "critic_warmup_updates": 2},
        "pipeline": {"rollout_workers": 2, "checkpoint_every": 128, "resources": asdict(SMALL)},
    }
    path = tmp_path / "nodes.yaml"  # the experiment is named after its file
    path.write_text(
        yaml.safe_dump(
            {
                "description": "one trial across nodes",
                "forms": {
                    "cpu": {
                        "base": str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"),
                        "set": small,
                        "grid": {"sac.n_step": [3]},
                        "seeds": [0],
                        "trial": {"cpus": 0.5, "threads": 1},
                    }
                },
            }
        )
    )
    local = run_grid(path, "cpu", storage=storage, address=nodes["cluster"].address)
    run = StoragePath(storage) / "nodes-cpu" / "n_step=3,seed=0" / "run"
    assert CheckpointStore(run / "checkpoints").latest().name == "step-000000256"
    assert _records(run)[-1]["env_steps"] >= 256
    assert (StoragePath(storage) / "nodes-cpu" / "results.csv").is_file() and (local / "results.parquet").is_file()
