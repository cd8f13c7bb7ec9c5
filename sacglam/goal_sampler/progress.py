"""Per-goal competence and absolute learning progress from the agent's own episode outcomes.

A goal's history is its last 2W outcomes (1: the episode on that goal succeeded). Competence is
the mean of the newest W; absolute learning progress (ALP) compares the two halves of the
history: |mean(newer half) - mean(older half)|, which is high while competence moves (up, or
down: forgetting) and falls to 0 once it is flat, mastered or hopeless. Each update costs O(W),
independent of the number of goals.
"""

from __future__ import annotations

from collections import deque


class OutcomeWindows:
    """Histories of the goals seen so far, in discovery order. `window`: W, outcomes per half."""

    def __init__(self, window: int):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.histories: dict[str, deque[int]] = {}

    def add(self, goal: str, success: bool) -> None:
        history = self.histories.get(goal)
        if history is None:
            history = self.histories[goal] = deque(maxlen=2 * self.window)
        history.append(int(success))

    def count(self, goal: str) -> int:
        """Outcomes held for `goal` (at most 2W)."""
        return len(self.histories.get(goal, ()))

    def competence(self, goal: str) -> float:
        """Mean of the newest W outcomes (0 without any)."""
        history = list(self.histories.get(goal, ()))[-self.window :]
        return sum(history) / len(history) if history else 0.0

    def progress(self, goal: str) -> float | None:
        """|mean(newer half) - mean(older half)| of the history (its newest half takes the extra
        outcome of an odd count); None with fewer than 2 outcomes (no estimate yet)."""
        history = list(self.histories.get(goal, ()))
        if len(history) < 2:
            return None
        half = len(history) // 2
        older, newer = history[:half], history[half:]
        return abs(sum(newer) / len(newer) - sum(older) / len(older))

    def state_dict(self) -> dict:
        return {"window": self.window, "histories": {g: list(h) for g, h in self.histories.items()}}

    @classmethod
    def from_state_dict(cls, state: dict) -> OutcomeWindows:
        windows = cls(state["window"])
        for goal, history in state["histories"].items():
            windows.histories[goal] = deque(history, maxlen=2 * windows.window)
        return windows
