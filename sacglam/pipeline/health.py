"""A run's health warnings, beside the driver: what collection tells about whether the run can
learn, each said once, in a line, in the metrics (which the report shows) and in the counters
(so a resumed run does not say it again).

- no learning signal: an off-policy run that collected `NO_SIGNAL_SHARE` of its budget and
  `NO_SIGNAL_EPISODES` episodes without a rewarded step (nor, with relabeling, a reported goal);
- no reports to relabel with: a relabeling run whose environment reported no goal as long;
- a held-out goal reported in training: a run that trains on reported goals (relabeling, or a
  goal sampler choosing among them) saw the environment report a goal of its held-out set.

The held-out check needs the two goal sets, which only evaluation reads (nothing of training
depends on an environment's goal lists: autotelic mode): `evaluated` gives them, and training
episodes' goals join the train goals up to a cap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sacglam.config import TrainConfig
from sacglam.pipeline.counters import Counters
from sacglam.report import NO_SIGNAL_EPISODES, NO_SIGNAL_SHARE
from sacglam.types import ChunkReport, EpisodeResult

TRAIN_GOALS_KEPT = 100_000  # training episodes' goals kept for the held-out check (a bound on its memory)


class RunHealth:
    """`collected(result)` after each collection chunk (the counters already counted it),
    `evaluated(train_goals, results)` after each part of an evaluation. `announce` says a line,
    `log(env_steps, metrics)` records it."""

    def __init__(
        self,
        cfg: TrainConfig,
        counters: Counters,
        on_policy: bool,
        announce: Callable[[str], None],
        log: Callable[[int, dict[str, float]], None],
    ):
        self.cfg, self.c, self.on_policy, self.announce, self.log = cfg, counters, on_policy, announce, log
        self.relabels = cfg.ppo.her if on_policy else cfg.sac.her
        # The held-out check applies where the twin holds out goals and reported goals train the
        # agent (relabeling, or a goal sampler choosing among them).
        uses_reports = self.relabels or cfg.goal_sampler.mode != "environment"
        self.watches_held_out = uses_reports and cfg.env.spec().holds_out_goals()
        self.held_out_goals: set[str] = set()
        self.train_goals: set[str] = set()
        self.goal_lists_read = False
        self.twin_shares_goals = False  # the two share a goal: the twin holds out something else

    # ------------------------------------------------------------------ what the driver tells it

    def collected(self, result: ChunkReport) -> None:
        if self.watches_held_out and self.held_out_goals and len(self.train_goals) < TRAIN_GOALS_KEPT:  # O(1)/episode
            self.train_goals.update(goal for goal, _ in result.goal_outcomes)
            self.twin_shares_goals = self.twin_shares_goals or any(
                goal in self.held_out_goals for goal, _ in result.goal_outcomes
            )
        self._check_learning_signal()
        self._check_hindsight_reports()
        self._check_held_out_reports(result.reported_goals)

    def evaluating(self) -> None:
        """Before an evaluation: the environment's goal lists, the first time (where its spec has them)."""
        if not self.watches_held_out or self.goal_lists_read:
            return
        self.goal_lists_read = True
        spec = self.cfg.env.spec()
        twin = spec.held_out()
        if twin is not None:
            self.held_out_goals.update(twin.goals() or ())
            self.train_goals.update(spec.goals() or ())

    def evaluated(self, on_train_goals: bool, results: Iterable[EpisodeResult]) -> None:
        """A part of an evaluation ran: its episodes' goals join their goal set's."""
        if not self.watches_held_out:
            return
        (self.train_goals if on_train_goals else self.held_out_goals).update(r.goal for r in results)
        smaller, larger = sorted((self.held_out_goals, self.train_goals), key=len)
        self.twin_shares_goals = any(goal in larger for goal in smaller)  # per evaluation, not per chunk

    # ------------------------------------------------------------------ the checks

    def _enough_collected(self) -> bool:
        c = self.c
        return c.env_steps >= NO_SIGNAL_SHARE * self.cfg.total_env_steps and c.episodes >= NO_SIGNAL_EPISODES

    def _check_learning_signal(self) -> None:
        """Once `NO_SIGNAL_SHARE` of an off-policy run's budget, and `NO_SIGNAL_EPISODES` episodes, are
        collected without a single rewarded step (nor, with hindsight relabeling, a goal the partner
        reported), say so once:
        a line now, `explore/no_signal_env_steps` in the metrics (the report shows it) and `signal:
        none` on the progress line until one arrives. Such a run has nothing to learn from."""
        c = self.c
        if self.on_policy or c.no_signal_at is not None or c.learning_signals or not self._enough_collected():
            return
        c.no_signal_at = c.env_steps
        relabel = " and no goal reported to relabel" if self.cfg.sac.her else ""
        self.announce(
            f"warning: {c.env_steps} env steps ({c.env_steps / self.cfg.total_env_steps:.0%} of the budget, {c.episodes} "
            "episodes) collected without a rewarded "
            f"step{relabel}: nothing to learn from yet; see what random play reaches with `sacglam evaluate "
            "--policies random --env.name ...`"
        )
        self.log(c.env_steps, {"explore/no_signal_env_steps": c.env_steps})

    def _check_hindsight_reports(self) -> None:
        """A run that relabels (SAC-GLAM+HER, PPO-GLAM with `ppo.her`) once `NO_SIGNAL_SHARE` of its
        budget and `NO_SIGNAL_EPISODES` episodes are collected without a single goal reported in
        `info['achieved_goals']`: say once, in a line and in the metrics
        (`explore/no_report_env_steps`, which the report shows), that relabeling has had nothing to
        relabel with. An environment that never reports goals trains as if relabeling were off."""
        c = self.c
        if not self.relabels or c.no_report_at is not None or c.reported_goals:
            return
        if c.no_signal_at is not None and not c.learning_signals:
            return  # the no-signal line has said it: no rewarded step, and no goal reported to relabel
        if not self._enough_collected():
            return
        c.no_report_at = c.env_steps
        self.announce(
            f"warning: {self.cfg.algo} relabels episodes with the goals the environment reports achieved "
            f"(info['achieved_goals']), and none was reported in {c.env_steps} env steps ({c.episodes} episodes): "
            "hindsight relabeling has relabeled nothing; an environment that never reports them trains as without "
            "relabeling (docs/reference/environment-protocol.md)"
        )
        self.log(c.env_steps, {"explore/no_report_env_steps": c.env_steps})

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
        self.log(c.env_steps, {"explore/held_out_reported_env_steps": c.env_steps})
