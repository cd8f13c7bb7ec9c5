"""The vectorized environment: equal to single environments stepped by hand; auto-reset; errors."""

import random

import gymnasium
import numpy as np
import pytest

from sacglam.envs import InvalidActionError, PlaygroundText, PlaygroundTextVector, goals


@pytest.mark.parametrize(
    "kwargs", [dict(n_objects=6, goals="train", max_steps=30), dict(n_objects=3, goals="simple-train", max_steps=8)]
)
def test_vector_env_equals_single_envs_stepped_by_hand(kwargs):
    n = 5
    vec = PlaygroundTextVector(n, **kwargs)
    singles = [PlaygroundText(**kwargs) for _ in range(n)]
    obs, info = vec.reset(seed=10)
    single_out = [env.reset(seed=10 + i) for i, env in enumerate(singles)]
    assert obs == [o for o, _ in single_out]
    assert info["candidates"] == [i["candidates"] for _, i in single_out]
    assert info["scene"] == [i["scene"] for _, i in single_out]
    rng = random.Random(0)
    episodes_ended = 0
    for _ in range(300):
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, inf = env.step(actions[i])
            assert (rewards[i], terminated[i], truncated[i]) == (r, te, tr)
            assert info["achieved_goals"][i] == inf["achieved_goals"]
            if te or tr:
                episodes_ended += 1
                assert info["_final_obs"][i] and info["final_obs"][i] == o
                assert info["final_info"][i]["candidates"] == inf["candidates"]
                o, inf = env.reset()
                assert info["scene"][i] == inf["scene"]
            else:
                assert not info["_final_obs"][i] and info["final_obs"][i] is None
            assert obs[i] == o and info["candidates"][i] == inf["candidates"] and info["goal"][i] == inf["goal"]
    assert episodes_ended > 20
    assert rewards.dtype == np.float32 and terminated.dtype == bool and truncated.dtype == bool


def test_auto_reset_returns_a_fresh_episode_and_keeps_the_final_one_in_info():
    vec = PlaygroundTextVector(2, n_objects=3, goals="simple-train", max_steps=2)
    vec.reset(seed=0, options={"goal": [goals.SIMPLE_TRAIN_GOALS[0], None]})
    obs, rewards, terminated, truncated, info = vec.step(["Release", "Release"])
    assert not info["_final_obs"].any()
    obs, rewards, terminated, truncated, info = vec.step(["Release", "Release"])
    assert truncated.all() and info["_final_obs"].all()
    for i in range(2):
        assert "You are on: nothing\nYou are holding: nothing\nYou have grown: nothing" in obs[i]
        assert info["final_info"][i]["goal"] in info["final_obs"][i]
        assert info["final_info"][i]["scene"] and info["achieved_goals"][i] == []


def test_one_bad_action_changes_no_environment():
    vec = PlaygroundTextVector(3)
    obs, info = vec.reset(seed=1)
    states = [env.state for env in vec.envs]
    with pytest.raises(InvalidActionError, match="environment 2"):
        vec.step([info["candidates"][0][0], "Grasp", "Fly away"])
    assert [env.state for env in vec.envs] == states
    with pytest.raises(ValueError, match="one action string per environment"):
        vec.step(["Grasp"])


def test_vector_reset_takes_per_env_goals_and_scenes():
    vec = PlaygroundTextVector(2)
    scene = ["red cat", "blue water", "green door", "red sofa", "blue sofa", "green sofa"]
    obs, info = vec.reset(options={"goal": ["Grow red cat", None], "scene": [scene, None]})
    assert info["goal"][0] == "Grow red cat" and info["scene"][0] == scene
    with pytest.raises(ValueError, match="one per environment"):
        vec.reset(options={"goal": "Grow red cat"})


def test_registered_ids_make_the_full_and_simplified_variants():
    env = gymnasium.make("sacglam.envs:PlaygroundText-v0")
    obs, info = env.reset(seed=0)
    assert len(info["scene"]) == 6 and info["goal"] in goals.TRAIN_GOALS
    simple = gymnasium.make("PlaygroundTextSimple-v0")
    obs, info = simple.reset(seed=0)
    assert len(info["scene"]) == 3 and info["goal"] in goals.SIMPLE_TRAIN_GOALS
    assert simple.unwrapped.max_steps == 8
    obs, *_ = simple.step(info["candidates"][0])
    vec = gymnasium.make_vec("PlaygroundTextSimple-v0", num_envs=4)
    assert isinstance(vec, PlaygroundTextVector) and vec.num_envs == 4
    assert len(vec.reset(seed=0)[0]) == 4
