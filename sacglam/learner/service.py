"""A learner as a service (Ray makes it remote; the local runner calls it directly): it builds the
agent (seeded, language warm start when configured), owns a `SACLearner`, pulls batches from the
replay handle (the next batch is requested before the current one trains: prefetch), publishes
its trainable state, evaluates, and checkpoints. With several learners, each trains on its share
of the batch and gradients are averaged (`distributed`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from sacglam.config import TrainConfig
from sacglam.evaluation import EvaluationPart
from sacglam.learner import distributed
from sacglam.learner.sac import SACLearner
from sacglam.models.policy import run_agent_part
from sacglam.runtime.handles import Handle, LocalFuture, resolve
from sacglam.types import EpisodeResult


class LearnerService:
    def __init__(self, cfg: TrainConfig, replay: Handle, rank: int = 0, world_size: int = 1, threads: int | None = None,
                 warm_start: bool = True):
        from sacglam.models.agent import GLAMAgent
        from sacglam.models.warm_start import language_warm_start

        if threads:
            torch.set_num_threads(threads)
        self.cfg, self.replay, self.rank, self.world_size = cfg, replay, rank, world_size
        torch.manual_seed(cfg.seed)  # every rank builds the same initial weights
        # Dropout off for the whole run: acting, targets and updates use the same function.
        agent = GLAMAgent(cfg.agent).eval()
        self.warm_start_metrics = (
            language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps, seed=cfg.seed)
            if cfg.warm_start_steps and warm_start  # not when a checkpoint will overwrite the weights
            else {}
        )
        self.learner = SACLearner(agent, cfg.sac)
        self.batch_share = cfg.sac.batch_size // world_size
        self._next_batch: Any = None

    # ------------------------------------------------------------------ data parallelism

    def rendezvous(self) -> tuple[str, int]:
        """(address, port) for the process group (asked of rank 0)."""
        return distributed.node_address(), distributed.free_port()

    def join(self, address: str, port: int) -> bool:
        """Join the process group, take rank 0's weights, and average gradients from now on."""
        agent = self.learner.agent
        distributed.init_process_group(address, port, self.rank, self.world_size, agent.device)
        distributed.broadcast_parameters([p for p in agent.parameters() if p.requires_grad])
        self.learner.target = {n: p.detach().clone() for n, p in agent.named_parameters() if p.requires_grad}
        self.learner.gradient_sync = distributed.average_gradients
        return True

    # ------------------------------------------------------------------ training

    def _batch(self):
        current = self._next_batch if self._next_batch is not None else self.replay.call("sample", self.batch_share)
        self._next_batch = self.replay.call("sample", self.batch_share)  # on its way while this one trains
        return resolve(current)

    def train(self, updates: int) -> dict[str, float]:
        """`updates` gradient steps; returns their mean metrics and the update count."""
        totals: dict[str, float] = defaultdict(float)
        for _ in range(updates):
            for name, value in self.learner.update(self._batch()).items():
                totals[name] += value
        return {name: value / max(updates, 1) for name, value in totals.items()} | {
            "learner/updates": self.learner.updates,
            "alpha": self.learner.alpha,
        }

    def weights(self) -> dict[str, torch.Tensor]:
        """The trainable state (LoRA + heads; every LLM weight when lora_r = 0), CPU tensors."""
        return self.learner.agent.trainable_state_dict()

    def weights_nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.learner.agent.parameters() if p.requires_grad)

    def evaluate_part(self, part: EvaluationPart) -> list[EpisodeResult]:
        """One part of the run's evaluation (`evaluation.training_evaluation`) with the current
        weights; the driver walks through the parts and shows progress between them."""
        return run_agent_part(self.learner.agent, part)

    def warm_start(self) -> dict[str, float]:
        return self.warm_start_metrics

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The learner's state and the batch already drawn for the next update (the replay
        generator has moved past it: a resumed run must train on it, not draw a new one)."""
        prefetched = resolve(self._next_batch) if self._next_batch is not None else None
        self._next_batch = LocalFuture(prefetched) if prefetched is not None else None
        return {"learner": self.learner.state_dict(), "prefetched": prefetched}

    def load_state_dict(self, state: dict) -> bool:
        self.learner.load_state_dict(state["learner"])
        self._next_batch = LocalFuture(state["prefetched"]) if state["prefetched"] is not None else None
        return True

    def ping(self) -> bool:
        return True
