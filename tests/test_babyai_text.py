"""BabyAI-Text (`sacglam.envs.babyai`): missions and split, the text of the view, rewards against
BabyAI's verifiers, the partner's reports, the bot, forced goals, determinism, bad input."""

from __future__ import annotations

import random
import re

import gymnasium
import numpy as np
import pytest

from sacglam.envs.babyai import ACTIONS, COLORS, OBJECT_TYPES, TASKS, BabyAIText, Mission, missions, parse_mission
from sacglam.envs.babyai.missions import is_held_out


def _random_episode(env: BabyAIText, seed: int, rng: random.Random, options=None):
    """Yields (action, obs, reward, terminated, truncated, info) until the episode ends."""
    obs, info = env.reset(seed=seed, options=options)
    done = False
    while not done:
        action = rng.choice(info["candidates"])
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        yield action, obs, reward, terminated, truncated, info


def test_the_split_holds_out_a_third_of_each_task_and_trains_every_held_out_object_elsewhere():
    every = missions(TASKS, "all")
    train, test = missions(TASKS, "train"), missions(TASKS, "test")
    assert len(every) == len(TASKS) * len(COLORS) * len(OBJECT_TYPES) == 36
    assert set(train) | set(test) == set(every) and not set(train) & set(test)
    for task in TASKS:
        assert sum(m.task == task for m in test) == 6  # a third of 18 objects
    trained_objects = {(m.color, m.type) for m in train}
    for m in test:
        assert (m.color, m.type) in trained_objects  # seen under the other task
        assert m not in train
    for m in every:
        assert parse_mission(m.text) == m


@pytest.mark.parametrize("bad", ["go to red ball", "pick up the pink ball", "go to the red ball please", ""])
def test_a_malformed_mission_is_refused_with_the_expected_form(bad):
    with pytest.raises(ValueError, match="expected '<task> the <colour> <type>'"):
        parse_mission(bad)


def _expected_offsets(level) -> dict[str, tuple[int, int]]:
    """(steps forward, steps right) of every object on the grid, from the agent's position and
    heading vectors (not from the encoded view the description reads). A carried object is off the
    grid; a box the agent toggled open is gone (BabyAI replaces it by its empty contents)."""
    pos, forward_vec, right_vec = np.array(level.agent_pos), level.dir_vec, level.right_vec
    out = {}
    for x in range(level.grid.width):
        for y in range(level.grid.height):
            obj = level.grid.get(x, y)
            if obj is not None and obj.type in ("key", "ball", "box"):
                delta = np.array((x, y)) - pos
                out[f"{obj.color} {obj.type}"] = (int(delta @ forward_vec), int(delta @ right_vec))
    return out


def _parse_seen(text: str) -> dict[str, tuple[int, int]]:
    seen_line = next(line for line in text.split("\n") if line.startswith("You see: "))
    out = {}
    for item in seen_line[len("You see: ") :].split(", "):
        m = re.fullmatch(r"a (\w+ (?:key|ball|box))((?: (?:and )?\d+ steps? (?:left|right|forward))*)", item)
        if not m:
            continue
        forward = right = 0
        for n, direction in re.findall(r"(\d+) steps? (left|right|forward)", m.group(2)):
            if direction == "forward":
                forward = int(n)
            else:
                right = int(n) if direction == "right" else -int(n)
        out[m.group(1)] = (forward, right)
    return out


def test_objects_are_described_where_they_are_relative_to_the_agent():
    """Every object the text names sits where the agent's heading vectors put it, and every
    object within the 7x7 view ahead of the agent is named (one room, nothing blocks the view)."""
    env, rng, checked = BabyAIText("MixedLocal", n_objects=6), random.Random(1), 0
    for seed in range(30):
        for _, obs, *_ in _random_episode(env, seed, rng):
            expected = _expected_offsets(env.level_env)
            described = _parse_seen(obs)
            for name, where in described.items():
                assert expected[name] == where, (obs, name)
            for name, (forward, right) in expected.items():
                if 0 <= forward <= 6 and abs(right) <= 3 and (forward, right) != (0, 0):
                    assert name in described, (obs, name)
                    checked += 1
    assert checked > 500


def test_walls_straight_ahead_are_at_the_distance_the_grid_says():
    env, rng = BabyAIText("GoToLocal"), random.Random(2)
    for seed in range(20):
        for _, obs, *_ in _random_episode(env, seed, rng):
            level = env.level_env
            pos, step = np.array(level.agent_pos), level.dir_vec
            distance = 1
            while (
                level.grid.get(*(pos + distance * step)) is None
                or level.grid.get(*(pos + distance * step)).type != "wall"
            ):
                distance += 1
            unit = "step" if distance == 1 else "steps"
            if distance <= 6:  # within the 7x7 view
                assert f"a wall {distance} {unit} forward" in obs
            else:
                assert not re.search(r"a wall \d+ steps? forward", obs)


def test_reward_is_one_exactly_when_babyais_verifier_says_success_and_the_partner_reports_it():
    for level in ("GoToLocal", "PickupLocal", "MixedLocal"):
        env, rng, successes = BabyAIText(level), random.Random(3), 0
        for seed in range(80):
            goal = env.reset(seed=seed)[1]["goal"]
            for _, _, reward, terminated, truncated, info in _random_episode(env, seed, rng):
                assert reward in (0.0, 1.0)
                assert (reward == 1.0) == info["success"] == (terminated and not truncated)
                if not is_held_out(parse_mission(goal)):
                    assert (goal in info["achieved_goals"]) == (reward == 1.0)
            successes += reward == 1.0
        assert successes > 5, level


def test_the_partner_reports_train_missions_of_the_levels_tasks_once_per_episode():
    env, rng = BabyAIText("MixedLocal", n_objects=6, max_steps=80), random.Random(4)
    reported_kinds = set()
    for seed in range(60):
        seen: list[str] = []
        for action, _, _, _, _, info in _random_episode(env, seed, rng):
            for goal in info["achieved_goals"]:
                mission = parse_mission(goal)
                assert not is_held_out(mission) and mission.task in TASKS
                reported_kinds.add(mission.task)
                if mission.task == "pick up":
                    assert action == "pick up" and env.level_env.carrying is not None
                    assert (env.level_env.carrying.color, env.level_env.carrying.type) == (mission.color, mission.type)
            seen += info["achieved_goals"]
        assert len(seen) == len(set(seen))
    assert reported_kinds == set(TASKS)
    go_to_only = BabyAIText("GoToLocal", n_objects=6, max_steps=80)
    for seed in range(20):
        for *_, info in _random_episode(go_to_only, seed, rng):
            assert all(g.startswith("go to ") for g in info["achieved_goals"])


@pytest.mark.parametrize("level", ["GoToLocal", "PickupLocal", "MixedLocal"])
def test_the_babyai_bot_solves_the_level(level):
    env, solved = BabyAIText(level), 0
    for seed in range(40):
        env.reset(seed=seed)
        done, reward = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.expert_action())
            done = terminated or truncated
        solved += reward == 1.0
    assert solved >= 39


def test_a_goal_given_at_reset_is_the_mission_and_its_object_is_in_the_room():
    env = BabyAIText("MixedLocal", split="train")
    for seed, mission in enumerate(missions(TASKS, "all")):
        obs, info = env.reset(seed=seed, options={"goal": mission.text})
        assert info["goal"] == mission.text and obs.startswith(f"Goal: {mission.text}\n")
        assert info["goal_type"] == mission.task
        room = {(o.color, o.type) for o in env.level_env.room_grid[0][0].objs}
        assert (mission.color, mission.type) in room and len(room) == 4
    with pytest.raises(ValueError, match="not a task of level GoToLocal"):
        BabyAIText("GoToLocal").reset(seed=0, options={"goal": "pick up the red ball"})


def test_episodes_draw_only_missions_of_their_split_and_level():
    for level, split in (("MixedLocal", "train"), ("MixedLocal", "test"), ("PickupLocal", "train")):
        env = BabyAIText(level, split=split)
        allowed = {m.text for m in missions(env.tasks, split)}
        drawn = {env.reset(seed=s)[1]["goal"] for s in range(200)}
        assert drawn <= allowed and len(drawn) > len(allowed) // 2


def test_the_same_seed_and_actions_give_the_same_episode():
    def run():
        env, rng = BabyAIText("MixedLocal"), random.Random(5)
        return [(obs, reward, info["achieved_goals"]) for _, obs, reward, _, _, info in _random_episode(env, 7, rng)]

    assert run() == run()


def test_bad_input_is_refused_with_what_is_allowed():
    env = BabyAIText()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not a BabyAI-Text action; the actions are"):
        env.step("jump")
    with pytest.raises(ValueError, match="unknown BabyAI-Text level 'Maze'"):
        BabyAIText("Maze")
    with pytest.raises(ValueError, match="n_objects must be between 1 and 12"):
        BabyAIText(n_objects=0)


def test_gymnasium_ids_make_train_and_held_out_forms():
    env = gymnasium.make("sacglam.envs.babyai:BabyAIText-MixedLocal-Test-v0")
    assert env.unwrapped.split == "test"
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert is_held_out(parse_mission(info["goal"])) and info["candidates"] == list(ACTIONS)
    assert isinstance(Mission("go to", "red", "ball").text, str)
