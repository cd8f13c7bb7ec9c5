"""The episode replay buffer: Arrow storage, HER on insertion, n-step targets at sample time.

- Stores whole `Episode`s: their steps in one step table (`steps.py`: states and candidate lists
  as Python objects, an episode's repeated candidate lists shared; actions and rewards as arrays),
  the partner's goals, which only a snapshot reads, as Arrow. The hindsight relabels of an episode
  point at its rows, never copy them. Snapshots are Arrow IPC files.
- Two pools kept apart: the environment's transitions (each episode under its own goal) and the
  relabeled ones (each `Relabel` of an episode: its first `length` steps under the new goal).
- Capacity counts the environment's transitions; the oldest episodes, with their relabels, are
  dropped first. Relabels are references (a goal and a length), and counting them would make a
  buffer with HER forget episodes several times sooner than one without: the two would not keep
  the same data at the same capacity.
- n-step targets are derived when sampling, so n is a sampling parameter.
- Sampling costs the same in a buffer of 1k or 1M transitions: an index of the stored entries is
  kept up to date on every add and eviction (`sacglam.replay_actor.index`), and a batch is
  assembled from its B drawn transitions only.
- Sampling modes: `uniform` over all stored transitions; `ratio`, a fixed fraction (default 50%)
  of every batch from the relabeled pool and the rest from the environment's (the paper's choice
  with HER; all environment transitions while there is no relabel yet); `prior`, goal types drawn
  with the environment's goal-type distribution, then transitions uniform within the type.
- The relabeled share of a `ratio` batch follows a relabel mix: `partner` (the paper's: uniform
  over relabeled transitions, so goal types come as often as the social partner reports them),
  `own` (types in the shares of the goals the stored episodes were given: what the agent was
  asked, which it sees, with no knowledge of the environment's goal distribution) or `balanced`
  (equal shares of the types reported).
- `save` / `load` round-trip everything (episodes, relabels, counters, the sampling generator), so
  a loaded buffer gives the same samples as the saved one would have.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

from sacglam.envs.protocol import with_goal
from sacglam.envs.spec import EnvironmentSpec, PlaygroundSpec
from sacglam.her import hindsight_relabels
from sacglam.replay_actor.index import ALL_POOL, ENV_POOL, RELABELED_POOL, EntryDraw, Pool, concatenate, type_pool
from sacglam.replay_actor.steps import StepTable
from sacglam.types import Episode, Relabel, TransitionBatch

SamplingMode = Literal["uniform", "ratio", "prior"]
RelabelMix = Literal["partner", "own", "balanced"]

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


@dataclass(slots=True)
class _Stored:
    """One stored episode, in the form sampling reads it (T = its number of steps)."""

    id: int
    goal: str
    scene: tuple[str, ...]
    terminated: bool
    truncated: bool
    first_row: int  # its first step's row in the step table (T+1 rows)
    length: int  # T
    achieved_goals: pa.ListArray  # T lists of the partner's goals (read by `save` only)
    relabels: list[Relabel]

    @property
    def transitions(self) -> int:
        return self.length + sum(r.length for r in self.relabels)


def _shared_lists(lists: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """The lists as tuples, equal ones as one object (an episode has a handful of distinct
    candidate lists, one per object held)."""
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    return tuple(seen.setdefault(tuple(items), tuple(items)) for items in lists)


def _snapshot_rows(stored: _Stored, steps: StepTable) -> pa.RecordBatch:
    """The episode's T+1 rows in the snapshot's step schema."""
    T, rows = stored.length, slice(stored.first_row, stored.first_row + stored.length + 1)
    actions = steps.action.take(np.arange(rows.start, rows.stop - 1)).tolist()
    rewards = steps.reward.take(np.arange(rows.start, rows.stop - 1)).tolist()
    return pa.record_batch(
        [
            pa.array([stored.id] * (T + 1), pa.int64()),
            pa.array(steps.state.slice(rows.start, rows.stop), pa.string()),
            pa.array([list(c) for c in steps.candidates.slice(rows.start, rows.stop)], pa.list_(pa.string())),
            pa.array(actions + [None], pa.int32()),
            pa.array(rewards + [None], pa.float64()),
            pa.concat_arrays([stored.achieved_goals, pa.nulls(1, pa.list_(pa.string()))]),
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
        prior_goal_set: Playground-Text's goal set whose goal-type distribution `prior` sampling
            follows, when `env` is not given.
        seed: seed of the sampling and relabel-capping generator.
        env: the environment (its goal set) whose goal types the buffer indexes and whose
            goal-type shares `prior` sampling follows (`sacglam.envs.spec`).
    """

    def __init__(
        self,
        capacity: int = 100_000,
        gamma: float = 0.99,
        her: bool = True,
        her_max_goals: int | None = None,
        prior_goal_set: str = "train",
        seed: int = 0,
        env: EnvironmentSpec | None = None,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 transition, got {capacity}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if env is None:
            from sacglam.envs.goals import GOAL_SETS

            if prior_goal_set not in GOAL_SETS:
                raise ValueError(f"prior_goal_set={prior_goal_set!r} is not a goal set ({', '.join(GOAL_SETS)})")
            env = PlaygroundSpec(goal_set=prior_goal_set)
        self.env = env
        self.goal_types = env.goal_types
        self._type_shares: dict[str, float] | None = None  # the goal set's, read at the first prior draw
        self.capacity, self.gamma, self.her, self.her_max_goals = capacity, gamma, her, her_max_goals
        self.prior_goal_set = env.goal_set
        self.rng = np.random.default_rng(seed)
        self._episodes: deque[_Stored] = deque()  # oldest first
        self._steps = StepTable()
        self._next_id = 0
        self._size = 0  # stored transitions, both pools
        self._env_size = 0  # environment transitions: what capacity counts
        self._pools = {name: Pool() for name in (ALL_POOL, ENV_POOL, RELABELED_POOL)}
        self._pools |= {
            type_pool(i, within): Pool()
            for within in (ALL_POOL, ENV_POOL, RELABELED_POOL)
            for i in range(len(self.goal_types))
        }
        self._goal_ids: dict[str, int] = {}  # goal text -> index into _goals
        self._goals: list[str] = []  # bounded by the goal space, not by the run
        self._goal_type_ids: list[int] = []  # per goal id: its index in self.goal_types
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
            first_row=self._steps.append(
                episode.states, _shared_lists(episode.candidates), episode.actions, episode.rewards
            ),
            length=episode.length,
            achieved_goals=pa.array([list(g) for g in episode.achieved_goals], pa.list_(pa.string())),
            relabels=list(relabels),
        )
        self._append(stored)

    def _append(self, stored: _Stored) -> None:
        """Store an episode as the newest and index it and its relabels."""
        self._episodes.append(stored)
        self._size += stored.transitions
        self._env_size += stored.length
        self._index_entry(stored.first_row, stored.goal, stored.length, stored.terminated, relabeled=False)
        for relabel in stored.relabels:
            self._index_entry(stored.first_row, relabel.goal, relabel.length, terminated=True, relabeled=True)

    def _index_entry(self, first_row: int, goal: str, length: int, terminated: bool, relabeled: bool) -> None:
        goal_id = self._goal_id(goal)
        source, goal_type = RELABELED_POOL if relabeled else ENV_POOL, self._goal_type_ids[goal_id]
        for name in (ALL_POOL, source, type_pool(goal_type), type_pool(goal_type, source)):
            self._pools[name].append(first_row, goal_id, length, terminated, relabeled)

    def _goal_id(self, goal: str) -> int:
        goal_id = self._goal_ids.get(goal)
        if goal_id is None:  # first time this goal is stored: parse it once
            goal_id = self._goal_ids[goal] = len(self._goals)
            self._goals.append(goal)
            self._goal_type_ids.append(self.goal_types.index(self.env.goal_type(goal)))
        return goal_id

    def _evict(self) -> None:
        evicted = False
        while self._env_size > self.capacity and len(self._episodes) > 1:
            oldest = self._episodes.popleft()
            self._size -= oldest.transitions
            self._env_size -= oldest.length
            evicted = True
        if evicted:
            first_kept = self._episodes[0].first_row
            self._steps.drop_before(first_kept)
            for pool in self._pools.values():
                pool.drop_entries_before(first_kept)

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

    def sample(
        self,
        batch_size: int,
        n_step: int = 3,
        mode: SamplingMode = "uniform",
        relabeled_fraction: float = 0.5,
        relabel_mix: RelabelMix = "partner",
    ) -> TransitionBatch:
        """`batch_size` transitions with `n_step`-step targets, drawn as `mode` says (module
        docstring); in `ratio` mode `relabel_mix` decides the goal types of the relabeled share."""
        if self._size == 0:
            raise ValueError("the replay buffer is empty: add episodes before sampling")
        if n_step < 1 or batch_size < 1:
            raise ValueError(f"n_step and batch_size must be >= 1, got {n_step}, {batch_size}")
        if mode == "uniform":
            draw = self._pools[ALL_POOL].draw(self.rng, batch_size)
        elif mode == "ratio":
            if not 0.0 <= relabeled_fraction <= 1.0:
                raise ValueError(f"relabeled_fraction must be in [0, 1], got {relabeled_fraction}")
            has_relabels = len(self._pools[RELABELED_POOL]) > 0
            n_relabeled = self._relabeled_count(batch_size * relabeled_fraction) if has_relabels else 0
            relabeled_draw = self._draw_relabeled(n_relabeled, relabel_mix)
            draw = concatenate([relabeled_draw, self._pools[ENV_POOL].draw(self.rng, batch_size - n_relabeled)])
        elif mode == "prior":
            draw = self._draw_prior(batch_size)
        else:
            raise ValueError(f"unknown sampling mode {mode!r}; choose uniform, ratio or prior")
        return self._transitions(draw, n_step)

    def _draw_relabeled(self, count: int, mix: RelabelMix) -> EntryDraw:
        """`count` relabeled transitions. `partner`: uniform over the relabeled pool, so goal types
        come in the proportions the social partner reported them. `own` and `balanced`: the goal
        type of each row is drawn first, with the shares of the goals the environment gave the
        stored episodes (`own`) or equal shares (`balanced`), over the types the relabeled pool
        holds; then a transition uniform within that type's relabels."""
        if mix == "partner" or count == 0:
            return self._pools[RELABELED_POOL].draw(self.rng, count)
        if mix not in ("own", "balanced"):
            raise ValueError(f"unknown relabel mix {mix!r}; choose partner, own or balanced")
        types = range(len(self.goal_types))
        pools = [self._pools[type_pool(i, RELABELED_POOL)] for i in types]
        if mix == "own":  # episodes stored per goal type: one environment entry each
            weights = np.array([len(self._pools[type_pool(i, ENV_POOL)]) if len(pools[i]) else 0 for i in types])
        else:
            weights = np.array([1.0 if len(pool) else 0.0 for pool in pools])
        if weights.sum() == 0:  # the episodes' own types were never reported: nothing to re-weight
            return self._pools[RELABELED_POOL].draw(self.rng, count)
        counts = self.rng.multinomial(count, weights / weights.sum())
        return concatenate([pool.draw(self.rng, int(c)) for pool, c in zip(pools, counts)])

    def relabeled_type_shares(self) -> dict[str, float]:
        """Share of the stored relabeled transitions per goal type: the types of the environment's
        goal set and any other type stored (empty without relabels)."""
        total = self.relabeled_transitions
        if not total:
            return {}
        if self._type_shares is None:  # once: a spec may count every goal of its set to give it
            self._type_shares = self.env.type_shares()
        shares = {
            name: self._pools[type_pool(i, RELABELED_POOL)].transitions / total
            for i, name in enumerate(self.goal_types)
        }
        return {name: share for name, share in shares.items() if share > 0 or self._type_shares.get(name, 0) > 0}

    def _relabeled_count(self, expected: float) -> int:
        """`expected` rounded up or down at random so that its mean is exact: a small batch (a
        learner's share of it, say 3 rows) keeps the asked fraction on average, where rounding
        would bias it. A whole `expected` draws nothing from the generator."""
        nearest = round(expected)
        if math.isclose(expected, nearest, rel_tol=0.0, abs_tol=1e-9):  # whole, up to float error (90 * 0.7)
            return nearest
        whole = math.floor(expected)
        return whole + int(self.rng.random() < expected - whole)

    def _draw_prior(self, batch_size: int) -> EntryDraw:
        if self._type_shares is None:  # once: a spec may count every goal of its set to give it
            self._type_shares = self.env.type_shares()
        share = self._type_shares
        pools = [self._pools[type_pool(i)] for i in range(len(self.goal_types))]
        weights = np.array([share[t] if len(pool) else 0.0 for t, pool in zip(self.goal_types, pools)])
        counts = self.rng.multinomial(batch_size, weights / weights.sum())
        return concatenate([pool.draw(self.rng, int(c)) for pool, c in zip(pools, counts)])

    def _transitions(self, draw: EntryDraw, n_step: int) -> TransitionBatch:
        """Assemble the drawn transitions with their n-step targets: O(batch) work."""
        t, length = draw.step, draw.length
        k = np.minimum(n_step, length - t)  # steps the target covers, cut at the entry's end
        at_end = t + k == length
        rows = draw.first_row + t
        # A relabel's only reward is 1 at its last step (where its goal was reported); the
        # environment's rewards are read from the step table.
        env_rewards = self._steps.discounted_rewards(rows, k, self.gamma, n_step)
        rewards = np.where(draw.relabeled, np.where(at_end, self.gamma ** (k - 1.0), 0.0), env_rewards)
        goals = [self._goals[g] for g in draw.goal_id.tolist()]
        state, candidates = self._steps.state, self._steps.candidates
        rows_list, next_rows_list = rows.tolist(), (rows + k).tolist()
        return TransitionBatch(
            observations=[with_goal(state[r], g) for r, g in zip(rows_list, goals)],
            candidates=[candidates[r] for r in rows_list],
            actions=torch.from_numpy(self._steps.action.take(rows)),
            reward=torch.from_numpy(rewards.astype(np.float32)),
            discount=torch.from_numpy((self.gamma**k).astype(np.float32)),
            terminal=torch.from_numpy(at_end & draw.terminated),
            next_observations=[with_goal(state[r], g) for r, g in zip(next_rows_list, goals)],
            next_candidates=[candidates[r] for r in next_rows_list],
            relabeled=torch.from_numpy(draw.relabeled.copy()),
            goals=goals,
            goal_types=[self.goal_types[self._goal_type_ids[g]] for g in draw.goal_id.tolist()],
        )

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | Path) -> None:
        """Write the buffer as Arrow IPC files plus a JSON header, atomically (a temporary
        directory renamed into place: a killed save leaves the previous snapshot intact)."""
        directory = Path(directory)
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        steps = pa.Table.from_batches([_snapshot_rows(e, self._steps) for e in self._episodes], schema=_STEP_SCHEMA)
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
    def load(cls, directory: str | Path, env: EnvironmentSpec | None = None) -> ReplayBuffer:
        """Restore a buffer written by `save` (`env`: as in the constructor; Playground-Text's
        saved goal set when None)."""
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
            env=env,
        )
        if buffer.prior_goal_set != header["prior_goal_set"]:
            raise ValueError(
                f"{directory} holds a buffer of goal set {header['prior_goal_set']!r}, not {buffer.prior_goal_set!r}"
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
                first_row=buffer._steps.append(
                    rows.column("state").to_pylist(),
                    _shared_lists(rows.column("candidates").to_pylist()),
                    rows.column("action").to_pylist()[:-1],
                    rows.column("reward").to_pylist()[:-1],
                ),
                length=len(rows) - 1,
                achieved_goals=rows.column("achieved_goals").slice(0, len(rows) - 1),
                relabels=relabels_of.get(meta["episode"], []),
            )
            buffer._append(stored)
        buffer._next_id = header["next_id"]
        buffer.added_episodes = header["added_episodes"]
        buffer.added_transitions = header["added_transitions"]
        buffer.added_relabels = header["added_relabels"]
        buffer.rng.bit_generator.state = header["rng"]
        return buffer

    def follow(self, capacity: int, gamma: float, her: bool, her_max_goals: int | None) -> None:
        """Take a resumed run's settings in place of the saved ones (`load` restores the saved):
        `gamma` discounts every target sampled from now on, as the learner's settings say; a
        smaller `capacity` evicts the oldest episodes now; `her` and `her_max_goals` decide the
        relabels of the episodes added from now on (those stored keep theirs)."""
        if capacity < 1 or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"capacity must be >= 1 and gamma in [0, 1], got {capacity}, {gamma}")
        self.capacity, self.gamma, self.her, self.her_max_goals = capacity, gamma, her, her_max_goals
        self._evict()
