"""Configuration: frozen, validated dataclasses, one per component.

Field docstrings become the `--help` text of the `sacglam` command (tyro). Validation happens at
construction and names the rule that broke and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sacglam.envs.playground_text import PlaygroundText, validate_env_args
from sacglam.envs.vector import PlaygroundTextVector

Variant = Literal["full", "simple"]

HELD_OUT_GOALS = {"train": "test", "simple-train": "simple-test"}
"""The held-out goal set that matches each training goal set."""


@dataclass(frozen=True)
class EnvConfig:
    """Playground-Text settings (`shared/docs/playground-text.md`)."""

    n_objects: int = 6
    """Objects per scene (6 in the paper's task, 3 in the simplified variant)."""
    goals: str = "train"
    """Goal set episodes draw from: train, test, simple-train or simple-test."""
    max_steps: int = 30
    """Steps before an episode is truncated (30 in the paper's task, 8 in the simplified variant)."""

    def __post_init__(self) -> None:
        validate_env_args(self.n_objects, self.goals, self.max_steps)

    @classmethod
    def variant(cls, name: Variant) -> EnvConfig:
        """The paper's task (`full`: 6 objects, 8,470 goals, 30 steps) or the simplified one of its
        appendix B (`simple`: 3 objects, 182 single goals, 8 steps)."""
        if name == "full":
            return cls(n_objects=6, goals="train", max_steps=30)
        if name == "simple":
            return cls(n_objects=3, goals="simple-train", max_steps=8)
        raise ValueError(f"unknown variant {name!r}; choose 'full' or 'simple'")

    def with_goals(self, goals: str) -> EnvConfig:
        return replace(self, goals=goals)

    @property
    def held_out(self) -> EnvConfig:
        """The same environment on the held-out test goals."""
        if self.goals not in HELD_OUT_GOALS:
            raise ValueError(f"goals={self.goals!r} is already a held-out set")
        return self.with_goals(HELD_OUT_GOALS[self.goals])

    def make(self) -> PlaygroundText:
        return PlaygroundText(n_objects=self.n_objects, goals=self.goals, max_steps=self.max_steps)

    def make_vector(self, num_envs: int) -> PlaygroundTextVector:
        return PlaygroundTextVector(num_envs, n_objects=self.n_objects, goals=self.goals, max_steps=self.max_steps)


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate reference policies on Playground-Text: success rate per goal type, on the train
    goals and on the held-out test goals."""

    variants: tuple[Variant, ...] = ("simple", "full")
    """Environment variants to evaluate on."""
    policies: tuple[Literal["expert", "random"], ...] = ("expert", "random")
    """Policies to evaluate."""
    episodes: int = 400
    """Episodes per policy, variant and goal set, split equally over the goal types."""
    num_envs: int = 32
    """Environments stepped together (policies act on a batch of states)."""
    seed: int = 0
    """Seed of the episodes (goals and scenes) and of the random policy."""
    output: Path | None = Path("runs/evaluation.json")
    """Where to write the results as JSON (none when omitted)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")
        if not self.variants or not self.policies:
            raise ValueError("give at least one variant and one policy")
