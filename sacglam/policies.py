"""Reference policies that need no learning: uniform-random over the candidates, and each
environment's expert (Playground-Text's scripted planner reads the text; BabyAI-Text's bot reads
the grid behind it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from sacglam.config import EnvConfig


class RandomPolicy:
    """Picks uniformly among each state's candidates; seeded, so evaluations are reproducible."""

    name = "random"

    def __init__(self, seed: int | None = None):
        self._rng = random.Random(seed)

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        if len(observations) != len(candidates):
            raise ValueError(f"{len(observations)} observations but {len(candidates)} candidate lists")
        return [self._rng.choice(c) for c in candidates]


class EnvironmentExpert:
    """The environment's expert (`EnvironmentSpec.expert_action`), acting in the live environments."""

    name = "expert"

    def __init__(self, env: EnvConfig):
        self._spec = env.spec()

    def act_in(
        self, envs: Sequence[Any], observations: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> list[str]:
        return [self._spec.expert_action(e, o, c) for e, o, c in zip(envs, observations, candidates, strict=True)]
