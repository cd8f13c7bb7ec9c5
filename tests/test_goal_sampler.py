"""The goal sampler (autotelic mode): the alias table and plan draws against the distribution
they stand for, learning progress against a naive recount, the sampler's choice on synthetic
competence histories, the generalising estimator on an unseen goal, the rollout side (episodes
start on the plan's goals), and a run on an environment that has no goal list."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from sacglam.config import AgentConfig, EnvConfig, GoalSamplerConfig, PipelineConfig, SACConfig, TrainConfig
from sacglam.envs.protocol import EnvironmentProtocolError
from sacglam.goal_sampler.alias import alias_table
from sacglam.goal_sampler.progress import OutcomeWindows
from sacglam.goal_sampler.sampler import GoalSampler
from sacglam.pipeline.run import run_pipeline
from sacglam.report import read_metrics
from sacglam.rollout_workers.worker import RolloutWorker
from sacglam.types import GoalPlan

PROGRESS = GoalSamplerConfig(mode="progress", epsilon=0.2, window=4, refresh=1e-9)
GENERALISING = GoalSamplerConfig(
    mode="generalising", epsilon=0.0, estimator_horizon=128, estimator_hidden=16, estimator_memory=256
)


# ---------------------------------------------------------------- alias table and plan


def _implied(accept, alias):
    """The distribution an alias table stands for, recounted column by column."""
    n = len(accept)
    p = [0.0] * n
    for i in range(n):
        p[i] += accept[i] / n
        p[alias[i]] += (1 - accept[i]) / n
    return p


@pytest.mark.parametrize("seed", range(20))
def test_an_alias_table_stands_for_exactly_the_normalised_weights(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    weights = rng.random(n) * (rng.random(n) < 0.7)  # some zeros
    weights[int(rng.integers(n))] += 0.5  # not all zero
    accept, alias = alias_table(weights.tolist())
    np.testing.assert_allclose(_implied(accept, alias), weights / weights.sum(), atol=1e-12)


def test_an_alias_table_refuses_weights_that_are_no_distribution():
    for bad in ([], [0.0, 0.0], [1.0, -0.5]):
        with pytest.raises(ValueError, match="alias_table needs"):
            alias_table(bad)


def test_plan_draws_follow_the_plan_and_leave_the_environment_share_to_the_environment():
    accept, alias = alias_table([0.6, 0.3, 0.1])
    plan = GoalPlan(("a", "b", "c"), accept, alias, environment_share=0.25)
    rng = np.random.default_rng(0)
    counts = Counter(plan.draw(rng) for _ in range(40_000))
    assert abs(counts[None] / 40_000 - 0.25) < 0.01
    own = 40_000 - counts[None]
    for goal, p in zip("abc", [0.6, 0.3, 0.1], strict=True):
        assert abs(counts[goal] / own - p) < 0.015
    assert GoalPlan().draw(rng) is None  # nothing discovered: the environment draws


# ---------------------------------------------------------------- learning progress


@pytest.mark.parametrize("seed", range(10))
def test_outcome_windows_match_a_naive_recount(seed):
    rng = np.random.default_rng(seed)
    windows, every = OutcomeWindows(window=3), {}
    for _ in range(200):
        goal, success = f"g{int(rng.integers(5))}", bool(rng.random() < 0.4)
        windows.add(goal, success)
        every.setdefault(goal, []).append(int(success))
    for goal, outcomes in every.items():
        last = outcomes[-6:]
        assert windows.count(goal) == len(last)
        assert windows.competence(goal) == pytest.approx(np.mean(last[-3:]))
        if len(last) >= 2:
            older, newer = last[: len(last) // 2], last[len(last) // 2 :]
            assert windows.progress(goal) == pytest.approx(abs(np.mean(newer) - np.mean(older)))
    assert windows.progress("never seen") is None


def _history(sampler, goal, outcomes):
    sampler.observe([goal], [(goal, bool(o)) for o in outcomes])


def test_the_sampler_follows_learning_progress_on_a_synthetic_history():
    sampler = GoalSampler(PROGRESS, seed=0)
    _history(sampler, "rising", [0, 0, 0, 0, 1, 1, 1, 1])  # progress 1
    _history(sampler, "half", [0, 0, 0, 0, 0, 1, 0, 1])  # progress 0.5
    _history(sampler, "mastered", [1] * 8)  # progress 0
    _history(sampler, "hopeless", [0] * 8)  # progress 0
    sampler.observe(["new"], [])  # no outcome yet: optimistic (1.0)
    plan = sampler.plan()
    p = dict(zip(plan.goals, _implied(plan.accept, plan.alias), strict=True))
    floor = 0.2 / 5
    expected = {"rising": 1.0, "half": 0.5, "mastered": 0.0, "hopeless": 0.0, "new": 1.0}
    for goal, lp in expected.items():
        assert p[goal] == pytest.approx(floor + 0.8 * lp / 2.5)
    # Once the rising goal is mastered its progress falls and the sampler moves on.
    _history(sampler, "rising", [1, 1, 1, 1, 1, 1, 1, 1])
    plan = sampler.plan()
    p = dict(zip(plan.goals, _implied(plan.accept, plan.alias), strict=True))
    assert p["rising"] == pytest.approx(floor)
    stats = sampler.stats()
    assert stats["goals/discovered"] == 5 and stats["goals/mastered"] == 2  # "rising" and "mastered"


def test_outcomes_of_goals_the_partner_never_reported_are_not_the_samplers():
    sampler = GoalSampler(PROGRESS, seed=0)
    sampler.observe([], [("an environment goal", True), ("an environment goal", False)])
    assert sampler.goals == [] and sampler.plan().goals == ()
    sampler.observe(["reported"], [("reported", True)])
    assert sampler.plan().goals == ("reported",)


def test_the_plan_is_rebuilt_in_amortised_constant_time():
    sampler = GoalSampler(replace(PROGRESS, refresh=0.5), seed=0)
    sampler.observe([f"g{i}" for i in range(10)], [])
    first = sampler.plan()
    sampler.observe([], [("g0", True)] * 4)  # 4 events < 0.5 x 10 goals: the plan stands
    assert sampler.plan() is first
    sampler.observe([], [("g0", True)])
    assert sampler.plan() is not first


def test_the_sampler_state_round_trips():
    for config in (PROGRESS, GENERALISING):
        sampler = GoalSampler(config, seed=3)
        rng = np.random.default_rng(0)
        for step in range(300):
            goal = f"g{int(rng.integers(6))}"
            wanted, _ = sampler.observe([goal], [(goal, bool(rng.random() < step / 300))])
            if wanted:
                sampler.add_features(wanted, rng.normal(size=(len(wanted), 8)))
        copy = GoalSampler(config, seed=3)
        copy.load_state_dict(sampler.state_dict())
        for s in (sampler, copy):  # the same future from the same state
            s.observe(["g7"], [("g1", True), ("g2", False)])
            if s.config.mode == "generalising":
                s.add_features(["g7"], np.ones((1, 8)))
        assert copy.plan() == sampler.plan() and copy.stats() == sampler.stats()


# ---------------------------------------------------------------- the generalising estimator


@pytest.mark.parametrize("seed", range(10))
def test_the_generalising_estimator_ranks_an_unseen_goal_like_its_neighbours(seed):
    """Two families of goals with distinct features: the agent improves on family A while family
    B stays flat. A goal of family A never tried must get A's progress, not B's."""
    rng = np.random.default_rng(seed)
    # LLM features share a large common component: the families differ by a small offset on top.
    common = 10 * rng.normal(size=16)
    centre = {"A": common + rng.normal(size=16), "B": common + rng.normal(size=16)}
    goals = {f"{family}{i}": family for family in "AB" for i in range(6)}
    goals["A-unseen"], goals["B-unseen"] = "A", "B"

    def features(names):
        return np.stack([centre[goals[g]] + 0.1 * rng.normal(size=16) for g in names])

    sampler = GoalSampler(GENERALISING, seed=seed)
    tried = [g for g in goals if "unseen" not in g]
    for step in range(640):  # A's competence rises all along: 0 -> 1
        goal = tried[step % len(tried)]
        competence = step / 640 if goals[goal] == "A" else 0.3
        wanted, _ = sampler.observe([goal], [(goal, bool(rng.random() < competence))])
        if wanted:
            sampler.add_features(wanted, features(wanted))
    sampler.observe(["A-unseen", "B-unseen"], [])
    sampler.add_features(["A-unseen", "B-unseen"], features(["A-unseen", "B-unseen"]))
    progress = dict(zip(sampler.goals, sampler.progress(), strict=True))
    a = [progress[g] for g in tried if goals[g] == "A"]
    b = [progress[g] for g in tried if goals[g] == "B"]
    assert np.mean(a) > np.mean(b)  # the head saw A's competence move and B's stay
    # Each never-tried goal is estimated like its own family, not like the other one.
    for unseen, own, other in (("A-unseen", a, b), ("B-unseen", b, a)):
        assert abs(progress[unseen] - np.mean(own)) < abs(progress[unseen] - np.mean(other))


def test_goal_features_come_from_the_agents_llm_and_the_ray_actor_gives_the_same():
    import asyncio

    from sacglam.inference.actor import InferenceActor
    from sacglam.inference.server import InferenceServer

    agent = AgentConfig(model="tiny-causal", lora_r=0, critic="none")
    goals = ["Grasp any bonsai", "Grow any cactus", "Grasp any bonsai"]
    server = InferenceServer(agent)
    features = server.goal_features(goals)
    assert features.shape == (3, server.agent.base_model.config.hidden_size) and features.dtype == np.float32
    np.testing.assert_array_equal(features[0], features[2])  # a goal's features depend on its text only
    assert not np.allclose(features[0], features[1])
    actor = InferenceActor(agent, max_batch=8, max_wait_ms=1.0)  # the Ray actor's class, called directly
    np.testing.assert_allclose(asyncio.run(actor.goal_features(goals)), features, atol=1e-6)


# ---------------------------------------------------------------- the rollout side


def test_episodes_a_worker_starts_follow_its_goal_plan():
    env = EnvConfig(n_objects=3, goals="simple-train", max_steps=8)
    worker = RolloutWorker(env, num_envs=4, seed=0)
    accept, alias = alias_table([1.0])
    worker.collect(8, None, goal_plan=GoalPlan(("Grasp any bonsai",), accept, alias, version=1))
    # Episodes last at most 8 steps: every episode that ends from here on started after the
    # worker's own reset, at an auto-reset under the plan.
    later = [e.goal for e in worker.collect(40, None).episodes]
    assert len(later) > 8 and set(later) == {"Grasp any bonsai"}
    before = [e.goal for e in RolloutWorker(env, num_envs=4, seed=0).collect(48, None).episodes]
    assert len(set(before)) > 1  # without a plan the environment draws


def test_a_goal_the_environment_refuses_at_reset_fails_with_a_fix():
    worker = RolloutWorker(EnvConfig(n_objects=3, goals="simple-train", max_steps=8), num_envs=2, seed=0)
    accept, alias = alias_table([1.0])
    with pytest.raises(EnvironmentProtocolError, match="goal_sampler.mode='environment'"):
        worker.collect(20, None, goal_plan=GoalPlan(("Grow any unicorn",), accept, alias))


# ---------------------------------------------------------------- a run


def _last_sampler_record(run_dir):
    return [r for r in read_metrics(run_dir) if "goals/discovered" in r][-1]


@pytest.mark.parametrize("mode", ["progress", "generalising"])
def test_a_run_on_an_environment_without_a_goal_list_samples_its_own_goals(mode, tmp_path, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])  # `tests.` importable
    cfg = TrainConfig(
        warm_start_steps=0,  # not what these tests are about
        algo="sac-her",
        env=EnvConfig(name="tests.test_env_protocol:Corridor", held_out_kwargs={}),
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32),
        sac=SACConfig.with_her(batch_size=16, update_every=16, gradient_steps=1),
        goal_sampler=GoalSamplerConfig(mode=mode, estimator_horizon=16),
        num_envs=4,
        total_env_steps=256,
        eval_every=256,
        eval_episodes=4,
        log_every=64,
        output_dir=tmp_path / "run",
        progress=False,
        pipeline=PipelineConfig(checkpoint_every=128),
    )
    assert cfg.env.spec().goals() is None  # the environment keeps its goal list to itself
    run_pipeline(cfg, announce=lambda _: None)
    last = _last_sampler_record(cfg.output_dir)
    assert 2 <= last["goals/discovered"] <= 5  # the corridor's cells the agent reached
    assert last["goals/outcomes"] > 0 and 0 <= last["goals/mean_progress"] <= 1


def test_a_playground_run_whose_goal_list_is_locked_away_still_samples_its_own_goals(tmp_path, monkeypatch):
    """The environment draws its own goals internally, but nothing of the pipeline may ask the
    spec for the goal list (evaluation, which does, is off here)."""
    from sacglam.envs.spec import EnvironmentSpec, PlaygroundSpec

    def forbidden(self):
        raise AssertionError("the environment's goal list was read")

    for cls in (EnvironmentSpec, PlaygroundSpec):
        monkeypatch.setattr(cls, "goals", forbidden)
    cfg = TrainConfig(
        warm_start_steps=0,  # not what these tests are about
        algo="sac-her",
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32),
        sac=SACConfig.with_her(batch_size=16, random_steps=64),
        goal_sampler=GoalSamplerConfig(mode="progress"),
        num_envs=8,
        total_env_steps=256,
        eval_episodes=0,
        log_every=64,
        output_dir=tmp_path / "run",
        progress=False,
    )
    run_pipeline(cfg, announce=lambda _: None)
    assert _last_sampler_record(cfg.output_dir)["goals/discovered"] >= 3


def test_goal_sampler_settings_are_validated_with_the_rule_that_broke():
    with pytest.raises(ValueError, match=r"epsilon \(1.5\) .* must be in \[0, 1\]"):
        GoalSamplerConfig(mode="progress", epsilon=1.5)
    with pytest.raises(ValueError, match="window and the estimator_"):
        GoalSamplerConfig(mode="generalising", window=0)
    with pytest.raises(ValueError, match="'progress' or 'generalising'"):
        GoalSampler(GoalSamplerConfig(), seed=0)  # mode 'environment' has no sampler
