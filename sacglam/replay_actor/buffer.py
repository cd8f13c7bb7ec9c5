"""The episode replay buffer: Arrow storage, HER on insertion, n-step targets at sample time.

- Stores whole `Episode`s. Each one's states, candidate lists, actions, rewards and partner goals
  are an Arrow record batch (T+1 rows); the hindsight relabels of an episode point at its rows.
- Two pools kept apart: the environment's transitions (each episode under its own goal) and the
  relabeled ones (each `Relabel` of an episode: its first `length` steps under the new goal).
- Capacity counts the environment's transitions; the oldest episodes, with their relabels, are
  dropped first. Relabels are references (a goal and a length), and counting them would make a
  buffer with HER forget episodes several times sooner than one without: the two would not keep
  the same data at the same capacity.
- n-step targets are derived when sampling, so n is a sampling parameter.
- Sampling modes: `uniform` over all stored transitions; `ratio`, a fixed fraction (default 50%)
  of every batch from the relabeled pool and the rest from the environment's (the paper's choice
  with HER; all environment transitions while there is no relabel yet); `prior`, goal types drawn
  with the environment's goal-type distribution, then transitions uniform within the type.
- `save` / `load` round-trip everything (episodes, relabels, counters, the sampling generator), so
  a loaded buffer gives the same samples as the saved one would have.
"""

from __future__ import annotations

import json
import shutil
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

from sacglam.envs.goals import GOAL_SETS, GOAL_TYPES, goal_type, goal_type_shares
from sacglam.envs.observation import with_goal
from sacglam.her import hindsight_relabels
from sacglam.types import Episode, Relabel, TransitionBatch

SamplingMode = Literal["uniform", "ratio", "prior"]

_STEP_SCHEMA = pa.schema(
    [
        ("episode", pa.int64()),
        ("state", pa.string()),
        ("candidates", pa.list_(pa.string())),
        ("action", pa.int32()),  # null at the final state
        ("reward", pa.float64()),  # null at the final state
        ("achieved_goals", pa.list_(pa.string())),  # null at the final state
    ]
)
_EPISODE_SCHEMA = pa.schema(
    [
        ("episode", pa.int64()),
        ("goal", pa.string()),
        ("scene", pa.list_(pa.string())),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
    ]
)
_RELABEL_SCHEMA = pa.schema([("episode", pa.int64()), ("goal", pa.string()), ("length", pa.int32())])


@dataclass
class _Stored:
    """One stored episode: its Arrow rows plus the small arrays sampling reads on every call."""

    id: int
    goal: str
    scene: tuple[str, ...]
    terminated: bool
    truncated: bool
    rows: pa.RecordBatch  # _STEP_SCHEMA, T+1 rows
    actions: np.ndarray  # (T,) int64
    rewards: np.ndarray  # (T,) float64
    relabels: list[Relabel]

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def transitions(self) -> int:
        return self.length + sum(r.length for r in self.relabels)


def _episode_rows(episode_id: int, episode: Episode) -> pa.RecordBatch:
    T = episode.length
    return pa.record_batch(
        [
            pa.array([episode_id] * (T + 1), pa.int64()),
            pa.array(list(episode.states), pa.string()),
            pa.array([list(c) for c in episode.candidates], pa.list_(pa.string())),
            pa.array(list(episode.actions) + [None], pa.int32()),
            pa.array(list(episode.rewards) + [None], pa.float64()),
            pa.array([list(g) for g in episode.achieved_goals] + [None], pa.list_(pa.string())),
        ],
        schema=_STEP_SCHEMA,
    )


class ReplayBuffer:
    """Episode replay with hindsight relabels (plain class; the replay actor wraps it).

    Args:
        capacity: environment transitions kept before the oldest episodes (and their relabels) go.
        gamma: discount of the n-step targets.
        her: relabel every added episode with the social partner's goals.
        her_max_goals: at most this many relabels per episode (None: all).
        prior_goal_set: the goal set whose goal-type distribution `prior` sampling follows.
        seed: seed of the sampling and relabel-capping generator.
    """

    def __init__(
        self,
        capacity: int = 100_000,
        gamma: float = 0.99,
        her: bool = True,
        her_max_goals: int | None = None,
        prior_goal_set: str = "train",
        seed: int = 0,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 transition, got {capacity}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if prior_goal_set not in GOAL_SETS:
            raise ValueError(f"prior_goal_set={prior_goal_set!r} is not a goal set ({', '.join(GOAL_SETS)})")
        self.capacity, self.gamma, self.her, self.her_max_goals = capacity, gamma, her, her_max_goals
        self.prior_goal_set = prior_goal_set
        self.rng = np.random.default_rng(seed)
        self._episodes: deque[_Stored] = deque()
        self._next_id = 0
        self._size = 0  # stored transitions, both pools
        self._env_size = 0  # environment transitions: what capacity counts
        self._index: dict | None = None  # sampling index, rebuilt lazily after a change
        self.added_episodes = 0  # counters over the buffer's life (evicted ones included)
        self.added_transitions = 0
        self.added_relabels = 0

    # ------------------------------------------------------------------ adding

    def add(self, episode: Episode) -> list[Relabel]:
        """Store an episode and its relabels (when `her`); evict the oldest beyond capacity.
        Returns the relabels it made."""
        if episode.cut:
            raise ValueError("the replay buffer stores whole episodes; a cut segment belongs to an on-policy rollout")
        relabels = hindsight_relabels(episode, self.her_max_goals, self.rng) if self.her else []
        self._store(self._next_id, episode, relabels)
        self._next_id += 1
        self.added_episodes += 1
        self.added_transitions += episode.length
        self.added_relabels += len(relabels)
        self._evict()
        return relabels

    def _store(self, episode_id: int, episode: Episode, relabels: list[Relabel]) -> None:
        stored = _Stored(
            id=episode_id,
            goal=episode.goal,
            scene=tuple(episode.scene),
            terminated=episode.terminated,
            truncated=episode.truncated,
            rows=_episode_rows(episode_id, episode),
            actions=np.asarray(episode.actions, dtype=np.int64),
            rewards=np.asarray(episode.rewards, dtype=np.float64),
            relabels=list(relabels),
        )
        self._episodes.append(stored)
        self._size += stored.transitions
        self._env_size += stored.length
        self._index = None

    def _evict(self) -> None:
        while self._env_size > self.capacity and len(self._episodes) > 1:
            oldest = self._episodes.popleft()
            self._size -= oldest.transitions
            self._env_size -= oldest.length
            self._index = None

    # ------------------------------------------------------------------ sizes

    def __len__(self) -> int:
        """Stored transitions, both pools."""
        return self._size

    @property
    def episodes(self) -> int:
        return len(self._episodes)

    @property
    def env_transitions(self) -> int:
        return self._env_size

    @property
    def relabeled_transitions(self) -> int:
        return self._size - self.env_transitions

    # ------------------------------------------------------------------ sampling

    def _built_index(self) -> dict:
        """The sampling index, built if a change dropped it."""
        if self._index is None:
            self._index = self._build_index()
        return self._index

    def _build_index(self) -> dict:
        """Flat arrays over the two pools: for entry i, its episode position, goal, length,
        whether it is a relabel, its goal type, and cumulative transition counts."""
        episode_pos, goals, lengths, relabeled, terminated = [], [], [], [], []
        for pos, e in enumerate(self._episodes):
            episode_pos.append(pos)
            goals.append(e.goal)
            lengths.append(e.length)
            relabeled.append(False)
            terminated.append(e.terminated)
            for r in e.relabels:
                episode_pos.append(pos)
                goals.append(r.goal)
                lengths.append(r.length)
                relabeled.append(True)
                terminated.append(True)
        lengths_np = np.asarray(lengths, dtype=np.int64)
        relabeled_np = np.asarray(relabeled, dtype=bool)
        types = np.asarray([GOAL_TYPES.index(goal_type(g)) for g in goals], dtype=np.int64)
        pools = {"all": np.ones(len(goals), dtype=bool), "env": ~relabeled_np, "relabeled": relabeled_np}
        pools |= {f"type{t}": types == t for t in range(len(GOAL_TYPES))}
        return {
            "episode_pos": np.asarray(episode_pos, dtype=np.int64),
            "goals": goals,
            "lengths": lengths_np,
            "relabeled": relabeled_np,
            "terminated": np.asarray(terminated, dtype=bool),
            "pools": {name: (np.flatnonzero(m), np.cumsum(lengths_np[m])) for name, m in pools.items()},
        }

    def _draw(self, pool: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        """`count` transitions uniform over a pool: (entry indices, step indices)."""
        entries, cumulative = self._built_index()["pools"][pool]
        if count == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if len(entries) == 0:
            raise ValueError(f"no stored transition in pool {pool!r}")
        flat = self.rng.integers(0, cumulative[-1], size=count)
        which = np.searchsorted(cumulative, flat, side="right")
        starts = np.concatenate([[0], cumulative[:-1]])[which]
        return entries[which], flat - starts

    def sample(
        self, batch_size: int, n_step: int = 3, mode: SamplingMode = "uniform", relabeled_fraction: float = 0.5
    ) -> TransitionBatch:
        """`batch_size` transitions with `n_step`-step targets, drawn as `mode` says (module docstring)."""
        if self._size == 0:
            raise ValueError("the replay buffer is empty: add episodes before sampling")
        if n_step < 1 or batch_size < 1:
            raise ValueError(f"n_step and batch_size must be >= 1, got {n_step}, {batch_size}")
        index = self._built_index()
        if mode == "uniform":
            entries, steps = self._draw("all", batch_size)
        elif mode == "ratio":
            if not 0.0 <= relabeled_fraction <= 1.0:
                raise ValueError(f"relabeled_fraction must be in [0, 1], got {relabeled_fraction}")
            has_relabels = len(index["pools"]["relabeled"][0]) > 0
            n_relabeled = round(batch_size * relabeled_fraction) if has_relabels else 0
            relabeled_draw = self._draw("relabeled", n_relabeled)
            env_draw = self._draw("env", batch_size - n_relabeled)
            entries, steps = (np.concatenate(p) for p in zip(relabeled_draw, env_draw))
        elif mode == "prior":
            entries, steps = self._draw_prior(batch_size)
        else:
            raise ValueError(f"unknown sampling mode {mode!r}; choose uniform, ratio or prior")
        return self._transitions(entries, steps, n_step)

    def _draw_prior(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        share = goal_type_shares(self.prior_goal_set)
        weights = np.array(
            [share[t] if len(self._built_index()["pools"][f"type{i}"][0]) else 0.0 for i, t in enumerate(GOAL_TYPES)]
        )
        counts = self.rng.multinomial(batch_size, weights / weights.sum())
        draws = [self._draw(f"type{i}", int(c)) for i, c in enumerate(counts)]
        return np.concatenate([d[0] for d in draws]), np.concatenate([d[1] for d in draws])

    def _transitions(self, entries: np.ndarray, steps: np.ndarray, n_step: int) -> TransitionBatch:
        index = self._built_index()
        obs, cands, next_obs, next_cands, goals = [], [], [], [], []
        actions, rewards, discounts, terminals = [], [], [], []
        for entry, t in zip(entries.tolist(), steps.tolist()):
            episode = self._episodes[index["episode_pos"][entry]]
            goal, length = index["goals"][entry], int(index["lengths"][entry])
            k = min(n_step, length - t)
            if index["relabeled"][entry]:
                step_rewards = np.zeros(k)
                if t + k == length:
                    step_rewards[-1] = 1.0  # the relabeled goal is achieved at its last step
            else:
                step_rewards = episode.rewards[t : t + k]
            rewards.append(float(np.dot(self.gamma ** np.arange(k), step_rewards)))
            discounts.append(self.gamma**k)
            terminals.append(bool(t + k == length and index["terminated"][entry]))
            states, candidates = episode.rows.column("state"), episode.rows.column("candidates")
            obs.append(with_goal(states[t].as_py(), goal))
            cands.append(candidates[t].as_py())
            next_obs.append(with_goal(states[t + k].as_py(), goal))
            next_cands.append(candidates[t + k].as_py())
            actions.append(int(episode.actions[t]))
            goals.append(goal)
        return TransitionBatch(
            observations=obs,
            candidates=cands,
            actions=torch.tensor(actions, dtype=torch.long),
            reward=torch.tensor(rewards, dtype=torch.float32),
            discount=torch.tensor(discounts, dtype=torch.float32),
            terminal=torch.tensor(terminals, dtype=torch.bool),
            next_observations=next_obs,
            next_candidates=next_cands,
            relabeled=torch.from_numpy(index["relabeled"][entries].copy()),
            goals=goals,
        )

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | Path) -> None:
        """Write the buffer as Arrow IPC files plus a JSON header, atomically (a temporary
        directory renamed into place: a killed save leaves the previous snapshot intact)."""
        directory = Path(directory)
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        steps = pa.Table.from_batches([e.rows for e in self._episodes], schema=_STEP_SCHEMA)
        episodes = pa.table(
            {
                "episode": [e.id for e in self._episodes],
                "goal": [e.goal for e in self._episodes],
                "scene": [list(e.scene) for e in self._episodes],
                "terminated": [e.terminated for e in self._episodes],
                "truncated": [e.truncated for e in self._episodes],
            },
            schema=_EPISODE_SCHEMA,
        )
        relabels = pa.table(
            {
                "episode": [e.id for e in self._episodes for _ in e.relabels],
                "goal": [r.goal for e in self._episodes for r in e.relabels],
                "length": [r.length for e in self._episodes for r in e.relabels],
            },
            schema=_RELABEL_SCHEMA,
        )
        for name, table in (("steps", steps), ("episodes", episodes), ("relabels", relabels)):
            with ipc.new_file(tmp / f"{name}.arrow", table.schema) as writer:
                writer.write_table(table)
        header = {
            "format": 1,
            "capacity": self.capacity,
            "gamma": self.gamma,
            "her": self.her,
            "her_max_goals": self.her_max_goals,
            "prior_goal_set": self.prior_goal_set,
            "next_id": self._next_id,
            "added_episodes": self.added_episodes,
            "added_transitions": self.added_transitions,
            "added_relabels": self.added_relabels,
            "rng": self.rng.bit_generator.state,
        }
        (tmp / "header.json").write_text(json.dumps(header))
        if directory.exists():
            old = directory.with_name(directory.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            directory.rename(old)
            tmp.rename(directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(directory)

    @classmethod
    def load(cls, directory: str | Path) -> ReplayBuffer:
        """Restore a buffer written by `save`."""
        directory = Path(directory)
        if not (directory / "header.json").exists():
            raise FileNotFoundError(f"{directory} holds no saved replay buffer (no header.json)")
        header = json.loads((directory / "header.json").read_text())
        buffer = cls(
            capacity=header["capacity"],
            gamma=header["gamma"],
            her=header["her"],
            her_max_goals=header["her_max_goals"],
            prior_goal_set=header["prior_goal_set"],
        )
        steps, episodes, relabels = (
            ipc.open_file(directory / f"{name}.arrow").read_all() for name in ("steps", "episodes", "relabels")
        )
        relabels_of: dict[int, list[Relabel]] = {}
        for row in relabels.to_pylist():
            relabels_of.setdefault(row["episode"], []).append(Relabel(goal=row["goal"], length=row["length"]))
        episode_ids = steps.column("episode").to_numpy()
        bounds = np.flatnonzero(np.diff(episode_ids)) + 1
        starts = np.concatenate([[0], bounds]).tolist()
        ends = np.concatenate([bounds, [len(episode_ids)]]).tolist()
        for meta, start, end in zip(episodes.to_pylist(), starts, ends):
            rows = steps.slice(start, end - start).combine_chunks().to_batches()[0]
            stored = _Stored(
                id=meta["episode"],
                goal=meta["goal"],
                scene=tuple(meta["scene"]),
                terminated=meta["terminated"],
                truncated=meta["truncated"],
                rows=rows,
                actions=rows.column("action").to_numpy(zero_copy_only=False)[:-1].astype(np.int64),
                rewards=rows.column("reward").to_numpy(zero_copy_only=False)[:-1].astype(np.float64),
                relabels=relabels_of.get(meta["episode"], []),
            )
            buffer._episodes.append(stored)
            buffer._size += stored.transitions
            buffer._env_size += stored.length
        buffer._next_id = header["next_id"]
        buffer.added_episodes = header["added_episodes"]
        buffer.added_transitions = header["added_transitions"]
        buffer.added_relabels = header["added_relabels"]
        buffer.rng.bit_generator.state = header["rng"]
        return buffer
