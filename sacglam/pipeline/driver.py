"""The driver of the actor-learner pipeline: it schedules the components and does no learning
itself. One loop for every algorithm; what to collect and when to train is the algorithm's
schedule (`schedules`: off-policy for SAC, on-policy for PPO).

The driver itself: publishes rank 0's trainable state once into the object store for every
inference actor (which loads it between two forwards), evaluates (train and held-out goals,
sampled and greedy) and checkpoints when the schedule lets the run pause (a checkpoint waits until
nothing is in flight, so it is consistent), counts, logs and shows progress.

Runs on `LocalHandle`s (one process) or `RayHandle`s alike.
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, EvaluationPart, evaluation_bar, run_evaluation, training_evaluation
from sacglam.goal_sampler.service import GoalSamplerService
from sacglam.inference.server import InferenceServer
from sacglam.learner.service import LearnerService
from sacglam.pipeline.components import Components
from sacglam.pipeline.counters import Counters, counters_from_json
from sacglam.pipeline.health import RunHealth
from sacglam.pipeline.metrics import MetricsLogger
from sacglam.pipeline.schedules import make_schedule
from sacglam.progress import advance, bar_interval
from sacglam.rollout_workers.service import RolloutService
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.handles import ExperienceStore, LocalFuture, resolve, resolve_all, wait_any
from sacglam.runtime.storage import StoragePath, read_torch, write_torch
from sacglam.types import ChunkReport, EpisodeResult

# The first inference actor's cumulative counters: they live in the actor, which a resume builds
# afresh and Ray may restart, so the driver carries them across both (`InferenceTally`).
INFERENCE_COUNTERS = ("inference/forwards", "inference/states_scored", "inference/batches")


def mean_over_learners(results: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the learners that report it: a figure of the rows of one goal type
    (`entropy/<goal type>`) is absent on a learner whose share of the batch held none."""
    names = dict.fromkeys(k for r in results for k in r)
    return {k: sum(r[k] for r in results if k in r) / sum(k in r for r in results) for k in names}


class InferenceTally:
    """The inference counters of the whole run from those of the actor's current life.

    `Counters.inference_before` holds what earlier lives counted (a checkpoint saves it with the
    current life's counts added, so a resumed run goes on from there). A new life (the actor's
    life token changed, or, without one, a counter fell below its last reading) means the
    actor was restarted: the last readings of the one before join `inference_before` (what it
    counted after them is lost with it).
    """

    def __init__(self, counters: Counters):
        self.c = counters
        self.seen: dict[str, float] = {}  # the current life's last readings
        self.life: float | None = None

    def whole_run(self, stats: dict[str, float], life: float | None = None) -> dict[str, float]:
        """`stats` of the actor's life `life` (None: unknown), each cumulative counter counted from
        the run's start (and the mean batch size recomputed from the totals)."""
        out = dict(stats)
        restarted = self.life is not None and life != self.life
        self.life = life
        for key in INFERENCE_COUNTERS:
            if key not in stats:
                continue
            if restarted or stats[key] < self.seen.get(key, 0):
                self.c.inference_before[key] = self.c.inference_before.get(key, 0) + self.seen.get(key, 0)
            self.seen[key] = stats[key]
            out[key] = self.c.inference_before.get(key, 0) + stats[key]
        if "inference/forwards" in out and "inference/states_scored" in out:
            out["inference/mean_batch_states"] = out["inference/states_scored"] / max(out["inference/forwards"], 1)
        return out

    def saved(self) -> dict[str, float]:
        """The totals a checkpoint keeps, as `Counters.inference_before` of the run resumed from it."""
        return {key: self.c.inference_before.get(key, 0) + self.seen.get(key, 0) for key in INFERENCE_COUNTERS}


class PipelineDriver:
    def __init__(
        self,
        cfg: TrainConfig,
        parts: Components,
        logger: MetricsLogger,
        store: CheckpointStore,
        counters: Counters,
        on_chunk: Callable[[PipelineDriver], None] | None = None,
        announce: Callable[[str], None] = print,
        stop_when: Callable[[dict[str, float]], bool] | None = None,
    ):
        self.cfg, self.parts, self.logger, self.store, self.c = cfg, parts, logger, store, counters
        self.on_chunk = on_chunk  # called after each processed chunk (tests inject faults here)
        self.stop_when = stop_when  # asked after each evaluation whether the run may end there
        self.stopped_at: int | None = None  # env steps at which `stop_when` ended the run
        self.timed_out_at: int | None = None  # env steps at which `time_limit_s` ended the run
        self.started_at = time.monotonic()  # `time_limit_s` counts from here (the models are loaded)
        self.announce = announce  # where the run's one-line notices go
        self.in_flight: dict[Any, tuple[str, Any]] = {}
        self.issued_steps = counters.env_steps  # collected + in flight
        self.sync_stats: dict[str, float] = {}
        self.inference_tally = InferenceTally(counters)
        self.max_lag = 0
        self.latest_eval: dict[str, float] = {}
        self.latest_eval_updates = -1  # the learner updates the latest evaluation's weights had
        self.weights_nbytes = resolve(parts.learners[0].call(LearnerService.weights_nbytes))
        self.idle_workers = list(range(len(parts.workers)))
        if len(counters.plan_sent) != len(parts.workers):  # a fresh run, or a new worker count
            counters.plan_sent = [-1] * len(parts.workers)
        self.bar = tqdm(
            total=cfg.total_env_steps,
            initial=min(counters.env_steps, cfg.total_env_steps),
            disable=not cfg.progress,
            desc=f"{cfg.algo} ({cfg.runner})",
            unit="step",
            **bar_interval(),
        )
        self._clock = time.perf_counter()
        self.schedule = make_schedule(self)
        self.health = RunHealth(cfg, counters, self.schedule.on_policy, announce, logger.log)
        # the progress line's `held=`: the held-out evaluation in the first mode, when the run has one
        held_out = cfg.env.held_out.goals if cfg.eval_held_out and cfg.env.has_held_out else None
        self.held_out_headline_key = f"eval/{held_out}/{cfg.eval_modes[0]}/{OVERALL}" if held_out else ""

    # ------------------------------------------------------------------ main loop

    def run(self) -> dict[str, float]:
        self.publish(wait=True)  # inference must hold the learner's weights before acting
        while True:
            self._tick()
            if self.eval_due() and self.schedule.may_evaluate(self):
                self.evaluate()
                if self.stop_accepted():
                    self._stop_early()
                    break
            if self.checkpoint_due() and self.schedule.may_checkpoint(self):
                self.checkpoint()
            if self.schedule.done(self):
                break
            # On-policy runs stop between rollouts only: a part-collected rollout cannot be
            # checkpointed (its segments would be trained on twice or lost), so the current one is
            # finished and trained on first.
            if self.time_limit_reached() and (not self.schedule.on_policy or self.schedule.may_checkpoint(self)):
                self._stop_at_time_limit()
                break
            self.schedule.issue(self)
            if not self.in_flight:
                raise RuntimeError("pipeline stalled: nothing in flight and nothing to issue (a scheduling bug)")
            finished, _ = wait_any(list(self.in_flight))
            for future in finished:
                self._finish(future)
        self._tick()
        # The final evaluation is of the weights the final checkpoint holds: after the updates still
        # owed at the budget (or in flight at a time limit), so that `sacglam evaluate --run` and an
        # export reproduce it. (A run stopped early by `stop_when` returns the evaluation accepted.)
        evaluated = (self.latest_eval.get("env_steps"), self.latest_eval_updates) == (self.c.env_steps, self.c.updates)
        if self.stopped_at is None and self.cfg.eval_episodes and not evaluated:
            self.evaluate()
        self.log()
        self.c.finished = self.stopped_at is None and self.timed_out_at is None  # `--resume` refuses it then
        self.checkpoint()
        self.bar.close()
        return {k: v for k, v in self.latest_eval.items() if k != "env_steps"}

    def stop_accepted(self) -> bool:
        """Whether `stop_when` accepts the evaluation just made. It is asked only before the
        budget: at the budget the run ends as usual (with the updates still owed)."""
        if self.stop_when is None or self.c.env_steps >= self.cfg.total_env_steps:
            return False
        return self.stop_when(dict(self.latest_eval))

    def _stop_early(self) -> None:
        """End the run after the evaluation `stop_when` accepted: the calls in flight finish (their
        steps are counted, not evaluated again), then the run ends as at its budget, with a final
        checkpoint (`--resume` takes it on to the budget)."""
        self.stopped_at = self.c.env_steps
        self._drain()
        self.logger.log(self.c.env_steps, {"run/stopped_early_at": self.stopped_at})
        self.announce(f"stopped at {self.stopped_at} of {self.cfg.total_env_steps} env steps: the stop condition held")

    def time_limit_reached(self) -> bool:
        limit = self.cfg.time_limit_s
        return limit is not None and time.monotonic() - self.started_at >= limit

    def _stop_at_time_limit(self) -> None:
        """End the run at `time_limit_s` (an on-policy run at the end of the rollout it is in):
        nothing new is issued, the calls in flight finish, then the run ends as at its budget
        (final evaluation at the steps counted, checkpoint), and `--resume` takes it on."""
        self._drain()
        self.timed_out_at = self.c.env_steps
        self.logger.log(self.c.env_steps, {"run/time_limit_at": self.timed_out_at})
        self.announce(
            f"time limit ({self.cfg.time_limit_s:g} s) reached at {self.timed_out_at} of "
            f"{self.cfg.total_env_steps} env steps: evaluating and checkpointing; --resume continues"
        )

    def _drain(self) -> None:
        """Wait for every call in flight and take in its results."""
        while self.in_flight:
            finished, _ = wait_any(list(self.in_flight))
            for future in finished:
                self._finish(future)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.c.train_seconds += now - self._clock
        self._clock = now

    def _pause(self) -> None:
        """Time from here to the next `_tick` is not training time."""
        self._tick()

    def _resume_clock(self) -> None:
        self._clock = time.perf_counter()

    def training(self) -> bool:
        return any(kind == "train" for kind, _ in self.in_flight.values())

    def eval_due(self) -> bool:
        """An evaluation before the budget (the one at the budget comes after the last update)."""
        return (
            bool(self.cfg.eval_episodes)
            and self.c.env_steps >= self.c.next_eval
            and self.c.env_steps < self.cfg.total_env_steps
        )

    def checkpoint_due(self) -> bool:
        every = self.cfg.pipeline.checkpoint_every
        return bool(every) and self.c.env_steps >= self.c.next_checkpoint

    # ------------------------------------------------------------------ issuing (the schedule's calls)

    def train(self, units: int) -> None:
        """Ask every learner for `units` of training (SAC: gradient steps; PPO: rollouts)."""
        futures = [learner.call(LearnerService.train, units) for learner in self.parts.learners]
        self.in_flight[futures[0]] = ("train", (futures, units))

    def collect(self, vector_steps: int, explore: bool, worker: int | None = None, cut: bool = False) -> None:
        """Ask an idle rollout worker (`worker`, or the first idle one) for `vector_steps` steps of
        each of its environments; `cut` ends its open episodes' segments after them."""
        index = self.idle_workers.pop(0 if worker is None else self.idle_workers.index(worker))
        plan = None  # the worker keeps the plan it has
        if self.parts.goal_sampler is not None and self.c.plan_sent[index] != self.c.plan_version:
            plan = self.parts.goal_sampler.call(GoalSamplerService.plan)  # a future: Ray passes it on
            self.c.plan_sent[index] = self.c.plan_version
        future = self.parts.workers[index].call(RolloutService.collect, vector_steps, explore, cut, plan)
        self.in_flight[future] = ("collect", (index, explore))
        self.issued_steps += vector_steps * (self.cfg.num_envs // self.cfg.pipeline.rollout_workers)

    # ------------------------------------------------------------------ results

    def _finish(self, future: Any) -> None:
        kind, info = self.in_flight.pop(future)
        if kind == "collect":
            self._collected(resolve(future), *info)
        elif kind == "train":
            futures, units = info
            results = resolve_all(futures)
            self.c.train_metrics = mean_over_learners(results)
            self.schedule.trained(self, units)
        elif kind == "sync":
            resolve(future)
            self._synced(*info)
        elif kind == "goals":
            self._goal_sampler_observed(*resolve(future))
        elif kind == "goal features":
            resolve(future)

    def _collected(self, result: ChunkReport, worker: int, explore: bool) -> None:
        c = self.c
        self.idle_workers.append(worker)
        c.env_steps += result.env_steps
        c.episodes += result.episodes
        c.successes += result.successes
        c.learning_signals += result.rewarded_steps + (len(result.reported_goals) if self.cfg.sac.her else 0)
        c.reported_goals += len(result.reported_goals)
        c.recent.append((result.episodes, result.successes))
        while sum(e for e, _ in c.recent[1:]) >= 200:  # success over about the last 200 episodes
            c.recent.pop(0)
        advance(self.bar, result.env_steps)
        if self.parts.dashboard is not None:
            self.parts.dashboard.count(result.env_steps, result.episodes)
        if self.parts.goal_sampler is not None:
            self._teach_goal_sampler(result)
        if not explore and result.policy_version < 0 <= c.published:
            self.schedule.weights_lost(self)  # a restarted inference actor came back without weights
        kept = self.schedule.collected(self, result)
        if not explore and kept:
            self.max_lag = max(self.max_lag, c.updates - result.policy_version)
        self.health.collected(result)
        # at the budget, the run's final record (after the updates still owed) is the one logged;
        # an on-policy run's discarded steps do not count towards it (its schedule goes on)
        if c.next_log <= c.env_steps and c.env_steps - c.discarded_env_steps < self.cfg.total_env_steps:
            self.log()
            c.next_log += self.cfg.log_every
        if self.on_chunk is not None:
            self.on_chunk(self)

    def _teach_goal_sampler(self, result: ChunkReport) -> None:
        """The chunk's partner reports and episode outcomes to the goal sampler (not waited for:
        Ray runs one caller's calls to an actor in order)."""
        assert self.parts.goal_sampler is not None
        future = self.parts.goal_sampler.call(GoalSamplerService.observe, result.reported_goals, result.goal_outcomes)
        self.in_flight[future] = ("goals", None)

    def _goal_sampler_observed(self, wanted: list[str], plan_version: int) -> None:
        """The sampler's plan version, and the features of goals it discovered (generalising
        mode) from the first inference actor straight to it."""
        assert self.parts.goal_sampler is not None
        self.c.plan_version = plan_version
        if wanted:
            features = self.parts.inference[0].call(InferenceServer.goal_features, wanted)
            future = self.parts.goal_sampler.call(GoalSamplerService.add_features, wanted, features)
            self.in_flight[future] = ("goal features", None)

    # ------------------------------------------------------------------ weights, evaluation, logs, checkpoints

    def publish(self, wait: bool = False) -> None:
        """Rank 0's trainable state, once into the object store, to every inference actor."""
        version = self.c.updates
        weights = self.parts.learners[0].call(LearnerService.weights)
        started = time.perf_counter()
        futures = [inference.call(InferenceServer.set_weights, version, weights) for inference in self.parts.inference]
        self.c.published = version
        if wait or all(isinstance(f, LocalFuture) for f in futures):  # local calls have already run
            resolve_all(futures)
            self._synced(started, version)
        else:
            for f in futures:
                self.in_flight[f] = ("sync", (started, version))

    def _synced(self, started: float, version: int) -> None:
        self.sync_stats = {
            "sync/seconds": time.perf_counter() - started,
            "sync/bytes": self.weights_nbytes,
            "sync/version": version,
        }

    def evaluate(self) -> None:
        """Rank 0 runs the evaluation part by part; a per-episode bar shows its progress."""
        self._pause()
        parts = training_evaluation(self.cfg)
        rank0 = self.parts.learners[0]

        self.health.evaluating()

        def run_part(part: EvaluationPart) -> list[EpisodeResult]:
            results: list[EpisodeResult] = resolve(rank0.call(LearnerService.evaluate_part, part))
            self.health.evaluated(part.env.goals == self.cfg.env.goals, results)
            return results

        with evaluation_bar(parts, self.cfg.progress) as bar:
            results = run_evaluation(parts, run_part, bar)
        self.latest_eval = results | {"env_steps": self.c.env_steps}
        self.latest_eval_updates = self.c.updates
        weights = {"run/updates_evaluated": int(self.c.train_metrics.get("learner/updates", 0))}
        self.logger.log(self.c.env_steps, results | weights | {"time/train_seconds": self.c.train_seconds})
        if self.parts.dashboard is not None:
            self.parts.dashboard.record(results)
        while self.c.next_eval <= self.c.env_steps:
            self.c.next_eval += self.cfg.eval_every
        self.bar.set_postfix(self._headline())
        self._resume_clock()

    def _headline(self) -> dict[str, str]:
        out = {}
        key = f"eval/{self.cfg.env.goals}/{self.cfg.eval_modes[0]}/{OVERALL}"
        if key in self.latest_eval:
            out["eval"] = f"{self.latest_eval[key]:.2f}"
        if self.held_out_headline_key in self.latest_eval:
            out["held"] = f"{self.latest_eval[self.held_out_headline_key]:.2f}"
        episodes = sum(e for e, _ in self.c.recent)
        out["train"] = f"{sum(s for _, s in self.c.recent) / max(episodes, 1):.2f}"
        if "alpha" in self.c.train_metrics:
            out["alpha"] = f"{self.c.train_metrics['alpha']:.3g}"
        if "entropy" in self.c.train_metrics:
            out["H"] = f"{self.c.train_metrics['entropy']:.2f}"
        out["lag"] = str(self.max_lag)
        if self.c.no_signal_at is not None and not self.c.learning_signals:
            out["signal"] = "none"
        return out

    def log(self) -> None:
        c = self.c
        episodes = sum(e for e, _ in c.recent)
        stats = resolve(self.parts.storage.call(ExperienceStore.stats))
        stats |= self._inference_stats()
        if self.parts.goal_sampler is not None:
            stats |= resolve(self.parts.goal_sampler.call(GoalSamplerService.stats))
        record = (
            self.c.train_metrics
            | stats
            | self.sync_stats
            | {
                "train/success": sum(s for _, s in c.recent) / max(episodes, 1),
                "train/episodes": c.episodes,  # cumulative: success over any window is a difference
                "train/successes": c.successes,
                "learner/gradient_steps": int(self.c.train_metrics.get("learner/updates", 0)),
                "inference/policy_lag_max": self.max_lag,
                "time/train_seconds": c.train_seconds,
                "time/env_steps_per_s": c.env_steps / max(c.train_seconds, 1e-9),
                "time/updates_per_s": c.updates / max(c.train_seconds, 1e-9),
            }
        )
        if self.schedule.on_policy:
            record["rollout/discarded_env_steps"] = c.discarded_env_steps
        self.logger.log(c.env_steps, record)
        if self.parts.dashboard is not None:
            self.parts.dashboard.record(record)
        self.bar.set_postfix(self._headline())
        self.max_lag = 0

    def _inference_stats(self) -> dict[str, float]:
        """The first inference actor's counters, counted from the start of the run."""
        for inference in self.parts.inference[:1]:
            life, stats = resolve(inference.call(InferenceServer.life_and_stats))
            return self.inference_tally.whole_run(stats, life)
        return {}

    def checkpoint(self) -> StoragePath:
        """Everything a resumed run needs; collection and learning are idle here."""
        self._pause()
        c = self.c
        tmp = self.store.begin(c.env_steps)
        workers = resolve_all(
            [w.call(RolloutService.get_state) for w in self.parts.workers]
        )  # also flushes their hand-overs
        saving = self.parts.storage.call(ExperienceStore.save, tmp)  # each part written where it runs
        if self.parts.goal_sampler is not None:
            resolve(self.parts.goal_sampler.call(GoalSamplerService.save, tmp))
        write_torch(tmp / "learner.pt", resolve(self.parts.learners[0].call(LearnerService.state_dict)))
        (tmp / "workers.pkl").write_bytes(pickle.dumps(workers))
        self._inference_stats()  # the counts up to this checkpoint
        (tmp / "driver.json").write_text(json.dumps(asdict(c) | {"inference_before": self.inference_tally.saved()}))
        resolve(saving)
        while c.next_checkpoint <= c.env_steps:
            c.next_checkpoint += self.cfg.pipeline.checkpoint_every or self.cfg.total_env_steps
        # Metrics reach the run's storage before the checkpoint is sealed: a resume from it finds
        # every record up to it (those past it are dropped).
        self.logger.sync()
        final = self.store.commit(tmp, c.env_steps)
        # Inference continues from exactly the learner's weights, as a run resumed here does.
        self.publish(wait=True)
        self._resume_clock()
        return final


def restore(parts: Components, checkpoint: StoragePath) -> Counters:
    """Load a checkpoint into freshly built components (the replay actor restored itself)."""
    state = read_torch(checkpoint / "learner.pt")
    resolve_all([learner.call(LearnerService.load_state_dict, state) for learner in parts.learners])
    workers = pickle.loads((checkpoint / "workers.pkl").read_bytes())
    if len(workers) == len(parts.workers):
        resolve_all([w.call(RolloutService.set_state, s) for w, s in zip(parts.workers, workers)])
    else:  # a different worker count: the environments start fresh episodes
        print(
            f"note: the checkpoint has {len(workers)} rollout workers, this run {len(parts.workers)}: "
            "open episodes are dropped and environments reset"
        )
    return counters_from_json(json.loads((checkpoint / "driver.json").read_text()))
