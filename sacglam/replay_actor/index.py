"""The replay buffer's sampling index, kept up to date on every add and eviction.

An **entry** is one sequence of transitions the buffer can sample from: an episode under its own
goal (environment pool) or one of its hindsight relabels (relabeled pool). Entries are appended
in the order the buffer stores them and leave from the front, with their episode (the buffer
evicts oldest first). Each pool keeps, per entry, the step-table row of its episode's first
step, its goal id, length, whether it terminates, and the running total of transitions up to and including it, so drawing a transition
uniformly over a pool is one `integers` draw plus one `searchsorted`: O(batch log entries) time,
independent of the buffer's size otherwise, and O(1) amortised work per add or eviction. Nothing
is rebuilt, and no goal text is parsed on the sampling path.

Draws depend only on the live entries' order and lengths (not on how many were evicted before),
so a buffer restored from a snapshot draws exactly what the saved one would have.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sacglam.replay_actor.columns import Column

ENV_POOL = "env"
RELABELED_POOL = "relabeled"
ALL_POOL = "all"


def type_pool(goal_type_id: int, within: str = ALL_POOL) -> str:
    """The pool of the entries of `within` (every entry, the environment's, or the relabeled ones)
    whose goal has type number `goal_type_id`: `prior` sampling draws from the first, a stated
    relabel mix from the last, and the buffer's statistics read all three."""
    return f"type{goal_type_id}" if within == ALL_POOL else f"{within}/type{goal_type_id}"


class EntryDraw(NamedTuple):
    """Drawn transitions, as arrays of shape (count,): which entry each came from, and its step."""

    first_row: np.ndarray  # int64: the step-table row of the entry's episode's first step
    goal_id: np.ndarray  # int64: index into the buffer's goal table
    length: np.ndarray  # int64: the entry's number of transitions
    terminated: np.ndarray  # bool: the entry ends with a termination
    relabeled: np.ndarray  # bool
    step: np.ndarray  # int64: t, in [0, length)


class Pool:
    """The entries of one pool, with running transition totals for uniform draws."""

    __slots__ = ("entries", "end", "_evicted_total")

    _FIRST_ROW, _GOAL_ID, _LENGTH, _FLAGS = range(4)  # fields of an entry, read together
    _TERMINATED, _RELABELED = 1, 2  # bits of _FLAGS

    def __init__(self) -> None:
        self.entries = Column(np.int64, width=4)
        self.end = Column()  # transitions in this pool up to and including the entry, since creation
        self._evicted_total = 0  # transitions of the entries dropped from the front

    def append(self, first_row: int, goal_id: int, length: int, terminated: bool, relabeled: bool) -> None:
        previous = int(self.end.view[-1]) if len(self.end) else self._evicted_total
        flags = self._TERMINATED * terminated + self._RELABELED * relabeled
        self.entries.append((first_row, goal_id, length, flags))
        self.end.append(previous + length)

    def drop_entries_before(self, first_row: int) -> None:
        """Drop the entries of episodes that start before step-table row `first_row` (the oldest
        ones: they are at the front)."""
        count = int(np.searchsorted(self.entries.view[:, self._FIRST_ROW], first_row, side="left"))
        if count:
            self._evicted_total = int(self.end.view[count - 1])
            self.entries.drop_front(count)
            self.end.drop_front(count)

    @property
    def transitions(self) -> int:
        return (int(self.end.view[-1]) - self._evicted_total) if len(self.end) else 0

    def __len__(self) -> int:
        return len(self.end)

    def draw(self, rng: np.random.Generator, count: int) -> EntryDraw:
        """`count` transitions uniform over this pool's transitions (raises when it is empty)."""
        if count and not len(self):
            raise ValueError("no stored transition in this pool")
        flat = rng.integers(0, self.transitions, size=count) if count else np.zeros(0, dtype=np.int64)
        ends = self.end.view
        which = np.searchsorted(ends, flat + self._evicted_total, side="right")
        entries = self.entries.view[which]  # (count, 4)
        length, flags = entries[:, self._LENGTH], entries[:, self._FLAGS]
        return EntryDraw(
            first_row=entries[:, self._FIRST_ROW],
            goal_id=entries[:, self._GOAL_ID],
            length=length,
            terminated=(flags & self._TERMINATED).astype(bool),
            relabeled=(flags & self._RELABELED).astype(bool),
            step=flat + self._evicted_total - (ends[which] - length),
        )


def concatenate(draws: list[EntryDraw]) -> EntryDraw:
    return EntryDraw(*(np.concatenate(field) for field in zip(*draws)))
