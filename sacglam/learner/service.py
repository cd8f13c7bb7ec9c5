"""A learner as a service (Ray makes it remote; the local runner calls it directly): it builds the
agent (seeded, language warm start when configured), trains it with its algorithm's side
(`algorithms`: SAC from replay batches, PPO from whole rollouts), publishes its trainable state,
evaluates, and checkpoints. With several learners, each trains on its share of every batch and
gradients are averaged (`distributed`)."""

from __future__ import annotations

import torch

from sacglam.config import TrainConfig
from sacglam.evaluation import EvaluationPart
from sacglam.learner import distributed
from sacglam.learner.algorithms import make_training
from sacglam.models.policy import run_agent_part
from sacglam.runtime.accelerator import ray_gpu_ids, settle_on_device
from sacglam.runtime.devices import check_on_host
from sacglam.runtime.handles import Handle
from sacglam.types import EpisodeResult


class LearnerService:
    def __init__(
        self,
        cfg: TrainConfig,
        storage: Handle,
        rank: int = 0,
        world_size: int = 1,
        threads: int | None = None,
        warm_start: bool = True,
        gpu_memory_fraction: float | None = None,
    ):
        from sacglam.errors import one_line_warnings
        from sacglam.models.agent import GLAMAgent
        from sacglam.models.warm_start import language_warm_start

        one_line_warnings()  # a Ray actor's process: the evaluation's environments warn as the command line shows
        if threads:
            torch.set_num_threads(threads)
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        torch.manual_seed(cfg.seed)  # every rank builds the same initial weights
        # Dropout off for the whole run: acting, targets and updates use the same function.
        agent = GLAMAgent(cfg.agent).eval()
        settle_on_device(f"learner {rank}", agent.device, gpu_memory_fraction)
        steps = cfg.warm_start_steps or 0  # TrainConfig resolves its default to a number
        self.warm_start_metrics = (
            language_warm_start(
                agent,
                cfg.env,
                steps=steps,
                seed=cfg.seed,
                objective=cfg.warm_start_objective,
                target_kl=cfg.warm_start_target_kl,
            )
            if steps and warm_start  # not when a checkpoint will overwrite the weights
            else {}
        )
        self.training = make_training(agent, cfg, storage, rank, world_size)
        self.agent = agent

    # ------------------------------------------------------------------ data parallelism

    def rendezvous(self) -> tuple[str, int]:
        """(address, port) for the process group (asked of rank 0)."""
        return distributed.node_address(), distributed.free_port()

    def gpu_ids(self) -> list[str]:
        """The GPUs Ray assigned to this learner, as `<node id>:<gpu id>` (a GPU id is unique within
        its node only); empty without GPUs."""
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
        return [f"{node}:{gpu}" for gpu in ray_gpu_ids()]

    def join(self, address: str, port: int, shared_cards: bool = False) -> bool:
        """Join the process group, take rank 0's weights, and average gradients from now on.
        `shared_cards`: some learners share a GPU (NCCL refuses that: gloo averages instead)."""
        agent = self.agent
        distributed.init_process_group(address, port, self.rank, self.world_size, agent.device, shared_cards)
        distributed.broadcast_parameters([p for p in agent.parameters() if p.requires_grad])
        self.training.after_broadcast()
        self.training.learner.gradient_sync = distributed.average_gradients
        return True

    # ------------------------------------------------------------------ training

    def train(self, units: int) -> dict[str, float]:
        """`units` of training (SAC: gradient steps; PPO: rollouts); returns their metrics."""
        return self.training.train(units)

    def weights(self) -> dict[str, torch.Tensor]:
        """The trainable state (LoRA + heads; every LLM weight when lora_r = 0), CPU tensors."""
        return check_on_host(self.agent.trainable_state_dict(), "the learner's weights")

    def weights_nbytes(self) -> int:
        """Bytes of what `weights` ships (the critic's input statistics included)."""
        return sum(t.numel() * t.element_size() for t in self.agent.trainable_state_dict().values())

    def evaluate_part(self, part: EvaluationPart) -> list[EpisodeResult]:
        """One part of the run's evaluation (`evaluation.training_evaluation`) with the current
        weights; the driver walks through the parts and shows progress between them."""
        return run_agent_part(self.agent, part)

    def warm_start(self) -> dict[str, float]:
        return self.warm_start_metrics

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """What a resumed run needs from this learner (`algorithms`: weights, optimizers, and what
        the algorithm holds besides), CPU tensors."""
        return check_on_host(self.training.state_dict(), "the learner's checkpoint state")

    def load_state_dict(self, state: dict) -> bool:
        self.training.load_state_dict(state)
        return True

    def ping(self) -> bool:
        return True
