"""PPO's rollout storage, the on-policy counterpart of the replay actor (Ray makes it remote, the
local runner calls it directly): the rollout workers hand it the segments of the current rollout
(`add_episodes`, as they hand episodes to the replay actor); every learner reads the whole rollout
(`rollout`); the driver clears it once the learners have trained on it.

Checkpoints are taken between rollouts, when it is empty, so it has nothing to save or restore."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sacglam.types import Episode


class RolloutStorage:
    def __init__(self) -> None:
        self.segments: list[Episode] = []

    def add_episodes(self, episodes: Sequence[Episode]) -> int:
        """Keep the segments (finished episodes and cut ones); returns 0 (no relabels here: PPO
        relabels a rollout when it trains on it)."""
        self.segments += episodes
        return 0

    def rollout(self) -> list[Episode]:
        return list(self.segments)

    def clear(self) -> None:
        self.segments = []

    def size(self) -> int:
        """Environment transitions held."""
        return sum(s.length for s in self.segments)

    def stats(self) -> dict[str, float]:
        return {"rollout/segments": len(self.segments), "rollout/transitions": self.size()}

    def save(self, directory: str | Path) -> None:
        """Nothing to write: checkpoints are taken between rollouts."""
        if self.segments:
            raise RuntimeError("a checkpoint in the middle of a rollout: the driver takes them between rollouts")

    def ping(self) -> bool:
        return True
