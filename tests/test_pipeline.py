"""The pipeline's pieces without Ray: handles, micro-batching, the inference service, rollout
workers, checkpoints, the schedule, and a local-runner resume that equals an uninterrupted run."""

import asyncio
import json
import os
from dataclasses import asdict, replace

import numpy as np
import pytest
import torch

from sacglam.config import (
    EnvConfig,
    GoalSamplerConfig,
    PipelineConfig,
    PPOConfig,
    SACConfig,
    TrainConfig,
)
from sacglam.inference.batching import MicroBatcher
from sacglam.inference.server import InferenceServer
from sacglam.pipeline.dashboard import metric_name
from sacglam.pipeline.driver import Counters, InferenceTally, counters_from_json
from sacglam.pipeline.run import RunDirectoryError, run_pipeline
from sacglam.pipeline.schedules import updates_due
from sacglam.rollout_workers.worker import RolloutWorker, sample_actions
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.handles import LocalHandle, resolve
from tests.helpers import TINY_AGENT, tiny_pipeline_config

TINY = TINY_AGENT


# ---------------------------------------------------------------- handles and scheduling


def test_local_handle_delivers_errors_at_resolve_like_ray():
    class Box:
        def double(self, x):
            return 2 * x

        def fail(self):
            raise KeyError("boom")

    box = LocalHandle(Box())
    assert resolve(box.call(Box.double, box.call(Box.double, 3))) == 12  # futures as arguments resolve
    future = box.call(Box.fail)
    with pytest.raises(KeyError, match="boom"):
        resolve(future)


def test_updates_follow_the_papers_schedule():
    assert updates_due(1000, None, 32, 2) == 0
    assert updates_due(128, 128, 32, 2) == 2  # learning starts with one update round
    assert updates_due(128 + 31, 128, 32, 2) == 2
    assert updates_due(128 + 32, 128, 32, 2) == 4
    assert updates_due(128 + 320, 128, 32, 2) == 22


def test_metric_names_are_valid_prometheus_names():
    assert metric_name("eval/simple-train/sampled/all") == "sacglam_eval_simple_train_sampled_all"
    assert metric_name("time/env_steps_per_s") == "sacglam_time_env_steps_per_s"


# ---------------------------------------------------------------- micro-batching


def test_micro_batcher_gathers_concurrent_requests_into_one_call_and_returns_each_its_own():
    calls = []

    def run_batch(requests):
        calls.append([r for r in requests])
        return [r * 10 for r in requests]

    async def main():
        batcher = MicroBatcher(run_batch, max_items=100, max_wait_s=0.05)
        return await asyncio.gather(*(batcher.submit(i, size=1) for i in range(5)))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1, 2, 3, 4]]


def test_micro_batcher_never_exceeds_max_items_and_never_splits_a_request():
    sizes = []

    def run_batch(requests):
        sizes.append(sum(n for _, n in requests))
        return [name for name, _ in requests]

    async def main():
        batcher = MicroBatcher(run_batch, max_items=4, max_wait_s=0.01)
        return await asyncio.gather(*(batcher.submit((f"r{i}", n), size=n) for i, n in enumerate([3, 3, 1, 6, 2])))

    assert asyncio.run(main()) == ["r0", "r1", "r2", "r3", "r4"]
    assert max(s for s in sizes if s != 6) <= 4 and 6 in sizes  # the oversized request ran alone
    assert sum(sizes) == 15


def test_micro_batcher_gives_every_caller_of_a_failed_batch_the_error():
    def run_batch(requests):
        raise RuntimeError("forward failed")

    async def main():
        batcher = MicroBatcher(run_batch, max_items=10, max_wait_s=0.01)
        return await asyncio.gather(*(batcher.submit(i, 1) for i in range(3)), return_exceptions=True)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))


# ---------------------------------------------------------------- inference service


@pytest.fixture(scope="module")
def server():
    torch.manual_seed(0)
    return InferenceServer(TINY)


def _states(n, seed):
    env = EnvConfig.variant("simple").make_vector(n)
    obs, info = env.reset(seed=seed)
    return obs, info["candidates"]


def test_one_batched_forward_equals_each_request_alone(server):
    requests = [_states(3, 0), _states(5, 1), _states(1, 2)]
    together = server.distributions_batch(requests)
    for (obs, cands), (probs, _) in zip(requests, together):
        alone, _ = server.distributions(obs, cands)
        np.testing.assert_allclose(probs, alone, atol=1e-5)
        assert probs.shape == (len(obs), max(len(c) for c in cands))
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)


def test_inference_counters_count_from_the_runs_start_across_actor_restarts_and_resumes():
    """Readings of one actor's life, a restart (the counters fall), then a resume from the totals
    a checkpoint saved: the logged counters never fall and sum every life's work."""
    counters = Counters()
    tally = InferenceTally(counters)

    def read(forwards, states):
        return tally.whole_run(
            {"inference/forwards": forwards, "inference/states_scored": states, "inference/version": 3}
        )

    assert read(4, 40)["inference/forwards"] == 4
    assert read(10, 120) == {
        "inference/forwards": 10,
        "inference/states_scored": 120,
        "inference/mean_batch_states": 12.0,
        "inference/version": 3,
    }
    after_restart = read(2, 8)  # a new life: 10 forwards and 120 states were counted before it
    assert (after_restart["inference/forwards"], after_restart["inference/states_scored"]) == (12, 128)
    assert after_restart["inference/mean_batch_states"] == pytest.approx(128 / 12)
    saved = tally.saved()
    assert (saved["inference/forwards"], saved["inference/states_scored"]) == (12, 128)
    resumed = InferenceTally(counters_from_json(json.loads(json.dumps(asdict(counters) | {"inference_before": saved}))))
    first = resumed.whole_run({"inference/forwards": 1, "inference/states_scored": 5})
    assert (first["inference/forwards"], first["inference/states_scored"]) == (13, 133)

    # An actor that says which life its counters are of: a restart is seen even when the new life
    # has counted past the last reading of the one before (7 > 4).
    tally = InferenceTally(Counters())
    assert tally.whole_run({"inference/forwards": 4}, life=1.0)["inference/forwards"] == 4
    assert tally.whole_run({"inference/forwards": 7}, life=2.0) == {"inference/forwards": 11}
    assert tally.whole_run({"inference/forwards": 9}, life=2.0) == {"inference/forwards": 13}  # the same life


def test_weights_are_staged_then_applied_before_the_next_forward_and_old_versions_are_ignored():
    torch.manual_seed(0)
    server = InferenceServer(TINY)
    obs, cands = _states(4, 3)
    before, version = server.distributions(obs, cands)
    assert version == -1
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in server.agent.trainable_state_dict().items()}
    assert server.set_weights(3, state) == 3
    assert server.version == -1  # staged only
    after, version = server.distributions(obs, cands)
    assert version == 3 and not np.allclose(before, after)
    assert server.set_weights(2, server.agent.trainable_state_dict()) == 3  # older: ignored
    again, version = server.distributions(obs, cands)
    assert version == 3 and np.allclose(after, again)


# ---------------------------------------------------------------- rollout workers


def test_sampled_actions_follow_the_probabilities_and_never_pick_padding():
    rng = np.random.default_rng(0)
    probs = np.array([[0.7, 0.3, 0.0], [0.1, 0.2, 0.7]], dtype=np.float32)
    candidates = [["a", "b"], ["x", "y", "z"]]
    picks = [sample_actions(probs, candidates, rng) for _ in range(4000)]
    first = np.mean([p[0] == "a" for p in picks])
    third = np.mean([p[1] == "z" for p in picks])
    assert abs(first - 0.7) < 0.03 and abs(third - 0.7) < 0.03
    assert all(p[0] in ("a", "b") for p in picks)


def test_a_restored_worker_continues_exactly_like_the_original():
    worker = RolloutWorker(EnvConfig.variant("simple"), 4, seed=5)
    worker.collect(5, None)
    state = worker.get_state()
    ahead = worker.collect(20, None)
    twin = RolloutWorker(EnvConfig.variant("simple"), 4, seed=99)
    twin.set_state(state)
    replay = twin.collect(20, None)
    assert ahead.env_steps == replay.env_steps == 80
    assert ahead.episodes == replay.episodes and ahead.episodes


def test_episodes_from_a_worker_carry_the_partner_goals_and_candidates():
    worker = RolloutWorker(EnvConfig.variant("simple"), 8, seed=1)
    got = worker.collect(16, None)
    assert got.episodes and got.env_steps == 128
    for e in got.episodes:
        assert len(e.states) == len(e.candidates) == len(e.actions) + 1 == len(e.achieved_goals) + 1
        assert all(0 <= a < len(c) for a, c in zip(e.actions, e.candidates))


def test_segments_cut_at_rollout_ends_join_into_the_episodes_an_uncut_worker_records():
    def joined(segments_by_env):
        return [(s.goal, s.states, s.actions, s.rewards, s.achieved_goals) for s in segments_by_env]

    whole = RolloutWorker(EnvConfig.variant("simple"), 2, seed=3)
    reference = whole.collect(20, None).episodes
    cutting = RolloutWorker(EnvConfig.variant("simple"), 2, seed=3)
    pieces = cutting.collect(5, None, cut=True).episodes + cutting.collect(15, None).episodes
    assert any(p.cut for p in pieces) and not any(e.cut for e in reference)
    open_parts: dict = {}
    rebuilt = []
    for p in pieces:  # join each cut segment to its continuation (same goal and scene, starts at its last state)
        key = (p.goal, p.scene)
        if key in open_parts:
            head = open_parts.pop(key)
            assert head.states[-1] == p.states[0]
            p = replace(
                p,
                states=head.states + p.states[1:],
                candidates=head.candidates + p.candidates[1:],
                actions=head.actions + p.actions,
                rewards=head.rewards + p.rewards,
                achieved_goals=head.achieved_goals + p.achieved_goals,
            )
        if p.cut:
            open_parts[key] = p
        else:
            rebuilt.append(p)
    key = lambda e: (e.goal, e.scene, e.actions)  # noqa: E731
    assert sorted(joined(sorted(rebuilt, key=key))) == sorted(joined(sorted(reference, key=key)))


# ---------------------------------------------------------------- checkpoints


def test_a_checkpoint_is_visible_only_once_committed_and_old_ones_are_pruned(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    assert store.latest() is None
    tmp = store.begin(100)
    (tmp / "part").write_text("x")
    assert store.latest() is None  # half-written: invisible
    for step in (100, 200, 300):
        tmp = store.begin(step) if step != 100 else tmp
        store.commit(tmp, step)
        assert store.latest().name == f"step-{step:09d}"
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000000200", "step-000000300"]


# ---------------------------------------------------------------- the local runner


_cfg = tiny_pipeline_config


def _ppo_cfg(tmp_path, name, **changes):
    return _cfg(
        tmp_path,
        name,
        algo="ppo",
        agent=replace(TINY, critic="value"),
        ppo=PPOConfig(rollout_steps=64, epochs=2, minibatch_size=32, her=True),
        **changes,
    )


def _autotelic_cfg(tmp_path, name, **changes):
    """SAC-GLAM+HER choosing its own goals with the generalising estimator (which also keeps the
    per-goal windows): the goal sampler's state must resume exactly too."""
    return _cfg(tmp_path, name, goal_sampler=GoalSamplerConfig(mode="generalising", estimator_horizon=16), **changes)


@pytest.mark.parametrize("make_cfg", [_cfg, _ppo_cfg, _autotelic_cfg], ids=["sac-her", "ppo-her", "sac-her-autotelic"])
def test_a_resumed_local_run_ends_exactly_where_an_uninterrupted_one_does(tmp_path, make_cfg):
    _cfg = make_cfg
    whole = _cfg(tmp_path, "whole")
    final_whole = run_pipeline(whole, announce=lambda _: None)

    class Killed(Exception):
        pass

    def kill_after_first_checkpoint(driver):
        if driver.store.latest() is not None:
            raise Killed

    cut = _cfg(tmp_path, "cut")
    with pytest.raises(Killed):
        run_pipeline(cut, on_chunk=kill_after_first_checkpoint)
    messages = []
    final_resumed = run_pipeline(replace(cut, resume=cut.output_dir), announce=messages.append)
    assert "resumed" in messages[0] and "256 env steps" in messages[0]
    assert final_resumed == final_whole
    a = torch.load(whole.output_dir / "learner.pt", weights_only=False)["learner"]["agent"]
    b = torch.load(cut.output_dir / "learner.pt", weights_only=False)["learner"]["agent"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    def losses(directory):
        rows = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
        return [(r["env_steps"], r.get("loss/critic", r.get("loss/value"))) for r in rows if "learner/updates" in r]

    assert losses(whole.output_dir) == losses(cut.output_dir)  # the resumed metrics replace the cut-off ones

    def inference_counts(directory):
        rows = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
        keys = ("inference/forwards", "inference/states_scored", "inference/mean_batch_states")
        return [(r["env_steps"], *(r[k] for k in keys)) for r in rows if "inference/forwards" in r]

    # The resumed run's inference actor is new, but its counters go on from the checkpoint's.
    assert inference_counts(whole.output_dir) == inference_counts(cut.output_dir)
    forwards = [row[1] for row in inference_counts(whole.output_dir)]
    assert forwards == sorted(forwards) and forwards[-1] > 0
    if make_cfg is _autotelic_cfg:

        def sampler_records(directory):
            rows = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
            return [{k: v for k, v in r.items() if k.startswith("goals/")} for r in rows if "goals/discovered" in r]

        assert sampler_records(whole.output_dir) == sampler_records(cut.output_dir)
        assert sampler_records(whole.output_dir)[-1]["goals/discovered"] >= 3


@pytest.mark.parametrize("make_cfg", [_cfg, _ppo_cfg], ids=["sac-her", "ppo-her"])
def test_stop_when_ends_a_run_at_the_evaluation_it_accepts_checkpointed_and_resumable(tmp_path, make_cfg):
    """`stop_when` sees every evaluation (with its env step); the first it accepts ends the run:
    no evaluation after it, its results returned, a checkpoint at the steps counted by then, and
    `--resume` takes the run on to its budget."""
    cfg = make_cfg(tmp_path, "run", total_env_steps=1024, eval_every=256, pipeline=PipelineConfig(checkpoint_every=0))
    seen, said = [], []

    def at_256(evaluation):
        seen.append(evaluation["env_steps"])
        return evaluation["env_steps"] >= 256

    final = run_pipeline(cfg, announce=said.append, stop_when=at_256)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r["env_steps"] for r in rows if "eval/simple-train/sampled/all" in r]
    assert seen == evaluated == [0, evaluated[1]] and 256 <= evaluated[1] < 1024
    last_evaluation = [r for r in rows if "eval/simple-train/sampled/all" in r][-1]
    assert final == {k: v for k, v in last_evaluation.items() if k.startswith(("eval/", "eval_pi_q_argmax/"))}
    assert [r["run/stopped_early_at"] for r in rows if "run/stopped_early_at" in r] == [evaluated[1]]
    assert any(line.startswith(f"stopped at {evaluated[1]} of 1024 env steps") for line in said)
    stopped = max(r["env_steps"] for r in rows)
    checkpoint = CheckpointStore(cfg.output_dir / "checkpoints").latest()
    assert (
        checkpoint is not None and json.loads((checkpoint / "driver.json").read_text())["env_steps"] == stopped < 1024
    )

    said = []  # a resume with a larger budget says which settings differ from the run's config.json
    run_pipeline(replace(cfg, resume=cfg.output_dir, total_env_steps=1280), announce=said.append)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["env_steps"] for r in rows) >= 1280
    changed = [line for line in said if line.startswith("resuming with settings that differ")]
    assert len(changed) == 1 and changed[0].split(": ", 1)[1].startswith("total_env_steps 1024 -> 1280 (this session")


def test_a_fresh_run_refuses_a_directory_with_checkpoints_and_resume_needs_one(tmp_path):
    cfg = _cfg(tmp_path, "run", total_env_steps=64)
    run_pipeline(cfg)
    with pytest.raises(RunDirectoryError, match="--resume"):
        run_pipeline(cfg)
    with pytest.raises(RunDirectoryError, match="holds no checkpoint to resume from"):
        run_pipeline(replace(cfg, resume=tmp_path / "elsewhere"))


def test_without_eval_at_start_the_first_evaluation_comes_after_eval_every_env_steps(tmp_path):
    cfg = _cfg(tmp_path, "run", total_env_steps=256, eval_every=128, eval_at_start=False)
    run_pipeline(cfg, announce=lambda _: None)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r["env_steps"] for r in rows if "eval/simple-train/sampled/all" in r]
    assert evaluated and min(evaluated) >= 128 and evaluated[-1] >= 256


def test_pipeline_settings_are_validated_with_a_fix():
    with pytest.raises(ValueError, match="split evenly over pipeline.rollout_workers"):
        TrainConfig(num_envs=30, pipeline=PipelineConfig(rollout_workers=4))
    with pytest.raises(ValueError, match="split evenly over pipeline.learners"):
        TrainConfig(sac=SACConfig.with_her(batch_size=255), pipeline=PipelineConfig(learners=2))
    with pytest.raises(ValueError, match=">= 1"):
        PipelineConfig(weight_sync_every=0)


def test_the_progress_bar_stops_at_the_budget_when_the_last_chunk_goes_past_it(tmp_path):
    """Collection runs in whole chunks (here 8 steps of 4 envs per worker): a budget that is
    not a multiple of a chunk is overshot by the collection, never by the bar."""
    seen = []
    cfg = _cfg(
        tmp_path, "run", total_env_steps=100, progress=True, pipeline=PipelineConfig(rollout_workers=2, chunk_steps=8)
    )
    run_pipeline(cfg, on_chunk=lambda driver: seen.append((driver.c.env_steps, driver.bar.n, driver.bar.total)))
    assert seen[-1][0] > 100  # the collection went past the budget
    assert all(n <= total == 100 for _, n, total in seen) and seen[-1][1] == 100


def test_advance_never_passes_the_total():
    import io

    from tqdm import tqdm

    from sacglam.progress import advance

    bar = tqdm(total=10, file=io.StringIO())
    for steps in (4, 4, 4, 4):
        advance(bar, steps)
    assert bar.n == 10


@pytest.mark.parametrize(
    "restart_after, eval_every, checkpoint_every",
    [(1, 256, 0), (1, 84, 0), (1, 256, 84), (3, 256, 0)],
    ids=["mid-run", "evaluation-due-at-the-redo", "checkpoint-due-at-the-redo", "last-rollout"],
)
def test_after_an_inference_restart_ppo_trains_only_on_rollouts_acted_with_the_last_updates_weights(
    tmp_path, monkeypatch, restart_after, eval_every, checkpoint_every
):
    """An inference actor that restarts mid-rollout acts with its initial weights (version -1)
    until the driver sends the weights again. PPO's learner takes the old policy with the last
    update's weights, so those steps would be trained on as if on-policy: the driver now waits for
    the weights and the rollout is collected again. Every rollout trained on has only chunks of
    the version published for it (before: the chunks of version -1 were trained on), also when an
    evaluation or a checkpoint falls due at the redo, or the restart hits the last rollout."""
    from sacglam.learner.service import LearnerService
    from sacglam.rollout_workers.service import RolloutService

    events: list = []  # chunk versions, "train" and "discard", in the order they happen
    real_collect, real_train = RolloutService.collect, LearnerService.train
    real_discard = getattr(RolloutService, "discard", None)

    def collect(self, *args, **kwargs):
        report = real_collect(self, *args, **kwargs)
        events.append(report.policy_version)
        return report

    def train(self, units):
        events.append("train")
        return real_train(self, units)

    def discard(self):
        events.append("discard")
        return real_discard(self)

    monkeypatch.setattr(RolloutService, "collect", collect)
    monkeypatch.setattr(LearnerService, "train", train)
    monkeypatch.setattr(RolloutService, "discard", discard, raising=False)
    restarted: dict = {}

    def restart_inference_mid_rollout(driver):
        server = driver.parts.inference[0].target
        if "initial" not in restarted:
            restarted["initial"] = {k: v.clone() for k, v in server.agent.trainable_state_dict().items()}
        elif (
            "at" not in restarted
            and driver.c.updates >= restart_after
            and driver.c.env_steps % driver.cfg.ppo.rollout_steps >= 16
        ):
            server.agent.load_trainable_state_dict(restarted["initial"])  # as a fresh actor builds it
            server.version = -1
            restarted["at"] = driver.c.env_steps

    cfg = _ppo_cfg(
        tmp_path,
        "restart",
        total_env_steps=256,
        eval_every=eval_every,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=checkpoint_every),
    )
    run_pipeline(cfg, on_chunk=restart_inference_mid_rollout, announce=lambda _: None)
    assert "at" in restarted
    rollouts, current = [], []
    for event in events:
        if event in ("train", "discard"):
            rollouts.append((event, current))
            current = []
        else:
            current.append(event)
    trained = [versions for event, versions in rollouts if event == "train"]
    assert len(trained) == 4  # 256 env steps of kept rollouts: the discarded one does not count
    for k, versions in enumerate(trained):
        assert set(versions) == {k}, (k, versions)  # rollout k acted with the weights of update k only
    assert any(event == "discard" and -1 in versions for event, versions in rollouts)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    discarded = max(r.get("rollout/discarded_env_steps", 0) for r in rows)
    assert 16 <= discarded < cfg.ppo.rollout_steps
    assert all(r.get("inference/policy_lag_max", 0) == 0 for r in rows)


def test_an_inference_actor_that_keeps_acting_with_other_weights_stops_a_ppo_run_with_a_clear_error(tmp_path):
    """A rollout acted with other weights is collected again, but not forever: an inference actor
    that comes back without weights at every rollout ends the run with one line saying so."""

    def restart_at_every_chunk_after_the_first_update(driver):
        if driver.c.updates >= 1:
            driver.parts.inference[0].target.version = -1

    cfg = _ppo_cfg(tmp_path, "restarts", total_env_steps=256, pipeline=PipelineConfig(rollout_workers=2))
    with pytest.raises(RuntimeError, match="3 rollouts in a row acted with other weights than the last update's"):
        run_pipeline(cfg, on_chunk=restart_at_every_chunk_after_the_first_update, announce=lambda _: None)


def test_a_rollout_worker_never_imports_torch_and_still_limits_its_threads():
    """Every Ray actor is a fresh process: a rollout worker, which holds no tensor, builds its
    environments without importing torch (1.5-3 s a process), and its thread limit still holds
    when an environment loads torch later (`OMP_NUM_THREADS`) or has loaded it already."""
    import subprocess
    import sys

    script = """
import sys
from sacglam.config import EnvConfig
from sacglam.rollout_workers.service import limit_torch_threads
from sacglam.rollout_workers.worker import RolloutWorker
RolloutWorker(EnvConfig(), 4, 0)
assert "torch" not in sys.modules, "a rollout worker imported torch"
limit_torch_threads(1)
import torch
before = torch.get_num_threads()
limit_torch_threads(2)
print(before, torch.get_num_threads())  # 1 of this machine's cores, then 2
"""
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "2"]


@pytest.mark.parametrize("make_cfg", [_cfg, _ppo_cfg], ids=["sac-her", "ppo-her"])
def test_a_time_limit_ends_a_run_with_its_final_evaluation_and_a_checkpoint_resume_reaches_the_budget(
    tmp_path, make_cfg
):
    """`time_limit_s`: nothing is issued past it (PPO: past the rollout it is in, whose episodes
    have ended and reached the storage); the run evaluates where it stopped, checkpoints there,
    and `--resume` (limit lifted) trains on to the budget. The clock is moved an hour on once 100
    env steps are collected (not slept), so the test does not depend on this machine's speed."""
    cfg = make_cfg(
        tmp_path,
        "run",
        total_env_steps=1024,
        eval_every=4096,
        time_limit_s=1800,
        pipeline=PipelineConfig(checkpoint_every=0),
    )
    said: list[str] = []

    moved = []

    def an_hour_later(driver):
        if driver.c.env_steps >= 100 and not moved:
            driver.started_at -= 3600
            moved.append(driver.c.env_steps)

    final = run_pipeline(cfg, on_chunk=an_hour_later, announce=said.append)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    [stopped] = [r["run/time_limit_at"] for r in rows if "run/time_limit_at" in r]
    assert moved[0] <= stopped < 1024 and stopped == max(r["env_steps"] for r in rows)
    if cfg.algo == "ppo":  # the second rollout (64-128) is finished and trained on, then the run stops
        assert stopped % cfg.ppo.rollout_steps == 0 and any(r.get("train/episodes", 0) > 0 for r in rows)
    evaluated = [r for r in rows if "eval/simple-train/sampled/all" in r]
    assert [r["env_steps"] for r in evaluated] == [0, stopped]  # the zero-shot point, then where it stopped
    assert final == {k: v for k, v in evaluated[-1].items() if k.startswith(("eval/", "eval_pi_q_argmax/"))}
    assert any(line.startswith("time limit (1800 s) reached at") for line in said)
    checkpoint = CheckpointStore(cfg.output_dir / "checkpoints").latest()
    assert checkpoint is not None and json.loads((checkpoint / "driver.json").read_text())["env_steps"] == stopped

    run_pipeline(replace(cfg, resume=cfg.output_dir, time_limit_s=None), announce=lambda _: None)
    rows = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["env_steps"] for r in rows) >= 1024


def test_a_time_limit_must_be_positive():
    with pytest.raises(ValueError, match="time_limit_s"):
        TrainConfig(time_limit_s=0)


def test_the_local_runner_runs_on_the_learner_threads_when_they_are_set_and_gives_the_count_back(
    tmp_path, torch_threads
):
    """One process learns and acts in the local runner: `pipeline.resources.learner_threads` is
    its torch thread count during the run when set; unset, the count it found stays; either way
    the caller has its count back after the run."""
    from sacglam.config import ResourcesConfig

    torch_threads(2)
    for asked, expected in ((1, 1), (None, 2)):
        during: list[int] = []
        cfg = tiny_pipeline_config(
            tmp_path,
            f"run{asked}",
            total_env_steps=64,
            eval_episodes=0,
            pipeline=PipelineConfig(rollout_workers=2, resources=ResourcesConfig(learner_threads=asked)),
        )
        run_pipeline(cfg, on_chunk=lambda _, seen=during: seen.append(torch.get_num_threads()), announce=lambda _: None)
        assert during and set(during) == {expected}
        assert torch.get_num_threads() == 2


def test_a_resumes_changed_settings_are_named_with_dotted_names_and_nothing_else(tmp_path):
    from sacglam.run_directory import changed_settings, write_run_config

    cfg = _cfg(tmp_path, "run")
    cfg.output_dir.mkdir(parents=True)
    assert changed_settings(cfg) == []  # no config.json yet: nothing to compare with
    write_run_config(cfg)
    resumed = replace(cfg, resume=cfg.output_dir, sac=replace(cfg.sac, gamma=0.5), seed=cfg.seed + 1)
    assert set(changed_settings(resumed)) == {f"sac.gamma {cfg.sac.gamma} -> 0.5", f"seed {cfg.seed} -> {cfg.seed + 1}"}
    assert changed_settings(replace(cfg, resume=cfg.output_dir)) == []
    # a mapping is one setting, compared whole: a key added to it, or a twin given, is a change
    other = tmp_path / "other"
    other.mkdir()
    lamps = replace(cfg, output_dir=other, env=EnvConfig(name="tests.test_env_protocol:Corridor"))
    write_run_config(lamps)
    twin = replace(lamps, resume=other, env=replace(lamps.env, held_out_kwargs={}))
    assert changed_settings(twin) == ["env.held_out_kwargs null -> {}"]
