"""What each algorithm asks of the pipeline: when to collect, when to train, when the run may
pause for an evaluation or a checkpoint, when it is done. The driver runs one loop for both; the
schedule is the algorithm's plug-in.

- `OffPolicySchedule` (SAC-GLAM, SAC-GLAM+HER; the paper's schedule, whatever the number of
  workers): rollout workers collect in chunks; collection may run at most
  `pipeline.max_steps_ahead` env steps ahead of the updates the schedule asks for, so the
  data/update ratio stays the paper's (`gradient_steps` updates per `update_every` env steps) and
  every queue stays bounded. Learning starts once the buffer holds a batch and the `random_steps`
  (uniform-random actions) are done; the learners then owe `gradient_steps` updates per
  `update_every` env steps and are asked for them in one call; rank 0's weights go to inference
  every `weight_sync_every` updates.
- `OnPolicySchedule` (PPO-GLAM): rollouts of `ppo.rollout_steps` env steps, collected in chunks
  with the weights of the last update (policy lag 0); the rollout's end cuts the open episodes
  into segments; the learners train on the whole rollout (PPO's epochs), the new weights reach
  inference before the next rollout starts, and the rollout storage is cleared. The budget is
  rounded up to whole rollouts. Evaluations and checkpoints happen between rollouts. A chunk that
  acted with other weights (a restarted inference actor) makes the rollout be collected again,
  with the weights the driver waited for; the steps dropped (`discarded_env_steps`) do not count
  towards the budget.
"""

from __future__ import annotations

from typing import Any, Protocol

from sacglam.config import TrainConfig
from sacglam.pipeline.components import Components
from sacglam.pipeline.counters import Counters
from sacglam.replay_actor.rollout import RolloutStorage
from sacglam.rollout_workers.service import RolloutService
from sacglam.runtime.handles import ExperienceStore, resolve, resolve_all
from sacglam.types import ChunkReport


class PipelineDriver(Protocol):
    """What a schedule reads and asks of the driver (`sacglam.pipeline.driver.PipelineDriver`
    implements it): the run's settings, components and counters, the calls in flight, and the
    calls it may issue."""

    cfg: TrainConfig
    parts: Components
    c: Counters
    in_flight: dict[Any, tuple[str, Any]]
    issued_steps: int  # collected + in flight
    idle_workers: list[int]

    def training(self) -> bool: ...

    def eval_due(self) -> bool: ...

    def checkpoint_due(self) -> bool: ...

    def train(self, units: int) -> None: ...

    def collect(self, vector_steps: int, explore: bool, worker: int | None = None, cut: bool = False) -> None: ...

    def publish(self, wait: bool = False) -> None: ...


MAX_REDOS = 3  # rollouts discarded in a row before the run stops with an error


def updates_due(env_steps: int, learning_from: int | None, update_every: int, gradient_steps: int) -> int:
    """Updates the paper's schedule asks for once `env_steps` are collected (0 before learning starts)."""
    if learning_from is None:
        return 0
    return ((env_steps - learning_from) // update_every + 1) * gradient_steps


class Schedule(Protocol):
    on_policy: bool  # acts only with the last update's weights (it waits for them after a broadcast)

    def issue(self, driver: PipelineDriver) -> None:
        """Start the collection and training calls the schedule allows now."""

    def weights_lost(self, driver: PipelineDriver) -> None:
        """A chunk acted with no weights from the learners (a restarted inference actor, version
        -1): send them again."""

    def collected(self, driver: PipelineDriver, result: ChunkReport) -> bool:
        """A collection chunk came back (the driver has counted its env steps and episodes).
        Returns whether its data is kept for training."""

    def trained(self, driver: PipelineDriver, units: int) -> None:
        """A training call of `units` came back (the driver has counted its metrics)."""

    def may_evaluate(self, driver: PipelineDriver) -> bool: ...

    def may_checkpoint(self, driver: PipelineDriver) -> bool: ...

    def done(self, driver: PipelineDriver) -> bool: ...


class OffPolicySchedule:
    on_policy = False

    def __init__(self, driver: PipelineDriver):
        self.updates_issued = driver.c.updates
        self.trained_through = driver.c.env_steps  # env steps whose updates have been asked for

    def _due(self, d: PipelineDriver) -> int:
        sac = d.cfg.sac
        return updates_due(d.c.env_steps, d.c.learning_from, sac.update_every, sac.gradient_steps)

    def issue(self, d: PipelineDriver) -> None:
        if not (d.training() or d.checkpoint_due() or d.eval_due()):
            due = self._due(d)
            if due > self.updates_issued:
                d.train(due - self.updates_issued)
                self.updates_issued = due
            self.trained_through = d.c.env_steps
        if d.checkpoint_due():
            return
        sac = d.cfg.sac
        while d.idle_workers and d.issued_steps < d.cfg.total_env_steps:
            if (
                d.c.learning_from is not None
                and d.issued_steps - self.trained_through >= d.cfg.pipeline.max_steps_ahead
            ):
                return
            d.collect(d.cfg.pipeline.chunk_steps, explore=d.issued_steps < sac.random_steps)

    def weights_lost(self, d: PipelineDriver) -> None:
        d.publish()  # off-policy: collection goes on while the weights travel

    def collected(self, d: PipelineDriver, result: ChunkReport) -> bool:
        sac = d.cfg.sac
        if d.c.learning_from is None and d.c.env_steps >= sac.random_steps:
            if resolve(d.parts.storage.call(ExperienceStore.size)) >= sac.batch_size:
                d.c.learning_from = d.c.env_steps
        return True  # off-policy: any weights' data is kept

    def trained(self, d: PipelineDriver, units: int) -> None:
        d.c.updates += units
        if d.c.updates - d.c.published >= d.cfg.pipeline.weight_sync_every:
            d.publish()

    def may_evaluate(self, d: PipelineDriver) -> bool:
        return not d.training()

    def may_checkpoint(self, d: PipelineDriver) -> bool:
        return not d.in_flight

    def done(self, d: PipelineDriver) -> bool:
        return d.c.env_steps >= d.cfg.total_env_steps and not d.in_flight and self._due(d) <= d.c.updates


class OnPolicySchedule:
    on_policy = True

    def __init__(self, driver: PipelineDriver):
        self.rollout_vector_steps = driver.cfg.ppo.rollout_steps // driver.cfg.num_envs
        self.left = [self.rollout_vector_steps] * len(driver.parts.workers)  # vector steps each worker owes
        self.training = False
        # A chunk of this rollout acted with other weights than the last update's (an inference
        # actor restarted and acted with its initial weights before the driver re-sent them): the
        # learner takes PPO's old policy with the last update's weights, so that data would be
        # off-policy. The rollout is collected again once the chunks in flight are back.
        self.stale = False
        self.resent = False  # the weights were sent again (and waited for) during this rollout
        self.redos = 0  # rollouts discarded in a row
        self.rollout_env_steps = 0  # collected so far in this rollout (what a redo discards)

    def _between_rollouts(self, d: PipelineDriver) -> bool:
        return not d.in_flight and not self.training and all(n == self.rollout_vector_steps for n in self.left)

    def issue(self, d: PipelineDriver) -> None:
        if self.training or self.stale or self.done(d):
            return  # a stale rollout waits for its chunks in flight (`collected` discards it)
        if not self._between_rollouts(d) or not (d.eval_due() or d.checkpoint_due()):
            chunk = d.cfg.pipeline.chunk_steps
            for index in list(d.idle_workers):
                if self.left[index] > 0:
                    steps = min(chunk, self.left[index])
                    self.left[index] -= steps
                    d.collect(steps, explore=False, worker=index, cut=self.left[index] == 0)
        if not d.in_flight and all(n == 0 for n in self.left):
            # Every segment of the rollout must have reached the storage before the learners read it.
            resolve_all([w.call(RolloutService.flush) for w in d.parts.workers])
            self.training = True
            d.train(1)

    def weights_lost(self, d: PipelineDriver) -> None:
        if not self.resent:  # once per rollout: it is collected again anyway
            d.publish(wait=True)
            self.resent = True

    def collected(self, d: PipelineDriver, result: ChunkReport) -> bool:
        self.rollout_env_steps += result.env_steps
        if result.policy_version != d.c.published:
            self.stale = True
        if self.stale and not any(kind == "collect" for kind, _ in d.in_flight.values()):
            self._discard(d)  # here, so that the run loop sees the schedule between rollouts at once
            return False
        return not self.stale

    def _discard(self, d: PipelineDriver) -> None:
        """Drop the rollout collected so far: the workers' open segments (each slot's next segment
        starts where it is) and the storage's; the next rollout starts with the current weights."""
        self.redos += 1
        if self.redos > MAX_REDOS:
            raise RuntimeError(
                f"{MAX_REDOS} rollouts in a row acted with other weights than the last update's: an inference "
                "actor keeps restarting (see its logs on the Ray dashboard) or holds a newer weights version "
                "than the run publishes"
            )
        resolve_all([w.call(RolloutService.discard) for w in d.parts.workers])
        resolve(d.parts.storage.call(RolloutStorage.clear))
        d.c.discarded_env_steps += self.rollout_env_steps
        self._new_rollout(d)

    def _new_rollout(self, d: PipelineDriver) -> None:
        self.stale, self.resent, self.rollout_env_steps = False, False, 0
        self.left = [self.rollout_vector_steps] * len(d.parts.workers)

    def trained(self, d: PipelineDriver, units: int) -> None:
        d.c.updates += units
        d.publish(wait=True)  # the next rollout acts with these weights: policy lag 0
        resolve(d.parts.storage.call(RolloutStorage.clear))
        self.training = False
        self.redos = 0
        self._new_rollout(d)

    def may_evaluate(self, d: PipelineDriver) -> bool:
        return self._between_rollouts(d)

    def may_checkpoint(self, d: PipelineDriver) -> bool:
        return self._between_rollouts(d)

    def done(self, d: PipelineDriver) -> bool:
        # Discarded steps do not count: a fault costs env steps, not rollouts trained on.
        kept = d.c.env_steps - d.c.discarded_env_steps
        return kept >= d.cfg.total_env_steps and self._between_rollouts(d)


def make_schedule(driver: PipelineDriver) -> Schedule:
    """The schedule of `driver.cfg.algo`."""
    return OnPolicySchedule(driver) if driver.cfg.algo == "ppo" else OffPolicySchedule(driver)
