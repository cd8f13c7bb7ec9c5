"""The rollout worker as a service: a `RolloutWorker` wired to an inference handle (for pi) and a
storage handle (the replay actor, or PPO's rollout storage: where episodes go). The Ray rollout-worker actor is this class, made remote;
the local runner calls it directly. No algorithm logic lives here."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from sacglam.config import EnvConfig
from sacglam.errors import one_line_warnings
from sacglam.rollout_workers.worker import RolloutWorker
from sacglam.runtime.handles import EpisodeSink, Handle, PolicySource, resolve
from sacglam.types import ChunkReport, GoalPlan


class RolloutService:
    """At most one batch of episodes is on its way to the storage at a time (a bounded queue):
    the next `collect` waits for the previous hand-over before sending its own."""

    def __init__(
        self,
        env_config: EnvConfig,
        num_envs: int,
        seed: int,
        inference: Handle,
        storage: Handle,
        threads: int | None = None,
    ):
        if threads:
            limit_torch_threads(threads)
        one_line_warnings()  # a Ray actor's process: an environment's warnings as the command line shows them
        self.worker = RolloutWorker(env_config, num_envs, seed)
        self.inference, self.storage = inference, storage
        self._in_flight: Any = None

    def _distributions(self, observations, candidates) -> tuple[np.ndarray, int]:
        return resolve(
            self.inference.call(PolicySource.distributions, list(observations), [list(c) for c in candidates])
        )

    def collect(
        self, vector_steps: int, explore: bool = False, cut: bool = False, goal_plan: GoalPlan | None = None
    ) -> ChunkReport:
        """Step, hand the episodes to the storage (replay or rollout), return the chunk's figures.
        `explore`: uniform-random actions (the paper's optional random steps before learning);
        `cut`: end the open episodes' segments after the last step (an on-policy rollout's end);
        `goal_plan`: the goal sampler's newest distribution (None: keep the last)."""
        got = self.worker.collect(vector_steps, None if explore else self._distributions, cut=cut, goal_plan=goal_plan)
        self.flush()
        if got.episodes:
            self._in_flight = self.storage.call(EpisodeSink.add_episodes, got.episodes)
        finished = [e for e in got.episodes if not e.cut]
        return ChunkReport(
            env_steps=got.env_steps,
            episodes=len(finished),
            successes=sum(e.success for e in finished),
            episode_steps=sum(len(e.actions) for e in finished),
            policy_version=got.policy_version,
            goal_outcomes=tuple((e.goal, e.success) for e in finished),
            reported_goals=tuple(dict.fromkeys(g for e in got.episodes for step in e.achieved_goals for g in step)),
            rewarded_steps=sum(r != 0 for e in got.episodes for r in e.rewards),
        )

    def flush(self) -> bool:
        """Wait until the last hand-over to the storage is done."""
        if self._in_flight is not None:
            pending, self._in_flight = self._in_flight, None
            resolve(pending)
        return True

    def discard(self) -> bool:
        """Drop the open episodes' segments collected so far (after the storage has what was sent):
        each slot's next segment starts from its current state. The on-policy schedule calls it to
        collect a rollout again."""
        self.flush()
        self.worker.recorder.cut()
        return True

    def get_state(self) -> bytes:
        self.flush()
        return self.worker.get_state()

    def set_state(self, state: bytes) -> None:
        self.worker.set_state(state)

    def ping(self) -> bool:
        return True


def limit_torch_threads(threads: int) -> None:
    """At most `threads` torch threads in this process. A rollout worker holds no tensor, and
    importing torch costs a process 1.5-3 s: where torch is loaded (an environment that uses it)
    the limit is set now, and where it is not, through `OMP_NUM_THREADS` and `MKL_NUM_THREADS`
    (torch sizes its pool from them when it loads; MKL's overrides OpenMP's on MKL builds)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
