"""Reference policies that need no learning: uniform-random over the candidates.

(The scripted expert lives with the environment, in `sacglam.envs.expert`.)
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class RandomPolicy:
    """Picks uniformly among each state's candidates; seeded, so evaluations are reproducible."""

    name = "random"

    def __init__(self, seed: int | None = None):
        self._rng = random.Random(seed)

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        if len(observations) != len(candidates):
            raise ValueError(f"{len(observations)} observations but {len(candidates)} candidate lists")
        return [self._rng.choice(c) for c in candidates]
