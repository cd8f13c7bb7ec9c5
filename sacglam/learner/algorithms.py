"""The learner's side of each algorithm, behind one interface the learner service calls.

- `SACTraining`: a `train(n)` call takes n gradient steps, each on a batch pulled from the replay
  actor (the next batch is requested before the current one trains: prefetch); with several
  learners each pulls its share of the batch.
- `PPOTraining`: a `train(1)` call reads the whole current rollout from the rollout storage, turns
  it into training rows (`ppo_rollout`: behaviour log-probs and values from the weights that
  acted, GAE, HER) and runs the PPO epochs on it.

Both expose the core learner (`learner`, with `agent`, `updates`, `gradient_sync`), their
checkpoint state, and what to redo after rank 0's weights were broadcast at start-up.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

import numpy as np

from sacglam.config import TrainConfig
from sacglam.learner.ppo import PPOLearner
from sacglam.learner.ppo_rollout import rollout_from_segments
from sacglam.learner.sac import SACLearner
from sacglam.models.agent import GLAMAgent
from sacglam.runtime.handles import BatchSource, Handle, LocalFuture, RolloutSource, resolve

GRADIENT_SPLIT = ("grad_norm/", "grad_cosine/")  # the learner's per-loss gradient figures


class Training(Protocol):
    @property
    def learner(self) -> SACLearner | PPOLearner: ...

    def train(self, units: int) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def after_broadcast(self) -> None: ...


class SACTraining:
    def __init__(self, agent: GLAMAgent, cfg: TrainConfig, storage: Handle, rank: int, world_size: int):
        self.learner = SACLearner(agent, cfg.sac)
        self.storage = storage
        self.batch_share = cfg.sac.batch_size // world_size
        self._next_batch: Any = None
        self.latest_gradient_split: dict[str, float] = {}

    def _batch(self):
        current = (
            self._next_batch
            if self._next_batch is not None
            else self.storage.call(BatchSource.sample, self.batch_share)
        )
        self._next_batch = self.storage.call(BatchSource.sample, self.batch_share)  # on its way while this one trains
        return resolve(current)

    def train(self, units: int) -> dict[str, float]:
        """`units` gradient steps; returns their mean metrics and the update count."""
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)  # a diagnostic is measured on some updates only
        for _ in range(units):
            for name, value in self.learner.update(self._batch()).items():
                totals[name] += value
                counts[name] += 1
        means = {name: value / counts[name] for name, value in totals.items()}
        # The per-loss gradient norms come every `grad_diagnostics_every` updates: a call without
        # one repeats the latest, so that every record shows them.
        self.latest_gradient_split |= {k: v for k, v in means.items() if k.startswith(GRADIENT_SPLIT)}
        return (
            self.latest_gradient_split
            | means
            | {
                "learner/updates": self.learner.updates,
                "alpha": self.learner.alpha,
            }
        )

    def after_broadcast(self) -> None:
        """The target critic starts as a copy of the (broadcast) online weights."""
        agent = self.learner.agent
        self.learner.target = {n: p.detach().clone() for n, p in agent.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict:
        """The learner's state and the batch already drawn for the next update (the replay
        generator has moved past it: a resumed run must train on it, not draw a new one)."""
        prefetched = resolve(self._next_batch) if self._next_batch is not None else None
        self._next_batch = LocalFuture(prefetched) if prefetched is not None else None
        return {"learner": self.learner.state_dict(), "prefetched": prefetched}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self._next_batch = LocalFuture(state["prefetched"]) if state["prefetched"] is not None else None


class PPOTraining:
    def __init__(self, agent: GLAMAgent, cfg: TrainConfig, storage: Handle, rank: int, world_size: int):
        self.learner = PPOLearner(agent, cfg.ppo, seed=cfg.seed, rank=rank, world_size=world_size)
        self.storage, self.config = storage, cfg.ppo
        self.rng = np.random.default_rng(cfg.seed)  # which relabels a rollout keeps (the same on every rank)

    def train(self, units: int) -> dict[str, float]:
        """`units` rollouts (the driver asks for one at a time): PPO's epochs on the storage's rollout."""
        metrics: dict[str, float] = {}
        for _ in range(units):
            segments = resolve(self.storage.call(RolloutSource.rollout))
            rollout, relabeled = rollout_from_segments(self.learner.agent, segments, self.config, self.rng)
            metrics = self.learner.update(rollout) | {"ppo/relabeled_transitions": relabeled}
        return metrics | {"learner/updates": self.learner.updates}

    def after_broadcast(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.rng.bit_generator.state = state["rng"]


def make_training(agent: GLAMAgent, cfg: TrainConfig, storage: Handle, rank: int = 0, world_size: int = 1) -> Training:
    """The learner side of `cfg.algo`: SAC-GLAM(+HER) or PPO-GLAM."""
    if cfg.algo == "ppo":
        return PPOTraining(agent, cfg, storage, rank, world_size)
    return SACTraining(agent, cfg, storage, rank, world_size)
