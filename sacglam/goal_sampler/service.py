"""The goal-sampler actor (a thin service over `GoalSampler`; Ray makes it remote, the local
runner calls it directly): outcomes in, goal plans out, snapshots into checkpoints, and restore
from the newest checkpoint when (re)started, like the replay actor."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from sacglam.config import EnvConfig, GoalSamplerConfig
from sacglam.goal_sampler.sampler import GoalSampler
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.storage import StoragePath, read_torch, write_torch
from sacglam.types import GoalPlan

SNAPSHOT = "goal_sampler.pt"  # the sampler's file inside a checkpoint


class GoalSamplerService:
    """`env` gives goal types for the metrics only (the sampler never reads its goal list)."""

    def __init__(
        self,
        config: GoalSamplerConfig,
        env: EnvConfig,
        seed: int,
        checkpoints: str | os.PathLike | StoragePath | None = None,
        threads: int | None = None,
    ):
        if threads:
            torch.set_num_threads(threads)
        spec = env.spec()
        self.sampler = GoalSampler(config, seed, goal_type=spec.goal_type)
        latest = CheckpointStore(checkpoints).latest() if checkpoints is not None else None
        if latest is not None and (latest / SNAPSHOT).is_file():
            self.sampler.load_state_dict(read_torch(latest / SNAPSHOT))

    def observe(self, reported: Sequence[str], outcomes: Sequence[tuple[str, bool]]) -> tuple[list[str], int]:
        """See `GoalSampler.observe`: the goals whose LLM features the sampler needs, and the
        plan's version."""
        return self.sampler.observe(reported, outcomes)

    def add_features(self, goals: Sequence[str], features: np.ndarray) -> None:
        self.sampler.add_features(goals, features)

    def plan(self) -> GoalPlan:
        return self.sampler.plan()

    def stats(self) -> dict[str, float]:
        return self.sampler.stats()

    def save(self, directory: str | os.PathLike | StoragePath) -> None:
        write_torch(StoragePath(directory) / SNAPSHOT, self.sampler.state_dict())

    def ping(self) -> bool:
        return True
