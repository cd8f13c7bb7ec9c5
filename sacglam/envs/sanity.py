"""Sanity environments: goal-conditioned text tasks so small that every algorithm must solve them.

In the spirit of the identity environments well-kept RL libraries test every algorithm on, each
isolates one thing an agent must do, so a failure points at its cause (`docs/results/sanity.md`):
- `SayWord`, a one-step goal-conditioned bandit: the goal `Say <word>` is met by the candidate that
  copies the word. It needs only reading the goal: no bootstrapping, no credit assignment.
- `CarryWord`, two steps: take one of the word cards, then show or drop it; the goal `Show the
  <word> card` is met by taking that card and showing it. The reward comes one step after the
  choice that decides it, so the first action's value comes only through the bootstrapped target.
- `GoalCorridor`: walk left or right along numbered cells to the goal cell (up to `length - 1`
  steps): several steps of bootstrapping, with the goal deciding the direction.

All three follow the protocol (`docs/reference/environment-protocol.md`): a `Goal:` first line, `candidates`,
`goal`, `achieved_goals` (each goal once per episode, the goal of a success at its step),
`reset(options={"goal": g})`, an `expert_action()`, and an error for an action not offered. They
list no `vocabulary`: a tiny model collects their words by random play, as for any environment
a user brings.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import gymnasium
from gymnasium import spaces

from sacglam.envs.protocol import InvalidActionError, with_goal

WORDS = ("red", "blue", "green", "yellow")
_CHARSET = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:\n")


class GoalTextEnv(gymnasium.Env):
    """What the three share: goals drawn uniformly (or given at reset), the goal line, candidate
    checks, the step limit, and reporting each achieved goal once per episode. A subclass says
    what a state looks like, what may be done there and what an action achieves."""

    metadata = {"render_modes": []}

    def __init__(self, goals: tuple[str, ...], max_steps: int):
        if not goals:
            raise ValueError(f"{type(self).__name__} needs at least one goal")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.goals, self.max_steps = goals, max_steps
        self.observation_space = spaces.Text(max_length=400, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=40, charset=_CHARSET)
        self.goal, self.t, self._reported = goals[0], 0, set[str]()

    # ------------------------------------------------------------------ the task

    @abstractmethod
    def _start(self) -> None:
        """Set up a new episode's state (self.goal is set; self.np_random is seeded)."""

    @abstractmethod
    def _text(self) -> str:
        """The state's text, without the goal line."""

    @abstractmethod
    def _candidates(self) -> list[str]:
        """The actions offered in the current state."""

    @abstractmethod
    def _act(self, action: str) -> tuple[list[str], bool]:
        """Apply an offered action: (the goals the step achieved, whether the episode is over
        whatever the goal)."""

    @abstractmethod
    def expert_action(self) -> str:
        """The action of a shortest path to the goal from the current state."""

    # ------------------------------------------------------------------ the protocol

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        goal = (options or {}).get("goal")
        if goal is not None and goal not in self.goals:
            raise ValueError(f"{type(self).__name__} has no goal {goal!r}; its goals are {list(self.goals)}")
        self.goal = goal if goal is not None else self.goals[int(self.np_random.integers(len(self.goals)))]
        self.t, self._reported = 0, set()
        self._start()
        return with_goal(self._text(), self.goal), self._info([])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action not in self._candidates():
            raise InvalidActionError(f"{action!r} is not one of this step's candidates {self._candidates()}")
        self.t += 1
        achieved, over = self._act(action)
        achieved = [g for g in achieved if g not in self._reported]
        self._reported.update(achieved)
        success = self.goal in achieved
        terminated = success or over
        truncated = self.t >= self.max_steps and not terminated
        return with_goal(self._text(), self.goal), float(success), terminated, truncated, self._info(achieved)

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}


class SayWord(GoalTextEnv):
    """One step: goal `Say <word>`, candidates the words; copying the goal's word succeeds.
    Uniform-random success is 1 / len(words)."""

    def __init__(self, words: tuple[str, ...] = WORDS):
        super().__init__(tuple(f"Say {w}" for w in words), max_steps=1)
        self.words = tuple(words)

    def _start(self) -> None:
        pass

    def _text(self) -> str:
        return "Say one word.\nAction:"

    def _candidates(self) -> list[str]:
        return list(self.words)

    def _act(self, action: str) -> tuple[list[str], bool]:
        return [f"Say {action}"], True

    def expert_action(self) -> str:
        return self.goal.removeprefix("Say ")


class CarryWord(GoalTextEnv):
    """Two steps: take one of the word cards, then show or drop it. Goal `Show the <word> card`;
    showing a card achieves showing that card. Uniform-random success is 1 / (2 len(words))."""

    def __init__(self, words: tuple[str, ...] = WORDS):
        super().__init__(tuple(f"Show the {w} card" for w in words), max_steps=2)
        self.words = tuple(words)
        self.held: str | None = None

    def _start(self) -> None:
        self.held = None

    def _text(self) -> str:
        if self.held is None:
            return f"There are cards: {', '.join(self.words)}.\nAction:"
        return f"You hold the {self.held} card.\nAction:"

    def _candidates(self) -> list[str]:
        if self.held is None:
            return [f"Take the {w} card" for w in self.words]
        return ["Show the card", "Drop the card"]

    def _act(self, action: str) -> tuple[list[str], bool]:
        if self.held is None:
            self.held = action.split(" ")[2]
            return [], False
        return ([f"Show the {self.held} card"] if action == "Show the card" else []), True

    def expert_action(self) -> str:
        wanted = self.goal.split(" ")[2]
        if self.held is None:
            return f"Take the {wanted} card"
        return "Show the card" if self.held == wanted else "Drop the card"


class GoalCorridor(GoalTextEnv):
    """Cells 0 to length - 1; start in a random cell other than the goal's; `Go left` and `Go
    right` move one cell (a wall stops them at the ends). Goal `Reach cell <k>`; entering a cell
    achieves reaching it."""

    def __init__(self, length: int = 7, max_steps: int = 8):
        if length < 2:
            raise ValueError(f"length must be >= 2 cells, got {length}")
        super().__init__(tuple(f"Reach cell {k}" for k in range(length)), max_steps=max_steps)
        self.length, self.position = length, 0

    def _start(self) -> None:
        target = int(self.goal.split(" ")[2])
        others = [k for k in range(self.length) if k != target]
        self.position = others[int(self.np_random.integers(len(others)))]

    def _text(self) -> str:
        return f"You are in cell {self.position} of cells 0 to {self.length - 1}.\nAction:"

    def _candidates(self) -> list[str]:
        return ["Go left", "Go right"]

    def _act(self, action: str) -> tuple[list[str], bool]:
        before = self.position
        self.position = max(0, min(self.length - 1, self.position + (1 if action == "Go right" else -1)))
        return ([f"Reach cell {self.position}"] if self.position != before else []), False

    def expert_action(self) -> str:
        return "Go right" if int(self.goal.split(" ")[2]) > self.position else "Go left"
