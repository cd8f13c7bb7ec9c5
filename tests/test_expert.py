"""The scripted expert: every goal is feasible, and its plans are shortest."""

import random
from collections import deque

import pytest

from sacglam.envs import ExpertPolicy, PlaygroundText, goal_type, goals, shortest_plan

SETTINGS = {"train": (6, 30), "test": (6, 30), "simple-train": (3, 8), "simple-test": (3, 8)}


def solve(env, obs):
    """Follow the expert to the episode's end; returns (reward, steps)."""
    steps = 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(shortest_plan(obs)[0])
        steps += 1
        if terminated or truncated:
            return reward, steps


@pytest.mark.parametrize("goal_set", sorted(goals.GOAL_SETS))
def test_expert_achieves_every_goal_within_max_steps(goal_set):
    n_objects, max_steps = SETTINGS[goal_set]
    env = PlaygroundText(n_objects=n_objects, goals=goal_set, max_steps=max_steps)
    failures = []
    for seed, goal in enumerate(goals.GOAL_SETS[goal_set]):
        obs, _ = env.reset(seed=seed, options={"goal": goal})
        reward, _ = solve(env, obs)
        if reward != 1.0:
            failures.append(goal)
    assert not failures


@pytest.mark.parametrize("goal_set", ["train", "simple-train"])
def test_expert_succeeds_over_many_seeds_with_random_goals(goal_set):
    n_objects, max_steps = SETTINGS[goal_set]
    env = PlaygroundText(n_objects=n_objects, goals=goal_set, max_steps=max_steps)
    for seed in range(1000):
        obs, _ = env.reset(seed=seed)
        assert solve(env, obs)[0] == 1.0, seed


def test_expert_plan_lengths_from_the_start_match_the_spec():
    expected = {"grasp": {2}, "grow": {3}, "grow then grow": {4}, "grow then grasp": {5, 6}}
    seen = {t: set() for t in expected}
    env = PlaygroundText()
    rng = random.Random(0)
    for seed in range(3000):
        goal = rng.choice(goals.TRAIN_GOALS + goals.SIMPLE_TRAIN_GOALS * 20)
        obs, _ = env.reset(seed=seed, options={"goal": goal})
        seen[goal_type(goal)].add(len(shortest_plan(obs)))
    assert seen == expected


def brute_force_shortest(scene: list[str], goal: str, prefix: list[str], limit: int = 8) -> int | None:
    """Breadth-first search over action sequences played on the real environment (not the
    expert's model of it), each replayed from the start. The observation text determines the
    state, so it keys the visited set."""
    env = PlaygroundText()

    def replay(path):
        obs, info = env.reset(options={"goal": goal, "scene": scene})
        reward = 0.0
        for action in path:
            obs, reward, _, _, info = env.step(action)
        return obs, reward, info["candidates"]

    start_obs, _, _ = replay(prefix)
    queue = deque([[]])
    visited = {start_obs}
    while queue:
        path = queue.popleft()
        if len(path) == limit:
            continue
        for action in replay(prefix + path)[2]:
            child_obs, reward, _ = replay(prefix + path + [action])
            if reward == 1.0:
                return len(path) + 1
            if child_obs not in visited:
                visited.add(child_obs)
                queue.append(path + [action])
    return None


@pytest.mark.parametrize("seed", range(40))
def test_expert_plans_are_as_short_as_a_brute_force_search(seed):
    rng = random.Random(seed)
    env = PlaygroundText()
    goal = rng.choice(goals.TRAIN_GOALS)
    obs, info = env.reset(seed=seed, options={"goal": goal})
    scene, prefix = info["scene"], []
    for _ in range(rng.randrange(4)):  # also from states in the middle of an episode
        prefix.append(rng.choice(info["candidates"]))
        obs, _, terminated, _, info = env.step(prefix[-1])
        if terminated:
            return
    assert len(shortest_plan(obs)) == brute_force_shortest(scene, goal, prefix)


def test_expert_returns_no_plan_for_an_infeasible_scene_and_acts_validly():
    env = PlaygroundText()
    scene = ["red door", "blue door", "green door", "red sofa", "blue sofa", "green sofa"]
    obs, info = env.reset(options={"goal": "Grow any cat", "scene": scene})
    assert shortest_plan(obs) is None
    assert ExpertPolicy().act([obs], [info["candidates"]]) == [info["candidates"][0]]


@pytest.mark.parametrize("goal_set", ["simple-train", "simple-test", "train"])
def test_plan_length_after_an_action_matches_stepping_the_environment(goal_set):
    """1 exactly when the environment's step ends the episode with the reward; otherwise one more
    than the plan from the state the step leads to; the best action's length is the plan's."""
    import copy
    import random

    from sacglam.envs.expert import plan_length_after

    n_objects = 3 if goal_set.startswith("simple") else 6
    for seed in range(40):
        env = PlaygroundText(n_objects=n_objects, goals=goal_set, max_steps=8)
        obs, info = env.reset(seed=seed)
        rng = random.Random(seed)
        for _ in range(4):
            lengths = {}
            for action in info["candidates"]:
                child = copy.deepcopy(env)
                next_obs, reward, terminated, _, _ = child.step(action)
                lengths[action] = plan_length_after(obs, action)
                if terminated:
                    assert lengths[action] == 1 and reward == 1.0
                else:
                    assert lengths[action] == 1 + len(shortest_plan(next_obs))
            assert min(lengths.values()) == len(shortest_plan(obs))
            obs, _, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
            if terminated or truncated:
                break
    with pytest.raises(ValueError, match="not a candidate"):
        plan_length_after(obs, "Fly away")
