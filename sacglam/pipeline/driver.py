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
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, EvaluationPart, evaluation_bar, run_evaluation, training_evaluation
from sacglam.goal_sampler.service import GoalSamplerService
from sacglam.inference.server import InferenceServer
from sacglam.learner.service import LearnerService
from sacglam.pipeline.components import Components
from sacglam.pipeline.metrics import MetricsLogger
from sacglam.pipeline.schedules import make_schedule
from sacglam.progress import advance, bar_interval
from sacglam.report import NO_SIGNAL_EPISODES, NO_SIGNAL_SHARE
from sacglam.rollout_workers.service import RolloutService
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.handles import ExperienceStore, LocalFuture, resolve, resolve_all, wait_any
from sacglam.runtime.storage import StoragePath, read_torch, write_torch
from sacglam.types import ChunkReport, EpisodeResult


@dataclass
class Counters:
    """The driver's progress: saved in every checkpoint, restored by `--resume`."""

    env_steps: int = 0
    episodes: int = 0  # training episodes finished
    successes: int = 0  # of which successful
    updates: int = 0  # learner updates finished
    learning_from: int | None = None  # env step at which updates started
    published: int = -1  # newest weights version sent to inference
    train_seconds: float = 0.0  # wall time outside evaluation and checkpoints
    next_eval: int = 0
    next_log: int = 0
    next_checkpoint: int = 0
    recent: list[tuple[int, int]] = field(default_factory=list)  # (episodes, successes) of recent chunks
    train_metrics: dict[str, float] = field(default_factory=dict)  # of the last training call (logged until the next)
    plan_version: int = 0  # the goal sampler's newest plan version the driver knows of
    plan_sent: list[int] = field(default_factory=list)  # per rollout worker: the plan version it was sent
    discarded_env_steps: int = 0  # collected with stale weights and dropped (on-policy schedule)
    learning_signals: int = 0  # rewarded steps collected, plus partner reports when relabeling uses them
    no_signal_at: int | None = None  # env step at which the run was found to have no learning signal yet
    reported_goals: int = 0  # goals the partner reported, summed over chunks (each chunk's distinct ones)
    no_report_at: int | None = None  # env step at which a relabeling run was found to have no report to relabel with
    held_out_reported_at: int | None = None  # env step at which a held-out goal was first reported in training
    finished: bool = False  # set in the final checkpoint of a run that reached its budget (not stopped before it)
    inference_before: dict[str, float] = field(default_factory=dict)  # inference counters of earlier actor lives


TRAIN_GOALS_KEPT = 100_000  # training episodes' goals kept for the held-out check (a bound on its memory)

# The first inference actor's cumulative counters: they live in the actor, which a resume builds
# afresh and Ray may restart, so the driver carries them across both (`InferenceTally`).
INFERENCE_COUNTERS = ("inference/forwards", "inference/states_scored", "inference/batches")


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
        # Filled by evaluation (which alone reads an environment's goal lists, so that nothing of
        # training depends on them: autotelic mode): the lists where the spec has them, and the
        # evaluations' episode goals; training episodes' goals join the train goals, up to a cap.
        self.held_out_goals: set[str] = set()
        self.train_goals: set[str] = set()
        self.goal_lists_read = False
        self.twin_shares_goals = False  # the two share a goal: the twin holds out something else
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
        # The held-out check (`_check_held_out_reports`) applies where the twin holds out goals and
        # reported goals train the agent (relabeling, or a goal sampler choosing among them).
        relabels = cfg.ppo.her if self.schedule.on_policy else cfg.sac.her
        uses_reports = relabels or cfg.goal_sampler.mode != "environment"
        self.watches_held_out = uses_reports and cfg.env.spec().holds_out_goals()
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
            self.c.train_metrics = {k: sum(r[k] for r in results) / len(results) for k in results[0]}
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
        if self.watches_held_out and self.held_out_goals and len(self.train_goals) < TRAIN_GOALS_KEPT:  # O(1)/episode
            self.train_goals.update(goal for goal, _ in result.goal_outcomes)
            self.twin_shares_goals = self.twin_shares_goals or any(
                goal in self.held_out_goals for goal, _ in result.goal_outcomes
            )
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
        self._check_learning_signal()
        self._check_hindsight_reports()
        self._check_held_out_reports(result.reported_goals)
        # at the budget, the run's final record (after the updates still owed) is the one logged;
        # an on-policy run's discarded steps do not count towards it (its schedule goes on)
        if c.next_log <= c.env_steps and c.env_steps - c.discarded_env_steps < self.cfg.total_env_steps:
            self.log()
            c.next_log += self.cfg.log_every
        if self.on_chunk is not None:
            self.on_chunk(self)

    def _check_learning_signal(self) -> None:
        """Once `NO_SIGNAL_SHARE` of an off-policy run's budget, and `NO_SIGNAL_EPISODES` episodes, are
        collected without a single rewarded step (nor, with hindsight relabeling, a goal the partner
        reported), say so once:
        a line now, `explore/no_signal_env_steps` in the metrics (the report shows it) and `signal:
        none` on the progress line until one arrives. Such a run has nothing to learn from."""
        c = self.c
        if self.schedule.on_policy or c.no_signal_at is not None or c.learning_signals:
            return
        if c.env_steps < NO_SIGNAL_SHARE * self.cfg.total_env_steps or c.episodes < NO_SIGNAL_EPISODES:
            return
        c.no_signal_at = c.env_steps
        relabel = " and no goal reported to relabel" if self.cfg.sac.her else ""
        self.announce(
            f"warning: {c.env_steps} env steps ({c.env_steps / self.cfg.total_env_steps:.0%} of the budget, {c.episodes} "
            "episodes) collected without a rewarded "
            f"step{relabel}: nothing to learn from yet; see what random play reaches with `sacglam evaluate "
            "--policies random --env.name ...`"
        )
        self.logger.log(c.env_steps, {"explore/no_signal_env_steps": c.env_steps})

    def _check_hindsight_reports(self) -> None:
        """A run that relabels (SAC-GLAM+HER, PPO-GLAM with `ppo.her`) once `NO_SIGNAL_SHARE` of its
        budget and `NO_SIGNAL_EPISODES` episodes are collected without a single goal reported in
        `info['achieved_goals']`: say once, in a line and in the metrics
        (`explore/no_report_env_steps`, which the report shows), that relabeling has had nothing to
        relabel with. An environment that never reports goals trains as if relabeling were off."""
        c = self.c
        relabels = self.cfg.sac.her if not self.schedule.on_policy else self.cfg.ppo.her
        if not relabels or c.no_report_at is not None or c.reported_goals:
            return
        if c.no_signal_at is not None and not c.learning_signals:
            return  # the no-signal line has said it: no rewarded step, and no goal reported to relabel
        if c.env_steps < NO_SIGNAL_SHARE * self.cfg.total_env_steps or c.episodes < NO_SIGNAL_EPISODES:
            return
        c.no_report_at = c.env_steps
        self.announce(
            f"warning: {self.cfg.algo} relabels episodes with the goals the environment reports achieved "
            f"(info['achieved_goals']), and none was reported in {c.env_steps} env steps ({c.episodes} episodes): "
            "hindsight relabeling has relabeled nothing; an environment that never reports them trains as without "
            "relabeling (docs/reference/environment-protocol.md)"
        )
        self.logger.log(c.env_steps, {"explore/no_report_env_steps": c.env_steps})

    def _check_held_out_reports(self, reported: tuple[str, ...]) -> None:
        """In a run that trains on reported goals (hindsight relabeling, or a goal sampler that
        chooses among them), the first time the partner reports, in training, a goal held out:
        one of the held-out goal set (its list where the spec has one, else the held-out
        evaluation's episode goals) that is not a train goal (the train list, the train
        evaluation's goals and the training episodes' goals); the check is off once the two sets
        share a goal (a twin that holds out maps, not goals). Said once, in a line and in the metrics
        (`explore/held_out_reported_env_steps`, which the report shows): the run trains on it,
        and the held-out figures no longer measure goals the agent never trained on."""
        c = self.c
        if not self.watches_held_out or c.held_out_reported_at is not None or not self.held_out_goals:
            return
        if self.twin_shares_goals:
            return  # the two goal sets have a goal in common: the twin holds out something else than goals
        leaked = next((g for g in reported if g in self.held_out_goals and g not in self.train_goals), None)
        if leaked is None:
            return
        c.held_out_reported_at = c.env_steps
        self.announce(
            f"warning: by env step {c.env_steps} the environment reported {leaked!r} in info['achieved_goals'] during "
            f"training, a goal of its held-out goal set ({self.cfg.env.held_out.goals}) and not of its train goals: "
            "held-out goals must never be reported, or the run trains on them (relabeled, or chosen by the goal "
            "sampler) and held-out success no longer measures goals never trained on (docs/reference/environment-protocol.md)"
        )
        self.logger.log(c.env_steps, {"explore/held_out_reported_env_steps": c.env_steps})

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

        if self.watches_held_out and not self.goal_lists_read:
            self.goal_lists_read = True
            spec = self.cfg.env.spec()
            twin = spec.held_out()
            if twin is not None:
                self.held_out_goals.update(twin.goals() or ())
                self.train_goals.update(spec.goals() or ())

        def run_part(part: EvaluationPart) -> list[EpisodeResult]:
            results: list[EpisodeResult] = resolve(rank0.call(LearnerService.evaluate_part, part))
            if self.watches_held_out:
                held_out = part.env.goals != self.cfg.env.goals
                (self.held_out_goals if held_out else self.train_goals).update(r.goal for r in results)
                smaller, larger = sorted((self.held_out_goals, self.train_goals), key=len)
                self.twin_shares_goals = any(goal in larger for goal in smaller)  # per evaluation, not per chunk
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


def counters_from_json(saved: dict[str, Any]) -> Counters:
    """A checkpoint's `driver.json` as `Counters`. One written before the learning-signal count
    (or the count of reported goals) existed: whether its run had a signal (a report) is unknown,
    so it counts as having had one (no warning of none on every such resume)."""
    saved = {"learning_signals": saved.get("successes", 0) or 1, "reported_goals": 1, **saved}
    counters = Counters(**saved)
    counters.recent = [(int(e), int(s)) for e, s in counters.recent]
    counters.finished = False  # a restored run is running again (to a larger budget): not finished until it ends
    return counters
