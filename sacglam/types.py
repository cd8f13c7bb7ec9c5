"""Data types that cross component boundaries (kept in one place, small and frozen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch


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


@dataclass(frozen=True)
class AgentOutput:
    """What one forward of the LLM agent gives for a batch of B states with up to C candidates.

    Padding slots (a state with fewer than C candidates) are False in `mask`; there `log_pi` is
    -inf, `action_log_likelihood` and `q` are 0.
    """

    log_pi: torch.Tensor  # (B, C) float32: log pi(a|s), a log-softmax over each state's candidates
    action_log_likelihood: torch.Tensor  # (B, C) float32: LP_LLM(a|s), paper eq. 1 (or its mean per token)
    q: torch.Tensor | None  # (B, C) float32: Q(s, a), None when the agent has no critic
    mask: torch.Tensor  # (B, C) bool

    @property
    def probs(self) -> torch.Tensor:
        """(B, C): pi(a|s), 0 at padding."""
        return self.log_pi.exp()
