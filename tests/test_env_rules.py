"""Playground-Text's rules, one scripted scenario each, through the public env API."""

import pytest
from gymnasium.error import ResetNeeded

from sacglam.envs import InvalidActionError, PlaygroundText

SCENE = ["green water", "green mouse", "blue rose", "red rose", "blue lion", "red food"]


def make(goal="Grow green mouse then grow blue lion", scene=SCENE, max_steps=30):
    env = PlaygroundText(n_objects=len(scene), goals="train", max_steps=max_steps)
    obs, info = env.reset(seed=0, options={"goal": goal, "scene": scene})
    return env, obs, info


def run(env, actions):
    out = None
    for action in actions:
        out = env.step(action)
    return out


def test_observation_text_matches_the_spec_example():
    env, obs, info = make()
    assert obs == (
        "Goal: Grow green mouse then grow blue lion\n"
        "You see: green water, green mouse, blue rose, red rose, blue lion, red food\n"
        "You are on: nothing\n"
        "You are holding: nothing\n"
        "You have grown: nothing\n"
        "Action:"
    )
    assert info["scene"] == SCENE
    assert info["goal"] == "Grow green mouse then grow blue lion"
    assert info["achieved_goals"] == []
    assert info["candidates"] == [f"Go to {o}" for o in SCENE] + ["Grasp", "Release"]


def test_held_object_leaves_the_see_line_and_the_candidates():
    env, _, _ = make()
    obs, *_, info = run(env, ["Go to red food", "Grasp"])
    assert "You see: green water, green mouse, blue rose, red rose, blue lion\n" in obs
    assert "You are on: nothing\nYou are holding: red food\n" in obs
    assert "Go to red food" not in info["candidates"]
    assert info["candidates"][-2:] == ["Grasp", "Release"]


def test_water_grows_a_plant_food_does_not():
    env, _, _ = make()
    obs, *_ = run(env, ["Go to red food", "Grasp", "Go to blue rose"])
    assert "You have grown: nothing" in obs
    env, _, _ = make()
    obs, *_, info = run(env, ["Go to green water", "Grasp", "Go to blue rose"])
    assert "You have grown: blue rose" in obs
    assert "Grow blue rose" not in info["achieved_goals"]  # a test goal: never reported


def test_food_and_water_grow_an_animal():
    for supply in ("red food", "green water"):
        env, _, _ = make()
        obs, *_, info = run(env, [f"Go to {supply}", "Grasp", "Go to blue lion"])
        assert "You have grown: blue lion" in obs
        assert "Grow blue lion" in info["achieved_goals"]


def test_supplies_do_not_grow_furniture_or_supplies():
    scene = ["red water", "blue food", "green door", "red cat"]
    env, _, _ = make("Grow red cat", scene)
    obs, *_ = run(env, ["Go to red water", "Grasp", "Go to green door", "Go to blue food"])
    assert "You have grown: nothing" in obs


def test_release_on_a_living_thing_grows_it_and_the_agent_stays_on_it():
    env, _, _ = make("Grow blue lion")
    obs, *_, info = run(env, ["Go to green water", "Grasp", "Go to green mouse"])
    assert "You are on: green mouse" in obs and "Grow green mouse" in info["achieved_goals"]
    obs, _, _, _, info = env.step("Release")  # grows the mouse again: a new grow event
    assert "You are on: green mouse\nYou are holding: nothing" in obs
    assert "You see: green water, green mouse, blue rose, red rose, blue lion, red food" in obs
    assert "Grow green mouse" not in info["achieved_goals"]  # not a first achievement any more
    assert "Grow green mouse then grow any animal" in info["achieved_goals"]


def test_release_on_nothing_puts_the_agent_on_the_released_object():
    env, _, _ = make()
    obs, *_ = run(env, ["Go to red food", "Grasp", "Release"])
    assert "You are on: red food\nYou are holding: nothing" in obs


def test_invalid_but_listed_actions_are_no_ops():
    env, obs0, _ = make()
    obs, reward, terminated, truncated, info = env.step("Grasp")  # on nothing
    assert obs == obs0 and info["achieved_goals"] == [] and not terminated
    obs, *_ = env.step("Release")  # holding nothing
    assert obs == obs0
    run(env, ["Go to red food", "Grasp", "Go to blue rose"])
    obs_before = env.state
    env.step("Grasp")  # already holding
    assert env.state._replace(steps=0) == obs_before._replace(steps=0)


def test_grasp_event_reports_grasp_goals():
    env, _, _ = make()
    *_, info = run(env, ["Go to blue lion", "Grasp"])
    assert {"Grasp blue lion", "Grasp any lion", "Grasp any blue thing", "Grasp blue living_thing"} <= set(
        info["achieved_goals"]
    )
    assert "Grasp blue animal" not in info["achieved_goals"]  # test goal


def test_sequential_goal_needs_its_first_part_at_an_earlier_step():
    # Second part before the first does not count; the order is enforced.
    env, _, _ = make("Grow green mouse then grow blue lion")
    steps = ["Go to red food", "Grasp", "Go to blue lion", "Go to green mouse"]
    rewards = [env.step(a)[1] for a in steps]
    assert rewards == [0, 0, 0, 0]
    obs, reward, terminated, truncated, info = env.step("Go to blue lion")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert "Grow green mouse then grow blue lion" in info["achieved_goals"]


def test_one_event_never_completes_both_parts():
    scene = ["red water", "red cat", "blue door", "green sofa"]
    env, _, _ = make("Grow red cat then grow any animal", scene)
    *_, terminated, _, _ = run(env, ["Go to red water", "Grasp", "Go to red cat"])
    assert not terminated
    obs, reward, terminated, _, _ = env.step("Go to red cat")  # growing it again completes it
    assert reward == 1.0 and terminated


def test_reward_is_zero_until_the_goal_and_the_episode_ends_there():
    env, _, _ = make("Grasp red food")
    obs, reward, terminated, truncated, _ = env.step("Go to red food")
    assert (reward, terminated) == (0.0, False)
    obs, reward, terminated, truncated, _ = env.step("Grasp")
    assert (reward, terminated, truncated) == (1.0, True, False)
    with pytest.raises(ResetNeeded):
        env.step("Release")


def test_truncation_after_max_steps_is_not_termination():
    env, _, _ = make("Grasp red food", max_steps=3)
    results = [env.step("Release") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)
    with pytest.raises(ResetNeeded):
        env.step("Release")


def test_success_on_the_last_allowed_step_is_a_termination():
    env, _, _ = make("Grasp red food", max_steps=2)
    _, reward, terminated, truncated, _ = run(env, ["Go to red food", "Grasp"])
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_stepping_before_reset_is_an_error():
    with pytest.raises(ResetNeeded, match="reset"):
        PlaygroundText().step("Grasp")


def test_action_not_among_candidates_names_it_and_the_candidates_and_changes_nothing():
    env, obs0, _ = make()
    with pytest.raises(InvalidActionError, match=r"'Go to purple cat'.*Go to green water"):
        env.step("Go to purple cat")
    run(env, ["Go to red food", "Grasp"])
    state = env.state
    with pytest.raises(InvalidActionError, match="Go to red food"):
        env.step("Go to red food")  # the held object is not a candidate
    with pytest.raises(InvalidActionError):
        env.step(3)  # type: ignore[arg-type]
    assert env.state == state
    env.step("Release")  # the episode goes on


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"goals": "train", "n_objects": 3}, "n_objects=3 is too small"),
        ({"goals": "simple-train", "n_objects": 1}, "n_objects=1 is too small"),
        ({"goals": "validation"}, "is not a goal set"),
        ({"max_steps": 0}, "max_steps must be a positive int"),
        ({"n_objects": 200}, "exceeds"),
    ],
)
def test_constructor_rejects_bad_arguments_with_a_clear_message(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        PlaygroundText(**kwargs)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"goal": "Grasp any flower"}, "not in this environment's goal set.*test goal"),
        ({"goal": "Grasp purple cat"}, "is not a Playground-Text goal"),
        ({"colour": "red"}, "unknown reset option"),
        ({"scene": ["red cat"] * 6}, "must be distinct"),
        ({"scene": ["red cat", "blue dog"]}, "has 2 objects but this environment has n_objects=6"),
        ({"scene": ["red cat", "blue dog", "pink pig", "red dog", "red pig", "red cow"]}, "unknown color 'pink'"),
        ({"scene": ["red cat", "blue dog", "red pigs", "red dog", "red pig", "red cow"]}, "unknown type 'pigs'"),
        ({"scene": "red cat"}, "must be a list"),
    ],
)
def test_reset_rejects_bad_options_and_keeps_the_running_episode(options, message):
    env = PlaygroundText()
    obs, _ = env.reset(seed=3)
    with pytest.raises((ValueError, TypeError), match=message):
        env.reset(options=options)
    assert env.state.steps == 0 and env.state.goal == obs.split("\n")[0][len("Goal: ") :]
    env.step("Grasp")  # the episode that was running is intact


def test_reset_with_scene_and_goal_starts_exactly_there_even_if_infeasible():
    scene = ["red door", "blue door", "green door", "red sofa", "blue sofa", "green sofa"]
    env = PlaygroundText()
    obs, info = env.reset(options={"goal": "Grow any cat", "scene": scene})
    assert info["scene"] == scene and info["goal"] == "Grow any cat"
    for _ in range(30):
        obs, reward, terminated, truncated, info = env.step(info["candidates"][0])
        assert reward == 0.0
    assert truncated


def test_render_ansi_returns_the_observation():
    env = PlaygroundText(render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
