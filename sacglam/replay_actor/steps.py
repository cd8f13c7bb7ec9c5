"""The step table: every stored episode's steps in one set of columns, oldest first.

An episode of T steps takes T+1 consecutive rows (s_0 .. s_T; the last row's action is -1 and its
reward 0). Rows are absolute: a row number stays valid until its episode is evicted. Sampling
reads B rows by number, so its cost does not depend on how many rows are stored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sacglam.replay_actor.columns import Column, ObjectColumn


class StepTable:
    __slots__ = ("state", "candidates", "action", "reward")

    def __init__(self) -> None:
        self.state = ObjectColumn()  # goal-free state texts
        self.candidates = ObjectColumn()  # tuples of candidate action texts
        self.action = Column(np.int64)  # index into the row's candidates; -1 at an episode's last row
        self.reward = Column(np.float64)  # the environment's reward for the row's action; 0 at the last row

    @property
    def next_row(self) -> int:
        return self.action.first + len(self.action)

    def append(
        self,
        states: Sequence[str],
        candidates: Sequence[tuple[str, ...]],
        actions: Sequence[int],
        rewards: Sequence[float],
    ) -> int:
        """Append one episode (T+1 states and candidate lists, T actions and rewards); returns the
        row of its first step."""
        first_row = self.next_row
        self.state.extend(states)
        self.candidates.extend(candidates)
        self.action.extend(list(actions) + [-1])
        self.reward.extend(list(rewards) + [0.0])
        return first_row

    def drop_before(self, row: int) -> None:
        """Drop every row before `row` (the evicted episodes')."""
        count = row - self.action.first
        for column in (self.state, self.candidates, self.action, self.reward):
            column.drop_front(count)

    def discounted_rewards(self, rows: np.ndarray, steps: np.ndarray, gamma: float, max_steps: int) -> np.ndarray:
        """(B,) float64: sum over j < steps[i] of gamma^j * reward[rows[i] + j], for `steps` <= `max_steps`
        (the caller keeps rows[i] + steps[i] - 1 inside the row's episode)."""
        total = np.zeros(len(rows), dtype=np.float64)
        for j in range(max_steps):
            inside = j < steps
            total += np.where(inside, gamma**j * self.reward.take(np.where(inside, rows + j, rows)), 0.0)
        return total
