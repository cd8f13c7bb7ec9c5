"""`benchmarks/studies/smollm2.py`, the SmolLM2 study's analysis, on two tiny runs of the study's own
configs (the tiny random model instead of SmolLM2, 64 env steps): the table's zero-shot point,
the random floor on the runs' evaluation episodes, and the diagnosis of policy and critic, kept in
each run directory and not recomputed."""

import json
from pathlib import Path

import pytest

from tests.helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # about 25 s: two short training runs, then the analysis

TINY = [
    "--runner", "local", "--total-env-steps", "64", "--eval-episodes", "8", "--eval-every", "64",
    "--num-envs", "8", "--agent.model", "tiny-causal", "--agent.lora-layers", "1",
    "--agent.critic-width", "32", "--pipeline.checkpoint-every", "0", "--no-progress", "--warm-start-steps", "0",
]  # fmt: skip
METHODS = {
    "sac-her": ["--sac.batch-size", "8", "--sac.critic-warmup-updates", "2"],
    "ppo": ["--ppo.rollout-steps", "32", "--ppo.minibatch-size", "16"],
}


def load_script():
    return load_benchmark("smollm2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two runs through `sacglam train`'s own entry point, in this process (a subprocess each
    would load torch and transformers again: about 9 core-seconds apiece)."""
    from sacglam.cli import main

    root = tmp_path_factory.mktemp("smollm2")
    study = load_script()
    for method, extra in METHODS.items():
        config = str(ROOT / study.CONFIGS[method])
        main(["train", "--config", config, "--seed", "0", "--output-dir", str(root / f"{method}-seed0"), *TINY, *extra])
    return root


def test_the_study_analysis_reads_diagnoses_and_keeps_its_diagnoses(runs, tmp_path):
    study = load_script()
    args = study.Args(
        seeds=(0,), runs=runs, analyse_only=True, diagnose=True, diagnosis_episodes=4, output=tmp_path / "out"
    )
    study.main(args)
    report = json.loads((tmp_path / "out" / "smollm2.json").read_text())
    sac, ppo = report["runs"]["sac-her/seed0"], report["runs"]["ppo/seed0"]
    assert sac["finished"] and ppo["finished"]
    # PPO's config evaluates once, at the end: its zero-shot point is the SAC run's (same policy, episodes)
    assert ppo["zero_shot"] == sac["zero_shot"] and set(sac["zero_shot"]) == {
        f"{s}/{p}" for s in study.SETS for p in study.POLICIES
    }
    assert sac["random_floor"] == ppo["random_floor"]  # same seed: the same evaluation episodes
    assert all(0.0 <= v <= 1.0 for v in sac["random_floor"].values())
    for name in ("train", "held-out"):
        critic = sac["diagnosis"][name]["critic"]
        assert 4 <= critic["transitions"] <= 4 * 8  # the first 8 states of each of 4 episodes
        assert critic["alpha"] > 0 and critic["mean_target_return"] >= critic["mean_return"]  # soft >= hard
        assert sac["diagnosis"][name]["q_on_expert_states"]["mean_spread_max_minus_min"] >= 0
        assert ppo["diagnosis"][name]["critic"]["mean_target_return"] == ppo["diagnosis"][name]["critic"]["mean_return"]
        assert "q_on_expert_states" not in ppo["diagnosis"][name]
        probe = sac["goal_probe"][name]  # the same expert states, under their own goal and another
        assert probe["states"] == sac["diagnosis"][name]["expert_states"]
        assert 0.0 <= probe["policy_total_variation"] <= 1.0 and 0.0 <= probe["argmax_q_changes"] <= 1.0
        assert probe["q_mean_abs_change"] >= 0 and probe["q_mean_spread_across_candidates"] >= 0
        assert "q_mean_own_goal" not in ppo["goal_probe"][name]
        by_type = sac["diagnosis"][name]["by_goal_type"]  # where a plan breaks: per type and plan step
        assert sum(t["states"] for t in by_type.values()) == sac["diagnosis"][name]["expert_states"]
        agreed = sum(t["greedy_agrees_with_expert"] * t["states"] for t in by_type.values())
        diagnosis = sac["diagnosis"][name]
        assert agreed == pytest.approx(diagnosis["greedy_agrees_with_expert"] * diagnosis["expert_states"])
        for t in by_type.values():
            assert [s["plan_step"] for s in t["by_plan_step"]] == list(range(len(t["by_plan_step"])))
            assert sum(s["states"] for s in t["by_plan_step"]) == t["states"]
            assert t["greedy_starts_a_shortest_plan"] >= t["greedy_agrees_with_expert"]  # the expert's is one
        assert probe["swap"] == "within the goal type"  # Grow goals swap with Grow goals, Grasp with Grasp
        assert sum(t["states"] for t in probe["by_type"].values()) == probe["states"]
        assert set(probe["by_type"]) <= {"grasp", "grow"} and all(
            "q_mean_abs_change" in t for t in probe["by_type"].values()
        )
    assert "q_mean_own_goal" not in report["zero_shot_goal_probe"]["train"]
    assert set(report["zero_shot_diagnosis"]["train"]["expert_verbs"]) <= {"Go", "Grasp", "Release"}
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
    # a second analysis takes the kept diagnoses instead of loading the models again
    kept = runs / "sac-her-seed0" / study.DIAGNOSIS_FILE
    kept.write_text(json.dumps({"train": {"marker": 1}}))
    study.main(args)
    again = json.loads((tmp_path / "out" / "smollm2.json").read_text())
    assert again["runs"]["sac-her/seed0"]["diagnosis"] == {"train": {"marker": 1}}


def test_agreement_by_goal_type_counts_the_expert_and_any_other_shortest_first_step():
    """The expert's own picks agree everywhere; a supply other than the expert's that grows the
    same thing starts a shortest plan without agreeing; a step that lengthens the plan does neither."""
    from sacglam.config import EnvConfig
    from sacglam.envs.expert import plan_length_after

    study = load_script()
    env = EnvConfig(n_objects=3, goals="simple-train", max_steps=8)
    steps = study.expert_states(env, 16)
    expert = study.agreement_by_goal_type(env, steps, [s["action"] for s in steps])
    assert {"grasp", "grow"} <= set(expert)
    for t in expert.values():
        assert t["greedy_agrees_with_expert"] == t["greedy_starts_a_shortest_plan"] == 1.0
    alternative, worse = [], []
    for s in steps:
        best = plan_length_after(s["observation"], s["action"])
        lengths = {a: plan_length_after(s["observation"], a) for a in s["candidates"]}
        alternative.append(next((a for a, n in lengths.items() if n == best and a != s["action"]), s["action"]))
        worse.append(next(a for a, n in lengths.items() if n is None or n > best))
    same_length = study.agreement_by_goal_type(env, steps, alternative)
    other = sum(a != s["action"] for a, s in zip(alternative, steps))
    assert other > 0  # some states have two equally short first steps (an animal: water or food)
    assert sum(t["greedy_starts_a_shortest_plan"] * t["states"] for t in same_length.values()) == len(steps)
    assert sum(t["greedy_agrees_with_expert"] * t["states"] for t in same_length.values()) == len(steps) - other
    longer = study.agreement_by_goal_type(env, steps, worse)
    assert all(t["greedy_starts_a_shortest_plan"] == t["greedy_agrees_with_expert"] == 0.0 for t in longer.values())
