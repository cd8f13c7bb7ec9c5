"""Environment specs (`sacglam.envs.spec`): Playground-Text's spec gives what its own modules give,
BabyAI-Text's has its split, types and a vocabulary covering its texts, and any protocol
environment can be named by gymnasium id or `module:Class`."""

from __future__ import annotations

import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from sacglam.envs.babyai import ACTIONS, BabyAIText
from sacglam.envs.goals import GOAL_SETS, GOAL_TYPES, goal_type, goal_type_shares
from sacglam.envs.protocol import EnvironmentProtocolError
from sacglam.envs.spec import (
    ALL_TYPES,
    BabyAISpec,
    EnvironmentArgumentsError,
    EnvironmentNameError,
    ExpertUnavailableError,
    GymnasiumSpec,
    PlaygroundSpec,
)
from sacglam.envs.vector import PlaygroundTextVector
from sacglam.models.tiny import SPECIAL_TOKENS, playground_vocabulary


def test_playground_spec_gives_what_playground_texts_modules_give():
    spec = PlaygroundSpec(n_objects=3, goal_set="simple-train", max_steps=8)
    assert spec.held_out() == PlaygroundSpec(3, "simple-test", 8)
    assert spec.held_out().held_out() is None
    assert spec.goal_types == GOAL_TYPES and spec.goals() == GOAL_SETS["simple-train"]
    assert spec.type_shares() == goal_type_shares("simple-train")
    assert all(spec.goal_type(g) == goal_type(g) for g in GOAL_SETS["train"][:500])
    assert list(SPECIAL_TOKENS) + list(spec.vocabulary()) == playground_vocabulary()  # token ids unchanged
    a, b = spec.make_vector(4), PlaygroundTextVector(4, n_objects=3, goals="simple-train", max_steps=8)
    assert a.reset(seed=3) == b.reset(seed=3)
    with pytest.raises(ValueError, match="goals"):
        PlaygroundSpec(goal_set="nope")


def test_babyai_spec_has_its_split_types_and_an_expert():
    spec = BabyAISpec("MixedLocal")
    held_out = spec.held_out()
    assert held_out == BabyAISpec("MixedLocal", "test") and held_out.held_out() is None
    assert not set(spec.goals()) & set(held_out.goals()) and len(spec.goals()) == 24
    assert spec.goal_types == ("go to", "pick up") and spec.type_shares() == {"go to": 0.5, "pick up": 0.5}
    env = spec.make()
    obs, info = env.reset(seed=0)
    assert spec.expert_action(env, obs, info["candidates"]) in ACTIONS
    with pytest.raises(ValueError, match="unknown BabyAI-Text level"):
        BabyAISpec("Maze")


def test_babyai_vocabulary_covers_every_word_of_its_texts():
    vocabulary, env, rng = (
        set(BabyAISpec(n_objects=8).vocabulary()),
        BabyAIText("MixedLocal", n_objects=8),
        random.Random(0),
    )
    words = set()
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            words |= set(re.findall(r"\w+|[^\w\s]+", obs))
            obs, _, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
            done = terminated or truncated
    words |= {w for text in ACTIONS + BabyAISpec().goals() + BabyAISpec().held_out().goals() for w in text.split()}
    assert words <= vocabulary, words - vocabulary


def test_any_protocol_environment_by_gymnasium_id_or_module_and_class():
    by_id = GymnasiumSpec("sacglam.envs.babyai:BabyAIText-GoToLocal-v0")
    assert by_id.make().unwrapped.level == "GoToLocal"
    assert by_id.goal_types == (ALL_TYPES,) and by_id.goals() is None and by_id.held_out() is None
    by_class = GymnasiumSpec("tests.test_env_protocol:Corridor", held_out_kwargs={})
    made = by_class.make()
    assert type(made).__name__ == "ProtocolGuard" and type(made.unwrapped).__name__ == "Corridor"
    assert by_class.held_out() == GymnasiumSpec("tests.test_env_protocol:Corridor", {}, "test", {})
    observations, infos = by_class.make_vector(3).reset(seed=0)
    assert len(observations) == 3 and infos["candidates"] == [["left", "right"]] * 3
    assert by_class.type_shares() == {ALL_TYPES: 1.0}
    assert not by_class.has_expert
    with pytest.raises(ExpertUnavailableError, match="Corridor' has no expert: give it an expert_action\\(\\) method"):
        by_class.expert_action(by_class.make(), "", [])
    rewards = by_class.make_vector(2)
    rewards.reset(seed=0)
    assert isinstance(rewards.step(["right", "left"])[1], np.ndarray)


@pytest.mark.parametrize(
    "entry, message",
    [
        ("", "env.name is empty"),
        ("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"),
        ("NoSuchEnv-v0", "NoSuchEnv"),
    ],
)
def test_a_bad_name_fails_at_once_with_the_reason(entry, message):
    with pytest.raises(Exception, match=message):
        GymnasiumSpec(entry)


class NoCandidates(gymnasium.Env):
    """Forgets the protocol's `candidates` (a newcomer's first environment, say)."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=64)

    def reset(self, *, seed=None, options=None):
        return "A lamp.", {}

    def step(self, action):
        return "A lamp.", 0.0, True, False, {}


class Split(NoCandidates):
    """Refuses a split it does not know, as an environment's own argument check does."""

    def __init__(self, split: str = "train"):
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")


def test_an_environment_that_refuses_its_arguments_fails_in_one_line_that_reproduces_the_traceback():
    spec = GymnasiumSpec("tests.test_env_spec:Split", held_out_kwargs={"split": "tset"})
    with pytest.raises(EnvironmentArgumentsError) as refused:
        spec.held_out()
    message = refused.value.one_line()
    assert re.match(
        re.escape(
            "env.name 'tests.test_env_spec:Split': constructing it with env.kwargs updated by env.held_out_kwargs, "
            "{'split': 'tset'}, failed (ValueError: split must be 'train' or 'test', not 'tset', at test_env_spec.py:"
        )
        + r"\d+\); its traceback: ",
        message,
    ), message
    command = shlex.split(message.rsplit("its traceback: ", 1)[1])  # as a shell reads it
    assert command[:2] == ["python", "-c"]
    root = Path(__file__).resolve().parents[1]
    ran = subprocess.run([sys.executable, "-c", command[2]], cwd=root, capture_output=True, text=True)
    assert ran.returncode == 1 and ran.stderr.strip().endswith(
        "ValueError: split must be 'train' or 'test', not 'tset'"
    )

    # arguments that are not Python literals: no command that would fail for another reason
    with pytest.raises(EnvironmentArgumentsError) as refused:
        GymnasiumSpec("tests.test_env_spec:Split", {"split": float("inf")})
    assert "split must be" in refused.value.one_line() and "python -c" not in refused.value.one_line()


def test_a_module_whose_own_import_is_missing_names_that_import(tmp_path, monkeypatch):
    package = tmp_path / "pantry_pkg_for_import_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text("import no_such_dependency_abc\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec puts the working directory on it
    with pytest.raises(EnvironmentNameError, match="imports 'no_such_dependency_abc', which is not installed"):
        GymnasiumSpec("pantry_pkg_for_import_test.env:Pantry")
    with pytest.raises(EnvironmentNameError, match="package 'pantry_pkg_for_import_test' has env; run from"):
        GymnasiumSpec("pantry_pkg_for_import_test.envs:Pantry")
    (package / "names.py").write_text("from json import no_such_name\n")  # found, but its import fails
    (package / "raises.py").write_text("raise ImportError('needs a licence file')\n")
    for module, said in (("names", "cannot import name 'no_such_name'"), ("raises", "needs a licence file")):
        with pytest.raises(EnvironmentNameError) as failed:
            GymnasiumSpec(f"pantry_pkg_for_import_test.{module}:Pantry")
        assert f"importing module 'pantry_pkg_for_import_test.{module}' failed (ImportError: " in str(failed.value)
        assert said in str(failed.value) and "not installed" not in str(failed.value)


def test_prepare_checks_the_first_reset_of_the_environment_and_its_twin():
    with pytest.raises(EnvironmentProtocolError, match="reset: info has no 'candidates'"):
        GymnasiumSpec("tests.test_env_spec:NoCandidates").prepare()
    GymnasiumSpec("tests.test_env_protocol:Corridor", held_out_kwargs={}).prepare()  # one that follows it


def test_a_vocabulary_that_misses_words_of_the_texts_gets_them_from_random_play_with_a_note(capsys):
    from tests.broken_envs import ShortVocabulary

    words = GymnasiumSpec("tests.broken_envs:ShortVocabulary").vocabulary()
    listed = ShortVocabulary.vocabulary
    assert words[: len(listed)] == listed  # the list first, in its order
    assert {"Turn", "the", "to", "Wait", ":", "."} <= set(words[len(listed) :])
    note = capsys.readouterr().out
    assert "note: ShortVocabulary.vocabulary lacks" in note and "'Turn'" in note
    from tests.broken_envs import DIAL_WORDS

    assert GymnasiumSpec("tests.broken_envs:Listed").vocabulary() == DIAL_WORDS  # a complete list: as it is, no note
    assert "note:" not in capsys.readouterr().out
