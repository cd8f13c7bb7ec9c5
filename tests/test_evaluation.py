"""Evaluation: the spec's uniform-random floors, stratified episode sets, and the CLI job."""

import json
import random

import pytest

from sacglam.cli import main
from sacglam.config import EnvConfig, EvalConfig
from sacglam.envs import ExpertPolicy, PlaygroundText, goal_type
from sacglam.evaluation import OVERALL, episode_specs, run_episodes, success_by_goal_type
from sacglam.policies import RandomPolicy
from sacglam.types import EpisodeResult


def random_policy_success(n_objects, goals, max_steps, episodes, seed=0):
    """Uniform-random success on the environment's own goal distribution (auto-drawn goals)."""
    env = PlaygroundText(n_objects=n_objects, goals=goals, max_steps=max_steps)
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed)
    successes = done = 0
    while done < episodes:
        obs, reward, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            successes += reward
            done += 1
            obs, info = env.reset()
    return successes / episodes


@pytest.mark.parametrize(
    "n_objects, goals, max_steps, documented_floor, tolerance",
    [  # docs/reference/playground-text.md, "Goal achievement, reward, episode end" (20,000 / 10,000 episodes)
        (3, "simple-train", 8, 0.250, 0.03),
        (3, "simple-train", 30, 0.674, 0.03),
        (3, "simple-test", 8, 0.16, 0.03),  # the held-out goals' floor on the simplified variant
        (6, "train", 30, 0.062, 0.015),
    ],
)
def test_uniform_random_success_matches_the_documented_floors(n_objects, goals, max_steps, documented_floor, tolerance):
    rate = random_policy_success(n_objects, goals, max_steps, episodes=4000)
    assert abs(rate - documented_floor) < tolerance, rate


def test_episode_specs_are_stratified_by_goal_type_and_reproducible():
    specs = episode_specs(EnvConfig.variant("full"), 400, seed=3)
    assert specs == episode_specs(EnvConfig.variant("full"), 400, seed=3)
    assert specs != episode_specs(EnvConfig.variant("full"), 400, seed=4)
    results = [EpisodeResult(s.goal, goal_type(s.goal), s.seed, True, 1) for s in specs]
    table = success_by_goal_type(results, EnvConfig.variant("full"))
    assert {t: table[t]["episodes"] for t in table if t != OVERALL} == {
        "grasp": 100,
        "grow": 100,
        "grow then grasp": 100,
        "grow then grow": 100,
    }


def test_overall_success_weights_goal_types_by_their_share_of_the_goal_set():
    results = [EpisodeResult("Grasp red cat", "grasp", 0, True, 2), EpisodeResult("Grow red cat", "grow", 0, False, 8)]
    table = success_by_goal_type(results, EnvConfig.variant("simple"))
    assert table["grasp"]["success"] == 1.0 and table["grow"]["success"] == 0.0
    assert table[OVERALL]["success"] == pytest.approx(136 / 182)


def test_run_episodes_does_not_depend_on_the_number_of_parallel_envs():
    specs = episode_specs(EnvConfig.variant("full"), 40, seed=0)
    env_config = EnvConfig.variant("full")
    one = run_episodes(ExpertPolicy(), env_config, specs, num_envs=1)
    many = run_episodes(ExpertPolicy(), env_config, specs, num_envs=7)
    assert one == many
    assert all(r.success for r in one)
    assert [r.goal for r in one] == [s.goal for s in specs]


def test_random_policy_is_seeded_and_picks_among_candidates():
    candidates = [["a", "b", "c"], ["d", "e"]]
    assert RandomPolicy(1).act(["x", "y"], candidates) == RandomPolicy(1).act(["x", "y"], candidates)
    picks = RandomPolicy(0).act(["x"] * 2, candidates)
    assert picks[0] in candidates[0] and picks[1] in candidates[1]


def test_evaluate_command_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "eval.json"
    main(["evaluate", "--episodes", "8", "--variants", "simple", "--output", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "simple / simple-train / expert" in printed and "simple / simple-test / random" in printed
    report = json.loads(out.read_text())
    rows = {(r["goal_set"], r["policy"]): r for r in report["results"]}
    assert set(rows) == {(g, p) for g in ("simple-train", "simple-test") for p in ("expert", "random")}
    assert rows[("simple-train", "expert")]["success_by_goal_type"][OVERALL]["success"] == 1.0
    assert report["policies_run"] == ["expert", "random"]
    assert rows[("simple-test", "random")]["env"] == {
        "name": "playground-text", "goals": "simple-test", "n_objects": 3, "max_steps": 8, "step_latency_ms": 0.0,
    }  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_objects=2, goals="train"), "too small"),
        (dict(goals="hard"), "is not a goal set"),
    ],
)
def test_env_config_validates_with_the_environment_rules(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kwargs)


def test_eval_config_rejects_zero_episodes():
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        EvalConfig(episodes=0)


def test_env_config_variants_and_held_out_sets():
    assert EnvConfig.variant("simple") == EnvConfig(n_objects=3, goals="simple-train", max_steps=8)
    assert EnvConfig.variant("full").held_out.goals == "test"
    with pytest.raises(ValueError, match="with goals=.test. has no held-out goal set"):
        _ = EnvConfig.variant("full").held_out.held_out


def test_an_evaluation_in_parts_equals_each_goal_set_run_at_once_with_the_greedy_policy():
    """Parts only cut the episode list: greedy results (no sampling) equal one run over all specs."""
    import torch

    from sacglam.config import AgentConfig, TrainConfig
    from sacglam.evaluation import EVAL_PART_EPISODES, EVAL_SEED_OFFSET, training_evaluation
    from sacglam.models import GLAMAgent
    from sacglam.models.policy import LLMPolicy, evaluate_agent

    episodes = EVAL_PART_EPISODES + 5  # two parts per goal set and mode: a full one and a short one
    cfg = TrainConfig(
        warm_start_steps=0,  # not what these tests are about
        agent=AgentConfig(model="tiny-causal", lora_r=16, critic_width=16),
        num_envs=8,
        eval_episodes=episodes,
        progress=False,
    )
    torch.manual_seed(0)
    agent = GLAMAgent(cfg.agent).eval()
    parts = training_evaluation(cfg)
    assert len(parts) == 2 * 2 * 2 and sorted({len(p.specs) for p in parts}) == [5, EVAL_PART_EPISODES]
    results = evaluate_agent(agent, cfg)
    for env_cfg in (cfg.env, cfg.env.held_out):
        specs = episode_specs(env_cfg, cfg.eval_episodes, cfg.seed + EVAL_SEED_OFFSET)
        table = success_by_goal_type(run_episodes(LLMPolicy(agent, greedy=True), env_cfg, specs, num_envs=7), env_cfg)
        for goal_type_name, row in table.items():
            assert results[f"eval/{env_cfg.goals}/greedy/{goal_type_name}"] == row["success"]
        assert f"eval/{env_cfg.goals}/sampled/all" in results


def test_leaving_out_modes_and_the_held_out_set_keeps_the_other_parts_as_they_were():
    """`eval_modes` and `eval_held_out` only drop parts: each remaining part has the same episodes
    and sampling seed as in the full evaluation, so its figures do not change."""
    from dataclasses import replace

    from sacglam.config import TrainConfig
    from sacglam.evaluation import training_evaluation

    full = TrainConfig(warm_start_steps=0, eval_episodes=40, progress=False)
    kept = training_evaluation(replace(full, eval_modes=("greedy",), eval_held_out=False))
    assert {(p.env.goals, p.mode) for p in kept} == {(full.env.goals, "greedy")}
    assert kept == [p for p in training_evaluation(full) if p.env.goals == full.env.goals and p.mode == "greedy"]
    with pytest.raises(ValueError, match="eval_modes must name sampled, greedy or both"):
        replace(full, eval_modes=())


def test_a_log_file_gets_no_evaluation_bar_and_the_runs_bar_at_most_every_30_seconds(monkeypatch):
    """A terminal redraws bars in place; a file keeps every redraw (and a nested bar's cursor
    escapes), so a run whose stderr is a file writes its own bar seldom and no evaluation bar."""
    import io

    from sacglam.evaluation import evaluation_bar
    from sacglam.progress import LOG_FILE_INTERVAL_S, bar_interval

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert evaluation_bar([], show=True).disable and bar_interval() == {"mininterval": LOG_FILE_INTERVAL_S} == {
        "mininterval": 30.0
    }
    monkeypatch.setattr("sys.stderr", Terminal())
    assert not evaluation_bar([], show=True).disable and bar_interval() == {}
    assert evaluation_bar([], show=False).disable
