"""What a user's own environment meets with default settings (`docs/guides/own-environment.md`, "In a run"):
the tiny model's words collected by random play, the language warm start on for a random model
(and off for a pre-trained one), an untrained policy that explores, and `sacglam evaluate` on it.

`Lamps` is the kind of environment a user brings: four lamps, goals such as `Turn on the red lamp
then the blue lamp`, actions `Toggle the <colour> lamp` (4 tokens) and `Wait` (1 token), no
`vocabulary` attribute and no expert."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from tokenizers import pre_tokenizers

from sacglam.config import DEFAULT_WARM_START_STEPS, AgentConfig, EnvConfig, TrainConfig
from sacglam.envs.protocol import check_environment
from sacglam.envs.words import WORD, collect_words
from tests.foreign_envs import LAMP_COLOURS, Lamps

COLOURS = LAMP_COLOURS
LAMPS = "tests.foreign_envs:Lamps"


def test_lamps_follows_the_protocol():
    assert check_environment(Lamps()) == {"goal": True, "hindsight": True, "goal_type": False, "goal_reset": True}


def test_word_split_is_the_tiny_tokenizers_own():
    whitespace = pre_tokenizers.Whitespace()
    rng = random.Random(0)
    alphabet = "ab Z9_-.,:!'\n\té"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(30)))
        assert WORD.findall(text) == [word for word, _ in whitespace.pre_tokenize_str(text)], text


def test_an_environment_without_a_vocabulary_gets_the_words_random_play_meets():
    words = collect_words(Lamps, steps=500)
    assert {"Goal", ":", "Turn", "on", "then", "Toggle", "Wait", "Lamps", "off", ".", ",", *COLOURS} <= set(words)
    assert len(words) == len(set(words)) and collect_words(Lamps, steps=500) == words  # no repeats; seeded
    cfg = TrainConfig(env=EnvConfig(name=LAMPS), agent=AgentConfig(model="tiny-causal", lora_r=0))
    assert set(cfg.agent.tiny_vocabulary) == set(collect_words(Lamps))


def test_random_play_that_fails_names_the_step_and_the_error():
    class Breaks(Lamps):
        def step(self, action):
            if self.t == 2:
                raise RuntimeError("lamp fuse blew")
            return super().step(action)

    with pytest.raises(
        ValueError, match="random play to collect the words of Breaks failed at step 2 .*lamp fuse blew"
    ):
        collect_words(Breaks)


def test_the_language_warm_start_is_on_for_a_random_model_and_off_for_a_pretrained_one():
    tiny = TrainConfig(env=EnvConfig(name=LAMPS), agent=AgentConfig(model="tiny-causal", lora_r=0))
    assert tiny.warm_start_steps == DEFAULT_WARM_START_STEPS
    pretrained = TrainConfig(agent=AgentConfig(model="smollm2-135m"))
    assert pretrained.warm_start_steps == 0
    assert TrainConfig(agent=AgentConfig(model="tiny-causal", lora_r=0), warm_start_steps=0).warm_start_steps == 0
    with pytest.raises(ValueError, match="warm_start_steps must be >= 0"):
        TrainConfig(warm_start_steps=-1)


def test_with_default_settings_the_untrained_tiny_policy_explores_a_new_environment():
    """Before the warm start, the tiny model's policy puts nearly all its mass on the 1-token `Wait`
    (summed log-probs of random weights favour short actions); after the default warm start the
    policy is close to uniform over the 5 actions: `Wait` near 1/5, no action above 0.3."""
    from sacglam.learner.service import LearnerService
    from sacglam.models.agent import GLAMAgent

    torch.set_num_threads(1)
    cfg = TrainConfig(env=EnvConfig(name=LAMPS), agent=AgentConfig(model="tiny-causal", lora_r=0), seed=0)
    env, rng = Lamps(), random.Random(0)
    observations, candidates = [], []
    obs, info = env.reset(seed=1)
    for _ in range(64):
        observations.append(obs)
        candidates.append(info["candidates"])
        obs, _, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            obs, info = env.reset(seed=rng.randrange(1000))

    def probabilities(agent: GLAMAgent) -> torch.Tensor:
        with torch.inference_mode():
            return agent(agent.encode(observations, candidates), with_critic=False).log_pi.exp()

    torch.manual_seed(cfg.seed)
    untrained = probabilities(GLAMAgent(cfg.agent).eval())
    assert untrained[:, -1].mean() > 0.9  # `Wait` takes almost everything: the failure the default prevents

    warmed = probabilities(LearnerService(cfg, storage=None).agent)  # type: ignore[arg-type]
    assert abs(warmed[:, -1].mean() - 0.2) < 0.05 and warmed.max(-1).values.max() < 0.3  # seeds 0-2: 0.199-0.202, 0.209


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sacglam", *args], capture_output=True, text=True, timeout=300)


def test_evaluate_takes_any_protocol_environment_and_a_run_configs_environment(tmp_path):
    out = tmp_path / "lamps.json"
    done = run_cli("evaluate", "--env.name", LAMPS, "--episodes", "16", "--output", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    results = report["results"]
    assert [(r["variant"], r["goal_set"], r["policy"]) for r in results] == [(LAMPS, "train", "random")]  # no expert
    assert report["config"]["policies"] == [] and report["policies_run"] == ["random"]  # none asked: the defaults
    assert results[0]["env"] == {"name": LAMPS, "goals": "train"}  # not Playground's settings it never received
    assert 0.0 < results[0]["success_by_goal_type"]["all"]["success"] < 1.0

    sanity = tmp_path / "corridor.json"
    done = run_cli(
        "evaluate", "--env.name", "sacglam.envs.sanity:GoalCorridor", "--episodes", "16", "--output", str(sanity),
        "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["policy"]: r["success_by_goal_type"]["all"]["success"] for r in json.loads(sanity.read_text())["results"]}
    assert rows["expert"] == 1.0 and rows["random"] < 1.0

    done = run_cli("evaluate", "--env.name", LAMPS, "--policies", "expert", "--episodes", "4")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "has no expert" in done.stderr and "drop expert from --policies" in done.stderr

    babyai = tmp_path / "babyai.json"
    done = run_cli(
        "evaluate", "--config", "tune_configs/runs/cpu_babyai_sac.yaml", "--policies", "random", "--episodes", "8",
        "--output", str(babyai), "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sets = [(r["variant"], r["goal_set"]) for r in json.loads(babyai.read_text())["results"]]
    assert sets == [("babyai-text", "train"), ("babyai-text", "test")]  # the run's env and its held-out twin


def test_flags_that_change_the_model_or_environment_work_the_defaults_out_again():
    """`--config` gives defaults worked out for the file's model and environment; a flag that
    changes either must not inherit them (CarryWord trained on SayWord's words, a pre-trained model
    warm-started as a random one)."""
    from sacglam.cli import parse

    carry = parse(
        ["train", "--config", "tune_configs/runs/sanity_sac.yaml", "--env.name", "sacglam.envs.sanity:CarryWord"]
    )
    assert {"Take", "card", "Show"} <= set(
        carry.agent.tiny_vocabulary
    ) and carry.warm_start_steps == DEFAULT_WARM_START_STEPS
    pretrained = parse(["train", "--config", "tune_configs/runs/sanity_sac.yaml", "--agent.model", "smollm2-135m",
                        "--agent.lora-r", "8"])  # fmt: skip
    assert pretrained.warm_start_steps == 0 and pretrained.agent.tiny_vocabulary == ()
    kept = parse(["train", "--config", "tune_configs/runs/cpu_simple_sac.yaml", "--warm-start-steps", "7"])
    assert kept.warm_start_steps == 7 and kept.warm_start_objective == "likelihood"  # the file's objective


def test_evaluate_chooses_what_it_evaluates_from_the_flags_and_the_run_config():
    from sacglam.cli import parse

    assert [label for label, _ in parse(["evaluate"]).environments()] == ["simple", "full"]
    assert [label for label, _ in parse(["evaluate", "--env.name", LAMPS]).environments()] == [LAMPS]
    paper = parse(["evaluate", "--config", "tune_configs/runs/paper_sac_her.yaml"])  # its env is the default one
    assert [env for _, env in paper.environments()] == [EnvConfig(n_objects=6, goals="train", max_steps=30)]


def test_a_run_written_before_the_objective_existed_resumes_with_the_likelihood_warm_start():
    import dataclasses

    from sacglam.config_io import from_dict

    saved = json.loads(json.dumps(dataclasses.asdict(TrainConfig(warm_start_steps=300))))
    del saved["warm_start_objective"], saved["report_transcripts"]
    assert from_dict(TrainConfig, saved).warm_start_objective == "likelihood"
    assert from_dict(TrainConfig, {"warm_start_steps": 300}).warm_start_objective == "uniform"  # a new file


def test_a_run_written_before_the_end_token_and_the_target_resumes_as_it_was_trained():
    """A full config.json from before `warm_start_target_kl` and `agent.end_of_action` existed:
    a fixed number of warm-start steps and no end-of-action token, as that run was trained; a new
    file without them gets the defaults, and a new dump records what was used."""
    import dataclasses

    from sacglam.config_io import from_dict

    saved = json.loads(json.dumps(dataclasses.asdict(TrainConfig(warm_start_steps=300))))
    assert saved["agent"]["lora_r"] == 0 and saved["agent"]["end_of_action"] is True  # resolved when dumped
    del saved["warm_start_target_kl"], saved["agent"]["end_of_action"], saved["report_transcripts"]
    old = from_dict(TrainConfig, saved)
    assert old.warm_start_target_kl is None and old.agent.end_of_action is False
    new = from_dict(TrainConfig, {"warm_start_steps": 300, "agent": {"model": "tiny-causal"}})
    assert new.warm_start_target_kl == 0.02 and new.agent.end_of_action is True and new.agent.lora_r == 0
    pretrained = from_dict(TrainConfig, {"agent": {"model": "smollm2-135m"}})
    assert pretrained.agent.end_of_action is False and pretrained.agent.lora_r == 16


def test_flags_that_change_the_model_work_out_its_rank_and_end_token_again():
    from sacglam.cli import parse

    pretrained = parse(["train", "--config", "tune_configs/runs/sanity_sac.yaml", "--agent.model", "smollm2-135m"])
    assert pretrained.agent.lora_r == 16 and pretrained.agent.end_of_action is False
    kept = parse(["train", "--config", "tune_configs/runs/cpu_simple_sac.yaml", "--agent.model", "smollm2-135m"])
    assert kept.agent.lora_r == 0 and kept.agent.end_of_action is False  # the file set both


def test_a_run_written_before_the_critic_input_norm_and_the_time_limit_resumes_with_raw_features():
    """A SmolLM2 run's full config.json from before `agent.critic_input_norm` and `time_limit_s`
    existed is read as it was trained (raw features: its checkpoints hold no statistics, no limit);
    a new file gets `auto` (standardised for a pre-trained model), and a dump records the choice."""
    import dataclasses

    from sacglam.config_io import from_dict

    saved = json.loads(json.dumps(dataclasses.asdict(TrainConfig(agent=AgentConfig(model="smollm2-135m")))))
    assert saved["agent"]["critic_input_norm"] == "standardise" and saved["time_limit_s"] is None
    del saved["agent"]["critic_input_norm"], saved["time_limit_s"], saved["report_transcripts"]
    old = from_dict(TrainConfig, saved)
    assert (
        old.agent.critic_input_norm == "none" and not old.agent.standardises_critic_input and old.time_limit_s is None
    )
    assert old.report_transcripts == 0 and TrainConfig().report_transcripts == 3  # no transcripts then
    new = from_dict(TrainConfig, {"agent": {"model": "smollm2-135m"}})
    assert new.agent.critic_input_norm == "standardise"


def test_a_flag_that_changes_the_model_works_out_the_critic_input_norm_again():
    from sacglam.cli import parse

    tiny = parse(["train", "--config", "tune_configs/runs/sanity_sac.yaml"])
    assert tiny.agent.critic_input_norm == "none"
    pretrained = parse(["train", "--config", "tune_configs/runs/sanity_sac.yaml", "--agent.model", "smollm2-135m"])
    assert pretrained.agent.critic_input_norm == "standardise"
    kept = ["train", "--config", "tune_configs/runs/sanity_sac.yaml", "--agent.model", "smollm2-135m"]
    assert parse([*kept, "--agent.critic-input-norm", "none"]).agent.critic_input_norm == "none"
    assert parse([*kept, "--agent.critic-input-norm=none"]).agent.critic_input_norm == "none"


def test_a_tiny_sac_run_on_an_outside_environment_at_the_papers_settings_is_told_of_the_sanity_ones():
    from sacglam.config import SACConfig
    from sacglam.pipeline.run import paper_settings_note

    lamps = EnvConfig(name="tests.foreign_envs:Lamps")
    note = paper_settings_note(replace(TrainConfig(), env=lamps))
    assert note is not None and "sac-her at the paper's settings (batch 256" in note
    assert "tune_configs/runs/sanity_sac_her.yaml" in note
    sac = replace(TrainConfig(), algo="sac", sac=SACConfig(), env=lamps)
    assert "tune_configs/runs/sanity_sac.yaml" in (paper_settings_note(sac) or "")
    # nothing to say: changed SAC settings, a built-in environment, a pretrained model, PPO
    assert (
        paper_settings_note(replace(TrainConfig(), env=lamps, sac=replace(SACConfig.with_her(), batch_size=64))) is None
    )
    assert paper_settings_note(TrainConfig()) is None
    pretrained = AgentConfig(model="smollm2-135m")
    assert paper_settings_note(replace(TrainConfig(), env=lamps, agent=pretrained)) is None
    ppo = replace(TrainConfig(), algo="ppo", agent=replace(TrainConfig().agent, critic="value"), env=lamps)
    assert paper_settings_note(ppo) is None
