"""`GoalSampler`: which goal the agent pursues next, by learning progress over the goals it knows.

It knows only what the social partner has reported (the goals the agent's steps achieved) and
the outcomes of the agent's own episodes; it never reads the environment's goal list. Its
distribution over the N discovered goals is

    p(g) = epsilon / N + (1 - epsilon) * LP(g) / sum_g' LP(g')        (uniform when every LP is 0)

with LP the absolute learning progress (per-goal outcome windows, `progress`; or the competence
head's change over a horizon, `estimator`), and an optimistic LP for goals without an estimate
yet. Rollout workers draw from it through a `GoalPlan` (an alias table, O(1) per draw), which is
rebuilt, in O(N), only once the outcomes and discoveries since the last build reach
`refresh * N`: O(1) amortised per outcome. Each build has a version, so the pipeline sends a
worker the plan only when the worker's copy is older.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from sacglam.config import GoalSamplerConfig
from sacglam.goal_sampler.alias import alias_table
from sacglam.goal_sampler.estimator import CompetenceEstimator
from sacglam.goal_sampler.progress import OutcomeWindows
from sacglam.types import GoalPlan


class GoalSampler:
    """`goal_type(goal)` names a goal's category (metrics only); `seed` seeds the estimator."""

    def __init__(self, config: GoalSamplerConfig, seed: int, goal_type: Callable[[str], str] = lambda _: "all"):
        if config.mode == "environment":
            raise ValueError("GoalSampler is for goal_sampler.mode 'progress' or 'generalising'")
        self.config, self.seed, self.goal_type = config, seed, goal_type
        self.goals: list[str] = []  # discovered, in discovery order
        self._known: set[str] = set()
        self.windows = OutcomeWindows(config.window)
        self.estimator: CompetenceEstimator | None = None  # generalising: built when the first features arrive
        self._featureless: dict[str, None] = {}  # generalising: discovered goals still without features
        self._waiting: list[tuple[str, bool]] = []  # generalising: their outcomes, until the features come
        self._events = 0  # outcomes and discoveries since the plan was built
        self._plan = GoalPlan(environment_share=config.environment_share)
        self._progress = np.zeros(0)  # LP of the goals the plan was built from (its probabilities follow)
        self.outcomes = 0

    # ------------------------------------------------------------------ what the agent did

    def observe(self, reported: Sequence[str], outcomes: Sequence[tuple[str, bool]]) -> tuple[list[str], int]:
        """Learn the goals the partner `reported` and the (goal, success) `outcomes` of finished
        episodes (an outcome of a goal not yet discovered is ignored: the sampler never learns a
        goal from anything but the partner), and rebuild the plan when due. Returns the
        discovered goals the estimator still needs features for (generalising mode; []
        otherwise) and the plan's version."""
        generalising = self.config.mode == "generalising"
        for goal in reported:
            if goal not in self._known:
                self._known.add(goal)
                self.goals.append(goal)
                self._events += 1
                if generalising:
                    self._featureless[goal] = None
        own = [(g, bool(s)) for g, s in outcomes if g in self._known]
        for goal, success in own:
            self.windows.add(goal, success)
        self._events += len(own)
        self.outcomes += len(own)
        if generalising:
            self._teach_estimator(own)
        if self.goals and self._events >= max(1, math.ceil(self.config.refresh * len(self.goals))):
            self._build()
        return list(self._featureless), self._plan.version

    def add_features(self, goals: Sequence[str], features: np.ndarray) -> None:
        """The LLM's features (len(goals), d) of goals `observe` asked for (generalising mode);
        the outcomes of those goals that arrived before them are trained on now."""
        if self.estimator is None:
            c = self.config
            self.estimator = CompetenceEstimator(
                features.shape[1],
                c.estimator_hidden,
                c.estimator_lr,
                c.estimator_horizon,
                c.estimator_memory,
                self.seed,
            )
        self.estimator.add_features(list(goals), features)
        for goal in goals:
            self._featureless.pop(goal, None)
        waiting, self._waiting = self._waiting, []
        self._teach_estimator(waiting)

    def _teach_estimator(self, outcomes: list[tuple[str, bool]]) -> None:
        """Outcomes of goals with features to the estimator; the others wait for their features
        (at most `estimator_memory` of them: older ones would have left its memory anyway)."""
        estimator = self.estimator
        ready = [o for o in outcomes if estimator is not None and estimator.knows(o[0])]
        later = [o for o in outcomes if estimator is None or not estimator.knows(o[0])]
        if estimator is not None and ready:
            estimator.observe(ready)
        self._waiting = (self._waiting + later)[-self.config.estimator_memory :]

    # ------------------------------------------------------------------ what the agent does next

    def plan(self) -> GoalPlan:
        """The distribution rollout workers draw from (`observe` rebuilds it when due)."""
        return self._plan

    def progress(self) -> np.ndarray:
        """(N,) learning progress of the discovered goals, optimistic where there is no estimate."""
        optimistic = self.config.optimistic_progress
        if self.config.mode == "progress":
            values = [self.windows.progress(g) for g in self.goals]
            return np.array([optimistic if v is None else v for v in values], dtype=np.float64)
        out = np.full(len(self.goals), optimistic)
        if self.estimator is not None:
            index = [i for i, g in enumerate(self.goals) if self.estimator.knows(g)]
            predicted = self.estimator.progress([self.goals[i] for i in index]) if index else None
            if predicted is not None:
                out[index] = predicted
        return out

    def _probabilities(self, progress: np.ndarray) -> np.ndarray:
        """(N,) the distribution over the discovered goals for learning progress `progress` (N,)."""
        n, total, eps = len(progress), progress.sum(), self.config.epsilon
        focus = progress / total if total > 0 else np.full(n, 1.0 / n)
        return eps / n + (1 - eps) * focus

    def _build(self) -> None:
        self._progress = self.progress()
        accept, alias = alias_table(self._probabilities(self._progress).tolist())
        version = self._plan.version + 1
        self._plan = GoalPlan(tuple(self.goals), accept, alias, self.config.environment_share, version)
        self._events = 0

    # ------------------------------------------------------------------ metrics and state

    def stats(self) -> dict[str, float]:
        """Discovered and mastered goals (overall and per goal type), the mean learning progress
        and each type's share of the sampler's choices in the current distribution."""
        c = self.config
        mastered = [self.windows.count(g) >= c.window and self.windows.competence(g) >= c.mastered for g in self.goals]
        out: dict[str, float] = {
            "goals/discovered": len(self.goals),
            "goals/mastered": sum(mastered),
            "goals/mean_progress": float(self._progress.mean()) if len(self._progress) else 0.0,
            "goals/outcomes": self.outcomes,
        }
        probabilities = self._probabilities(self._progress) if len(self._progress) else np.zeros(0)
        planned = len(probabilities)
        for i, goal in enumerate(self.goals):
            kind = self.goal_type(goal)
            out[f"goals/discovered/{kind}"] = out.get(f"goals/discovered/{kind}", 0) + 1
            out[f"goals/mastered/{kind}"] = out.get(f"goals/mastered/{kind}", 0) + int(mastered[i])
            if i < planned:
                share = float(probabilities[i]) * (1 - c.environment_share)
                out[f"goals/share/{kind}"] = out.get(f"goals/share/{kind}", 0.0) + share
        return out

    def state_dict(self) -> dict:
        return {
            "goals": list(self.goals),
            "windows": self.windows.state_dict(),
            # The whole estimator (head, Adam, snapshots, memory, generator): a copy resumes exactly.
            "estimator": copy.deepcopy(self.estimator),
            "featureless": list(self._featureless),
            "waiting": list(self._waiting),
            "events": self._events,
            "plan": self._plan,
            "progress": self._progress.copy(),
            "outcomes": self.outcomes,
        }

    def load_state_dict(self, state: dict) -> None:
        self.goals = list(state["goals"])
        self._known = set(self.goals)
        self.windows = OutcomeWindows.from_state_dict(state["windows"])
        self.estimator = copy.deepcopy(state["estimator"])
        self._featureless = dict.fromkeys(state["featureless"])
        self._waiting = list(state["waiting"])
        self._events = state["events"]
        self._plan = state["plan"]
        self._progress = state["progress"].copy()
        self.outcomes = state["outcomes"]
