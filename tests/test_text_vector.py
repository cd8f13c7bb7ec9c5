"""`TextVectorEnv` (the vector form of any protocol environment) against Playground-Text's own
vector form, and against a naive loop over single environments for BabyAI-Text."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sacglam.envs import PlaygroundText, PlaygroundTextVector
from sacglam.envs.babyai import BabyAIText
from sacglam.envs.protocol import InvalidActionError
from sacglam.envs.text_vector import TextVectorEnv


def _normalise(infos):
    keep = ("candidates", "goal", "scene", "achieved_goals", "final_obs", "_final_obs")
    out = {k: (list(v) if k == "_final_obs" else v) for k, v in infos.items() if k in keep}
    if "final_info" in infos:
        out["final_info"] = [
            None if f is None else {k: f[k] for k in ("candidates", "goal", "achieved_goals", "scene")}
            for f in infos["final_info"]
        ]
    return out


def test_it_reproduces_playground_texts_vector_form_step_for_step():
    kwargs = {"n_objects": 3, "goals": "simple-train", "max_steps": 8}
    reference = PlaygroundTextVector(4, **kwargs)
    generic = TextVectorEnv([PlaygroundText(**kwargs) for _ in range(4)])
    obs_a, info_a = reference.reset(seed=11)
    obs_b, info_b = generic.reset(seed=11)
    assert obs_a == obs_b and _normalise(info_a) == _normalise(info_b)
    rng, endings = random.Random(0), 0
    for _ in range(120):
        actions = [rng.choice(c) for c in info_a["candidates"]]
        obs_a, r_a, te_a, tr_a, info_a = reference.step(actions)
        obs_b, r_b, te_b, tr_b, info_b = generic.step(actions)
        assert obs_a == obs_b and np.array_equal(r_a, r_b) and np.array_equal(te_a, te_b)
        assert np.array_equal(tr_a, tr_b) and _normalise(info_a) == _normalise(info_b)
        endings += int(info_a["_final_obs"].sum())
    assert endings > 20


def test_babyai_text_vector_equals_a_loop_over_single_environments():
    n, rng = 3, random.Random(1)
    vector = TextVectorEnv([BabyAIText("MixedLocal", max_steps=10) for _ in range(n)])
    singles = [BabyAIText("MixedLocal", max_steps=10) for _ in range(n)]
    obs, infos = vector.reset(seed=5)
    expected = [env.reset(seed=5 + i) for i, env in enumerate(singles)]
    assert obs == [o for o, _ in expected] and infos["goal"] == [i["goal"] for _, i in expected]
    for _ in range(40):
        actions = [rng.choice(c) for c in infos["candidates"]]
        obs, rewards, terminated, truncated, infos = vector.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, info = env.step(actions[i])
            assert (rewards[i], terminated[i], truncated[i]) == (r, te, tr)
            assert infos["achieved_goals"][i] == info["achieved_goals"]
            if te or tr:
                assert infos["final_obs"][i] == o and infos["final_info"][i]["goal"] == info["goal"]
                o, info = env.reset()
            assert obs[i] == o and infos["goal"][i] == info["goal"] and infos["goal_type"][i] == info["goal_type"]


def test_a_bad_action_changes_nothing_and_names_the_environment():
    vector = TextVectorEnv([BabyAIText() for _ in range(2)])
    obs, _ = vector.reset(seed=0)
    with pytest.raises(InvalidActionError, match="environment 1: action 'fly' is not one of its candidates"):
        vector.step(["turn left", "fly"])
    untouched = TextVectorEnv([BabyAIText() for _ in range(2)])
    assert untouched.reset(seed=0)[0] == obs
    assert vector.step(["go forward"] * 2)[0] == untouched.step(["go forward"] * 2)[0]
    with pytest.raises(RuntimeError, match="before reset"):
        TextVectorEnv([BabyAIText()]).step(["turn left"])
    with pytest.raises(ValueError, match="one action string per environment"):
        vector.step(["turn left"])
