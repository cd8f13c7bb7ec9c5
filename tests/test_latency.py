"""The step-latency wrapper of latency-hiding benchmarks: same environment stream, one sleep of
N x latency per vector step, picklable with a rollout worker's state, and validated in the config."""

import pickle

import pytest

from sacglam.config import EnvConfig
from sacglam.envs import latency
from sacglam.rollout_workers.worker import RolloutWorker


def test_a_latency_wrapped_vector_gives_the_same_stream_and_sleeps_n_times_latency(monkeypatch):
    slept = []
    monkeypatch.setattr(latency.time, "sleep", slept.append)
    plain = EnvConfig.variant("simple").make_vector(4)
    slow = EnvConfig(n_objects=3, goals="simple-train", max_steps=8, step_latency_ms=5.0).make_vector(4)
    assert isinstance(slow, latency.StepLatency) and not isinstance(plain, latency.StepLatency)
    (obs_a, info_a), (obs_b, info_b) = plain.reset(seed=3), slow.reset(seed=3)
    assert obs_a == obs_b
    for _ in range(20):
        actions = [c[-1] for c in info_a["candidates"]]
        obs_a, reward_a, term_a, trunc_a, info_a = plain.step(actions)
        obs_b, reward_b, term_b, trunc_b, info_b = slow.step(actions)
        assert obs_a == obs_b and (reward_a == reward_b).all() and (term_a == term_b).all()
        assert info_a["achieved_goals"] == info_b["achieved_goals"]
    assert slept == [pytest.approx(0.020)] * 20  # 4 environments x 5 ms, once per vector step


def test_a_rollout_worker_on_a_slow_environment_collects_and_checkpoints(monkeypatch):
    monkeypatch.setattr(latency.time, "sleep", lambda seconds: None)
    worker = RolloutWorker(EnvConfig(n_objects=3, goals="simple-train", max_steps=8, step_latency_ms=1.0), 2, seed=0)
    collected = worker.collect(10, distributions=None)
    assert collected.env_steps == 20 and collected.episodes
    state = worker.get_state()
    assert isinstance(pickle.loads(state)[0], latency.StepLatency)


def test_a_negative_latency_is_refused_with_the_unit():
    with pytest.raises(ValueError, match=r"step_latency_ms must be >= 0 \(milliseconds per env step\)"):
        EnvConfig(step_latency_ms=-1.0)
