"""Data types that cross component boundaries (kept in one place, small and frozen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


class Policy(Protocol):
    """Anything that picks one action per state: scripted policies now, the LLM agent later.

    `observations[i]` is a Playground-Text observation and `candidates[i]` its candidate actions;
    the result holds one element of `candidates[i]` per state.
    """

    name: str

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]: ...


@dataclass(frozen=True)
class EpisodeSpec:
    """One evaluation episode, fully determined: the goal, and the seed its scene is drawn with."""

    goal: str
    seed: int


@dataclass(frozen=True)
class EpisodeResult:
    """The outcome of one evaluation episode."""

    goal: str
    goal_type: str  # one of sacglam.envs.GOAL_TYPES
    seed: int
    success: bool  # the goal was achieved (reward 1) before truncation
    steps: int  # env steps taken in the episode
