"""The pipeline on a local Ray (CPU, tiny model): an end-to-end SAC-GLAM+HER run with 2 rollout
workers, 1 inference actor, the replay actor and 2 data-parallel learners (gloo) that survives a
killed rollout worker; kill -9 of a whole run, then --resume; a request the cluster cannot hold."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from sacglam.cli import resumed_config  # noqa: E402
from sacglam.config import AgentConfig, EnvConfig, PipelineConfig, ResourcesConfig, SACConfig, TrainConfig  # noqa: E402
from sacglam.pipeline.ray_cluster import ClusterTooSmallError  # noqa: E402
from sacglam.pipeline.run import run_pipeline  # noqa: E402
from sacglam.replay_actor.buffer import ReplayBuffer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray]
SMALL = ResourcesConfig(worker_cpus=0.25, inference_cpus=0.25, learner_cpus=0.5, replay_cpus=0.25)


@pytest.fixture
def cluster(ray_local):
    """The single-node cluster these tests share with test_tune.py (tests/conftest.py)."""
    return ray_local


def _cfg(tmp_path, cluster, **changes):
    base = TrainConfig(
        algo="sac-her",
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32),
        sac=SACConfig.with_her(batch_size=32, random_steps=64),
        num_envs=8,
        total_env_steps=768,
        eval_every=10_000,
        eval_episodes=4,
        log_every=128,
        warm_start_steps=5,
        warm_start_objective="likelihood",  # what these tests' margins were measured with
        output_dir=tmp_path / "run",
        progress=False,
        runner="ray",
        address=cluster["address"],
        pipeline=PipelineConfig(rollout_workers=2, learners=2, weight_sync_every=2, resources=SMALL),
    )
    return replace(base, **changes)


def _records(directory):
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


def test_end_to_end_with_two_learners_survives_a_killed_rollout_worker(tmp_path, cluster):
    cfg = _cfg(tmp_path, cluster)
    pids = {}

    def worker_pid(driver):
        return ray.get(driver.parts.workers[0].actor.__ray_call__.remote(lambda self: os.getpid()))

    def kill_worker_once(driver):
        if "killed" not in pids and driver.c.env_steps >= 256:
            pids["killed"] = worker_pid(driver)
            os.kill(pids["killed"], signal.SIGKILL)
        elif "killed" in pids and "after" not in pids and driver.c.env_steps >= 512:
            pids["after"] = worker_pid(driver)

    final = run_pipeline(cfg, on_chunk=kill_worker_once, announce=lambda _: None)
    assert 0.0 <= final["eval/simple-train/sampled/all"] <= 1.0
    assert pids["after"] != pids["killed"]  # Ray restarted the worker and the run went on
    rows = [r for r in _records(cfg.output_dir) if "learner/gradient_steps" in r]
    last = rows[-1]
    assert last["env_steps"] >= cfg.total_env_steps
    assert last["learner/gradient_steps"] > 0 and last["inference/version"] > 0  # weights reached inference
    assert last["sync/bytes"] > 0
    # Policy lag: at most what the learners do between two broadcasts plus one train call in flight.
    assert max(r["inference/policy_lag_max"] for r in rows) <= 3 * cfg.pipeline.weight_sync_every + 2
    # Metrics are exported periodically, and one series can arrive an export later than another:
    # wait for every series the test looks for.
    wanted, deadline, text = ("sacglam_env_steps", "sacglam_loss_critic"), time.time() + 60, ""
    while not all(name in text for name in wanted) and time.time() < deadline:
        time.sleep(2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{cluster['metrics_port']}").read().decode()
    assert all(name in text for name in wanted), [name for name in wanted if name not in text]


def test_kill_minus_9_of_a_whole_run_then_resume_continues_from_the_checkpoint(tmp_path, cluster):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "sacglam.cli",
        "train",
        "--runner",
        "ray",
        "--address",
        cluster["address"],
        "--output-dir",
        str(run_dir),
        "--no-progress",
        "--total-env-steps",
        "100000",
        "--num-envs",
        "8",
        "--eval-every",
        "100000",
        "--eval-episodes",
        "4",
        "--warm-start-steps",
        "5",
        "--agent.critic-width",
        "32",
        "--sac.batch-size",
        "32",
        "--sac.random-steps",
        "64",
        "--pipeline.rollout-workers",
        "2",
        "--pipeline.checkpoint-every",
        "256",
        "--pipeline.resources.worker-cpus",
        "0.25",
        "--pipeline.resources.inference-cpus",
        "0.25",
        "--pipeline.resources.learner-cpus",
        "0.5",
        "--pipeline.resources.replay-cpus",
        "0.25",
        "--goal-sampler.mode",
        "progress",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if latest.exists() and (run_dir / "checkpoints" / latest.read_text() / "COMPLETE").exists():
            break
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    checkpoint = run_dir / "checkpoints" / latest.read_text()
    saved = json.loads((checkpoint / "driver.json").read_text())
    stored = len(ReplayBuffer.load(checkpoint / "replay"))
    assert saved["env_steps"] >= 256 and stored > 0
    sampler = torch.load(checkpoint / "goal_sampler.pt", weights_only=False)
    assert sampler["goals"] and sampler["outcomes"] > 0  # the agent was choosing its own goals

    cfg = resumed_config(["--resume", str(run_dir)])
    cfg = replace(cfg, total_env_steps=saved["env_steps"] + 128, progress=False)
    messages = []
    run_pipeline(cfg, announce=messages.append)
    resumed = next(m for m in messages if m.startswith("resumed"))
    assert f"{saved['env_steps']} env steps, {saved['updates']} updates" in resumed
    assert f"{stored} transitions in storage" in resumed  # the replay actor restored the snapshot exactly
    steps = [r["env_steps"] for r in _records(run_dir) if "train/success" in r]
    assert steps == sorted(steps) and steps[-1] >= saved["env_steps"] + 128  # counters went on from the checkpoint
    after = [r for r in _records(run_dir) if "goals/outcomes" in r and r["env_steps"] > saved["env_steps"]]
    assert after[0]["goals/outcomes"] >= sampler["outcomes"]  # the goal sampler went on from its snapshot


def test_ppo_trains_through_ray_actors_with_two_learners_and_resumes_after_kill_minus_9(tmp_path, cluster):
    """PPO-GLAM through the same actors as SAC: rollout workers, the inference actor, the rollout
    storage and two data-parallel learners; killed with -9 after a checkpoint, then resumed."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "sacglam.cli",
        "train",
        "--config",
        str(ROOT / "tune_configs" / "runs" / "cpu_simple_ppo.yaml"),
        "--runner",
        "ray",
        "--address",
        cluster["address"],
        "--output-dir",
        str(run_dir),
        "--no-progress",
        "--total-env-steps",
        "100000",
        "--num-envs",
        "8",
        "--eval-every",
        "100000",
        "--eval-episodes",
        "4",
        "--warm-start-steps",
        "5",
        "--agent.critic-width",
        "32",
        "--ppo.rollout-steps",
        "64",
        "--ppo.epochs",
        "1",
        "--ppo.minibatch-size",
        "32",
        "--pipeline.rollout-workers",
        "2",
        "--pipeline.learners",
        "2",
        "--pipeline.checkpoint-every",
        "128",
        "--pipeline.resources.worker-cpus",
        "0.25",
        "--pipeline.resources.inference-cpus",
        "0.25",
        "--pipeline.resources.learner-cpus",
        "0.5",
        "--pipeline.resources.replay-cpus",
        "0.25",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if latest.exists() and (run_dir / "checkpoints" / latest.read_text() / "COMPLETE").exists():
            break
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    saved = json.loads((run_dir / "checkpoints" / latest.read_text() / "driver.json").read_text())
    assert saved["env_steps"] >= 128 and saved["updates"] >= 2  # two rollouts trained before the checkpoint

    cfg = replace(resumed_config(["--resume", str(run_dir)]), total_env_steps=saved["env_steps"] + 128, progress=False)
    messages = []
    run_pipeline(cfg, announce=messages.append)
    resumed = next(m for m in messages if m.startswith("resumed"))
    assert f"{saved['env_steps']} env steps, {saved['updates']} updates" in resumed
    rows = [r for r in _records(run_dir) if "loss/value" in r]
    assert rows[-1]["env_steps"] >= saved["env_steps"] + 128 and rows[-1]["learner/gradient_steps"] > 0
    assert max(r["inference/policy_lag_max"] for r in _records(run_dir) if "inference/policy_lag_max" in r) == 0


def test_stop_when_through_ray_finishes_the_chunks_in_flight_and_checkpoints_what_it_counted(tmp_path, cluster):
    """Through Ray, collection chunks may be in flight when an evaluation runs (the local runner
    has none); a run that `stop_when` ends there waits for them, counts their steps, evaluates no
    more, and its checkpoint holds the steps its metrics end on (the resume after an early stop:
    tests/test_pipeline.py)."""
    cfg = _cfg(
        tmp_path,
        cluster,
        total_env_steps=1024,
        eval_every=256,
        eval_episodes=2,
        pipeline=PipelineConfig(rollout_workers=2, learners=1, checkpoint_every=0, resources=SMALL),
    )
    seen: list[int] = []
    final = run_pipeline(
        cfg, announce=lambda _: None, stop_when=lambda e: seen.append(e["env_steps"]) or len(seen) == 2
    )
    rows = _records(cfg.output_dir)
    evaluations = [r["env_steps"] for r in rows if "eval/simple-train/sampled/all" in r]
    (stopped,) = [r["run/stopped_early_at"] for r in rows if "run/stopped_early_at" in r]
    assert seen == evaluations and stopped == evaluations[-1] and 256 <= stopped < 1024
    assert 0.0 <= final["eval/simple-train/sampled/all"] <= 1.0
    latest = cfg.output_dir / "checkpoints" / (cfg.output_dir / "checkpoints" / "latest").read_text()
    counted = json.loads((latest / "driver.json").read_text())["env_steps"]
    assert counted == max(r["env_steps"] for r in rows) >= stopped  # the chunks in flight were counted


def test_a_request_the_cluster_cannot_hold_fails_fast_with_what_is_short(tmp_path, cluster):
    cfg = _cfg(tmp_path, cluster, pipeline=PipelineConfig(learners=1, resources=replace(SMALL, learner_gpus=1.0)))
    started = time.time()
    with pytest.raises(ClusterTooSmallError, match=r"1 GPU \(the cluster has 0\).*--address"):
        run_pipeline(cfg, announce=lambda _: None)
    assert time.time() - started < cfg.pipeline.resources.placement_timeout_s  # before any wait for placement
    assert not cfg.output_dir.exists()  # nothing written: the same --output-dir takes the corrected run


def test_babyai_text_trains_through_the_ray_runner_end_to_end(tmp_path, cluster):
    """BabyAI-Text, not Playground-Text, through every Ray actor: rollout workers, inference,
    replay (hindsight relabels from its partner), learner, evaluation on train and held-out missions."""
    env = EnvConfig(name="babyai-text", level="MixedLocal", goals="train", n_objects=4, max_steps=40)
    cfg = _cfg(
        tmp_path,
        cluster,
        env=env,
        total_env_steps=384,
        eval_every=384,
        eval_episodes=8,
        # the default warm start: a near-uniform policy reaches missions its partner reports (with 5
        # likelihood steps the untrained policy sat on a few actions and some runs relabeled nothing)
        warm_start_steps=100,
        warm_start_objective="uniform",
        pipeline=PipelineConfig(rollout_workers=2, learners=1, resources=SMALL),
    )
    assert cfg.agent.tiny_vocabulary == env.spec().vocabulary()
    run_pipeline(cfg)
    last = {k: v for r in _records(cfg.output_dir) for k, v in r.items()}
    assert last["env_steps"] >= 384 and last["learner/updates"] > 0
    assert last["buffer/relabeled_fraction"] > 0.02  # the partner's missions relabel episodes (0.17 on three runs)
    for goals in ("train", "test"):
        for goal_type in ("go to", "pick up", "all"):
            assert 0.0 <= last[f"eval/{goals}/sampled/{goal_type}"] <= 1.0


def test_textworld_trains_through_the_ray_runner_end_to_end(tmp_path, cluster):
    """TextWorld games (built offline, train and held-out) through every Ray actor, hindsight goals
    from the goal grammar, and the final checkpoint, which pickles the workers' games mid-episode."""
    pytest.importorskip("textworld")
    env = EnvConfig(name="textworld", tw_challenge="treasure_hunter", tw_levels=(4,), tw_games=2, max_steps=10)
    cfg = _cfg(
        tmp_path,
        cluster,
        env=env,
        total_env_steps=256,
        eval_every=256,
        eval_episodes=8,
        eval_modes=("greedy",),
        warm_start_steps=0,  # not what this test is about (its random play takes a third of it)
        pipeline=PipelineConfig(rollout_workers=2, learners=1, resources=SMALL),
    )
    run_pipeline(cfg)
    last = {k: v for r in _records(cfg.output_dir) for k, v in r.items()}
    assert last["env_steps"] >= 256 and last["learner/updates"] > 0
    assert last["buffer/relabeled_fraction"] > 0.05  # goals of the grammar reached the buffer (0.0: none did)
    assert 0.0 <= last["eval/test/greedy/all"] <= 1.0 and "eval/test/sampled/all" not in last
    assert (cfg.output_dir / "checkpoints" / "latest").exists()
