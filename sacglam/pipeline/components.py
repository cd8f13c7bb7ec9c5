"""The pipeline's components, built for one of the two runners.

`build_local`: every component is a plain object in this process, called through `LocalHandle`s
(one learner: a single learner on the whole batch computes the same update as data-parallel
learners averaging their shares' gradients, since every loss is a batch mean).
`build_ray` (in `ray_cluster`): the same classes as Ray actors in a placement group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sacglam.config import TrainConfig
from sacglam.runtime.handles import Handle, LocalHandle
from sacglam.runtime.storage import StoragePath


@dataclass
class Components:
    storage: Handle  # where the rollout workers' episodes go: the replay actor (SAC) or the rollout storage (PPO)
    inference: Sequence[Handle]
    workers: Sequence[Handle]
    learners: Sequence[Handle]
    goal_sampler: Handle | None = None  # the goal-sampler actor (goal_sampler.mode other than 'environment')
    dashboard: Any = None  # RayDashboardMetrics on Ray, None locally
    dashboard_url: str | None = None
    close: Callable[[], None] = field(default=lambda: None)


def worker_seed(cfg: TrainConfig, index: int) -> int:
    """Worker 0 uses the run's seed (so a one-worker run seeds its environments like the config says)."""
    return cfg.seed + 104_729 * index


def envs_per_worker(cfg: TrainConfig) -> int:
    return cfg.num_envs // cfg.pipeline.rollout_workers


def storage_component(cfg: TrainConfig) -> tuple[type, tuple]:
    """(class, constructor arguments but the checkpoint directory) of the algorithm's experience
    storage: the replay actor for SAC, the rollout storage for PPO."""
    if cfg.algo == "ppo":
        from sacglam.replay_actor.rollout import RolloutStorage

        return RolloutStorage, ()
    from sacglam.replay_actor.service import ReplayService

    return ReplayService, (cfg.sac, cfg.env, cfg.seed)


def uses_goal_sampler(cfg: TrainConfig) -> bool:
    return cfg.goal_sampler.mode != "environment"


def build_local(cfg: TrainConfig, checkpoints: StoragePath, resuming: bool = False) -> Components:
    from sacglam.inference.server import InferenceServer
    from sacglam.learner.service import LearnerService
    from sacglam.rollout_workers.service import RolloutService

    storage_class, args = storage_component(cfg)
    storage = LocalHandle(storage_class(*args, checkpoints) if args else storage_class())
    learner = LocalHandle(
        LearnerService(cfg, storage, threads=cfg.pipeline.resources.learner_threads, warm_start=not resuming)
    )  # first: it seeds torch and builds the agent like the Ray learners (and sets the process's threads)
    inference = [LocalHandle(InferenceServer(cfg.agent)) for _ in range(cfg.pipeline.inference_actors)]
    workers = [
        LocalHandle(
            RolloutService(cfg.env, envs_per_worker(cfg), worker_seed(cfg, i), inference[i % len(inference)], storage)
        )
        for i in range(cfg.pipeline.rollout_workers)
    ]
    goal_sampler = None
    if uses_goal_sampler(cfg):
        from sacglam.goal_sampler.service import GoalSamplerService

        goal_sampler = LocalHandle(GoalSamplerService(cfg.goal_sampler, cfg.env, cfg.seed, checkpoints))
    return Components(
        storage=storage, inference=inference, workers=workers, learners=[learner], goal_sampler=goal_sampler
    )
