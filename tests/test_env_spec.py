"""Environment specs (`sacglam.envs.spec`): Playground-Text's spec gives what its own modules give,
BabyAI-Text's has its split, types and a vocabulary covering its texts, and any protocol
environment can be named by gymnasium id or `module:Class`."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from sacglam.envs.babyai import ACTIONS, BabyAIText
from sacglam.envs.goals import GOAL_SETS, GOAL_TYPES, goal_type, goal_type_shares
from sacglam.envs.spec import ALL_TYPES, BabyAISpec, ExpertUnavailableError, GymnasiumSpec, PlaygroundSpec
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
    assert type(by_class.make()).__name__ == "Corridor"
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
