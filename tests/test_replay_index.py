"""The replay buffer's incremental index and step table against a naive buffer that rebuilds
everything from the stored episodes on every sample.

The naive reference below shares nothing with `sacglam.replay_actor` but the random-draw protocol
(one `integers(0, total)` per pool and a multinomial over goal types for `prior`), which is what
makes batches comparable draw for draw. Everything else (which episodes are kept, the entry order,
n-step rewards, prompts, goal types) it computes from scratch, in plain Python.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sacglam.envs import PlaygroundTextVector
from sacglam.envs.goals import GOAL_TYPES, goal_type_shares, parse_goal
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.replay_actor.columns import Column, ObjectColumn
from sacglam.rollout_workers.recorder import EpisodeRecorder

GAMMA = 0.95


def random_policy_episodes(n_envs: int, steps: int, seed: int, **env) -> list:
    vec = PlaygroundTextVector(n_envs, **env)
    obs, info = vec.reset(seed=seed)
    recorder, rng, episodes = EpisodeRecorder(n_envs), random.Random(seed), []
    recorder.start(obs, info)
    for _ in range(steps):
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, rewards, terminated, truncated, info = vec.step(actions)
        episodes += recorder.record(actions, obs, rewards, terminated, truncated, info)
    return episodes


def naive_goal_type(goal: str) -> str:
    words = goal.split(" ")
    if "then" in words:
        second = words[words.index("then") + 1]
        return f"grow then {second}"
    return words[0].lower()


class NaiveReplay:
    """Keeps (episode, relabels) pairs; rebuilds the entry list at every sample."""

    def __init__(self, capacity: int, gamma: float):
        self.capacity, self.gamma = capacity, gamma
        self.stored: list = []

    def add(self, episode, relabels) -> None:
        self.stored.append((episode, list(relabels)))
        while sum(e.length for e, _ in self.stored) > self.capacity and len(self.stored) > 1:
            self.stored.pop(0)

    def entries(self) -> list[dict]:
        out = []
        for episode, relabels in self.stored:
            out.append({"episode": episode, "goal": episode.goal, "length": episode.length, "relabeled": False})
            out += [{"episode": episode, "goal": r.goal, "length": r.length, "relabeled": True} for r in relabels]
        return out

    @staticmethod
    def draw(entries: list[dict], count: int, rng: np.random.Generator) -> list[tuple[dict, int]]:
        if count == 0:
            return []
        total = sum(e["length"] for e in entries)
        picked = []
        for flat in rng.integers(0, total, size=count).tolist():
            for entry in entries:  # walk the entries: linear, and obviously right
                if flat < entry["length"]:
                    picked.append((entry, flat))
                    break
                flat -= entry["length"]
        return picked

    def sample(self, batch: int, n_step: int, mode: str, rng: np.random.Generator) -> list[tuple]:
        entries = self.entries()
        if mode == "uniform":
            picked = self.draw(entries, batch, rng)
        elif mode == "ratio":
            relabeled = [e for e in entries if e["relabeled"]]
            n_relabeled = round(batch * 0.5) if relabeled else 0
            picked = self.draw(relabeled, n_relabeled, rng)
            picked += self.draw([e for e in entries if not e["relabeled"]], batch - n_relabeled, rng)
        else:
            share = goal_type_shares("train")
            by_type = [[e for e in entries if naive_goal_type(e["goal"]) == t] for t in GOAL_TYPES]
            weights = np.array([share[t] if group else 0.0 for t, group in zip(GOAL_TYPES, by_type)])
            counts = rng.multinomial(batch, weights / weights.sum())
            picked = [p for group, c in zip(by_type, counts) for p in self.draw(group, int(c), rng)]
        return [self.transition(entry, t, n_step) for entry, t in picked]

    def transition(self, entry: dict, t: int, n_step: int) -> tuple:
        episode, goal, length = entry["episode"], entry["goal"], entry["length"]
        k = min(n_step, length - t)
        if entry["relabeled"]:
            reward = self.gamma ** (k - 1) if t + k == length else 0.0
            terminal = t + k == length
        else:
            reward = sum(self.gamma**j * episode.rewards[t + j] for j in range(k))
            terminal = t + k == length and episode.terminated
        return (
            f"Goal: {goal}\n{episode.states[t]}",
            tuple(episode.candidates[t]),
            episode.actions[t],
            reward,
            self.gamma**k,
            terminal,
            f"Goal: {goal}\n{episode.states[t + k]}",
            tuple(episode.candidates[t + k]),
            entry["relabeled"],
            goal,
        )


def batch_rows(batch) -> list[tuple]:
    return [
        (
            batch.observations[i],
            tuple(batch.candidates[i]),
            int(batch.actions[i]),
            float(batch.reward[i]),
            float(batch.discount[i]),
            bool(batch.terminal[i]),
            batch.next_observations[i],
            tuple(batch.next_candidates[i]),
            bool(batch.relabeled[i]),
            batch.goals[i],
        )
        for i in range(len(batch.goals))
    ]


def assert_same_rows(fast: list[tuple], naive: list[tuple]) -> None:
    assert len(fast) == len(naive)
    for a, b in zip(fast, naive):
        assert a[:3] == b[:3] and a[5:] == b[5:]
        assert a[3] == pytest.approx(b[3], abs=1e-6) and a[4] == pytest.approx(b[4], abs=1e-6)


@pytest.mark.parametrize("variant", ["full", "simple"])
def test_batches_equal_a_naive_rebuild_through_adds_evictions_and_a_reload(tmp_path, variant):
    env = {
        "full": {"n_objects": 6, "goals": "train", "max_steps": 30},
        "simple": {"n_objects": 3, "goals": "simple-train", "max_steps": 8},
    }[variant]
    episodes = random_policy_episodes(8, 400, seed=5, **env)
    capacity = 600  # a few dozen episodes: evictions happen all along
    buffer = ReplayBuffer(capacity, GAMMA, her=True, her_max_goals=12, seed=11)
    naive = NaiveReplay(capacity, GAMMA)
    compared = 0
    for i, episode in enumerate(episodes):
        naive.add(episode, buffer.add(episode))
        if i == len(episodes) // 2:
            buffer.save(tmp_path / "replay")
            buffer = ReplayBuffer.load(tmp_path / "replay")
        if i % 3 == 0:
            for mode, n_step in (("uniform", 1), ("ratio", 3), ("prior", 5)):
                rng = np.random.default_rng()
                rng.bit_generator.state = buffer.rng.bit_generator.state
                fast = batch_rows(buffer.sample(48, n_step, mode))
                assert_same_rows(fast, naive.sample(48, n_step, mode, rng))
                compared += 1
    assert buffer.episodes == len(naive.stored) and compared > 80
    assert buffer.env_transitions == sum(e.length for e, _ in naive.stored)
    assert len(buffer) == sum(e["length"] for e in naive.entries())


def test_the_naive_goal_type_agrees_with_the_parser():
    goals = {"Grasp red cat", "Grow any plant", "Grow red cat then grasp any water", "Grow any cat then grow red dog"}
    for goal in goals:
        parts = parse_goal(goal)
        expected = parts[0].verb if len(parts) == 1 else f"{parts[0].verb} then {parts[1].verb}"
        assert naive_goal_type(goal) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40)), min_size=1, max_size=60))
def test_columns_keep_absolute_positions_through_appends_and_front_drops(operations):
    numbers, objects, model, dropped = Column(np.int64), ObjectColumn(), [], 0
    for append, count in operations:
        if append:
            values = list(range(len(model) + dropped, len(model) + dropped + count))
            numbers.extend(values)
            objects.extend([str(v) for v in values])
            model += values
        else:
            count = min(count, len(model))
            numbers.drop_front(count)
            objects.drop_front(count)
            model, dropped = model[count:], dropped + count
        assert numbers.view.tolist() == model and len(objects) == len(model) and numbers.first == dropped
        if model:
            positions = np.array(model[:: max(1, len(model) // 5)])
            assert numbers.take(positions).tolist() == positions.tolist()  # value == its position
            assert [objects[p] for p in positions.tolist()] == [str(p) for p in positions.tolist()]
