"""The Ray inference actor: an `InferenceServer` behind a `MicroBatcher` (an async actor, so
requests from every rollout worker are gathered into one shared-prefix forward)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import torch

from sacglam.config import AgentConfig
from sacglam.inference.batching import MicroBatcher
from sacglam.inference.server import InferenceServer


class InferenceActor:
    def __init__(
        self,
        agent_config: AgentConfig,
        max_batch: int,
        max_wait_ms: float,
        threads: int = 1,
        gpu_memory_fraction: float | None = None,
    ):
        self.server = InferenceServer(agent_config, threads=threads, gpu_memory_fraction=gpu_memory_fraction)
        self.batcher = MicroBatcher(self.server.distributions_batch, max_batch, max_wait_ms / 1000.0)

    async def distributions(
        self, observations: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> tuple[np.ndarray, int]:
        return await self.batcher.submit((observations, candidates), len(observations))

    async def set_weights(self, version: int, state: dict[str, torch.Tensor]) -> int:
        # Staged only: the batcher's next forward applies it (the event loop never runs during a forward).
        return self.server.set_weights(version, state)

    async def goal_features(self, goals: Sequence[str]) -> np.ndarray:
        # In a thread, like the batches: the event loop keeps taking requests meanwhile.
        return await asyncio.get_running_loop().run_in_executor(None, self.server.goal_features, goals)

    async def stats(self) -> dict[str, float]:
        return self.server.stats() | {"inference/batches": self.batcher.batches}

    async def life_and_stats(self) -> tuple[float, dict[str, float]]:
        return self.server.life, await self.stats()

    async def ping(self) -> bool:
        return True
