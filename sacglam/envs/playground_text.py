"""`PlaygroundText`: the gymnasium environment of the paper, as fixed by `docs/reference/playground-text.md`.

Observations are the full prompt text (Goal line, four state lines, `Action:`); actions are
strings among `info["candidates"]`. `info["achieved_goals"]` is the social partner's list of train
goals first achieved at this step (the input of hindsight relabeling).
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.spaces import Text

from sacglam.envs.dynamics import (
    ACTION_GRASP,
    ACTION_RELEASE,
    NOTHING,
    CompiledGoal,
    grow_table,
    transition,
)
from sacglam.envs.goals import (
    GOAL_SETS,
    GROW,
    SEQUENTIAL_GOAL_SETS,
    goal_set_members,
    parse_goal,
)
from sacglam.envs.protocol import InvalidActionError
from sacglam.envs.scenes import parse_scene, sample_scene
from sacglam.envs.social_partner import SocialPartner
from sacglam.envs.vocabulary import COLORS, TYPES, SceneObject, object_name

GRASP_ACTION = "Grasp"
RELEASE_ACTION = "Release"
GO_TO_PREFIX = "Go to "
RESET_OPTIONS = ("goal", "scene")

_MAX_OBJECTS = len(COLORS) * len(TYPES)  # distinct (color, type) pairs
_TEXT_CHARSET = frozenset(string.ascii_letters + " _:,\n")


class PlaygroundState(NamedTuple):
    """A read-only snapshot of an episode, for inspection and tests (not for the agent)."""

    goal: str
    scene: tuple[str, ...]
    on: str | None
    holding: str | None
    grown: tuple[str, ...]  # scene order
    steps: int
    goal_stage: int  # goal parts achieved so far, in order


def min_objects(goals: str) -> int:
    """The smallest scene that fits every goal of the set (spec: 4 for sequential sets, 2 otherwise)."""
    return 4 if goals in SEQUENTIAL_GOAL_SETS else 2


def validate_env_args(n_objects: int, goals: str, max_steps: int) -> None:
    """Raise a ValueError/TypeError that names the wrong argument and how to fix it."""
    if goals not in GOAL_SETS:
        raise ValueError(f"goals={goals!r} is not a goal set; choose one of {', '.join(map(repr, GOAL_SETS))}")
    if not isinstance(n_objects, int) or isinstance(n_objects, bool):
        raise TypeError(f"n_objects must be an int, got {n_objects!r}")
    low = min_objects(goals)
    if n_objects < low:
        raise ValueError(
            f"n_objects={n_objects} is too small for goals={goals!r}: a goal of this set can need "
            f"{low} objects (its targets and their supplies); use n_objects >= {low}"
        )
    if n_objects > _MAX_OBJECTS:
        raise ValueError(
            f"n_objects={n_objects} exceeds the {_MAX_OBJECTS} distinct objects; use n_objects <= {_MAX_OBJECTS}"
        )
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")


class PlaygroundText(gym.Env[str, str]):
    """Playground-Text (paper appendix A; rules in `docs/reference/playground-text.md`).

    Args:
        n_objects: objects per scene (default 6; the simplified variant uses 3).
        goals: the goal set episodes draw from: "train", "test", "simple-train" or "simple-test".
        max_steps: steps before truncation (default 30; the simplified variant uses 8).

    `reset(seed=None, options=None)` returns `(obs, info)`; options may hold `"goal"` (a goal of
    the chosen set) and `"scene"` (a list of n_objects distinct `"<color> <type>"` strings; the goal
    need not be feasible in it). `info` holds `candidates`, `goal`, `achieved_goals` (empty) and
    `scene`. `step(action)` returns `(obs, reward, terminated, truncated, info)` with reward 1.0 at
    the step the goal is achieved (the episode terminates there) and `info` holding `candidates`,
    `goal` and `achieved_goals` (the social partner's train goals first achieved at this step;
    single train goals only in the simplified variant, goals="simple-train" or "simple-test").
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, n_objects: int = 6, goals: str = "train", max_steps: int = 30, render_mode: str | None = None):
        validate_env_args(n_objects, goals, max_steps)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}: supported modes are {self.metadata['render_modes']}")
        self.n_objects = n_objects
        self.goals = goals
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.goal_set = GOAL_SETS[goals]
        self._goal_members = goal_set_members(goals)
        self.observation_space = Text(
            max_length=256 + 40 * n_objects, charset=_TEXT_CHARSET
        )  # 2 lists of <= 19 chars per object
        self.action_space = Text(max_length=64, charset=_TEXT_CHARSET)
        self._rng: random.Random | None = None
        self._partner = SocialPartner(sequential=goals in SEQUENTIAL_GOAL_SETS)
        self._running = False
        self._obs = ""  # last observation, for render()

    # ------------------------------------------------------------------ reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        goal_text, scene = self._parse_options(options)  # validate before touching any state
        super().reset(seed=seed)
        if seed is not None or self._rng is None:
            # A Python generator drawn from gymnasium's np_random: same seeding contract, faster
            # draws. Unseeded resets continue it.
            self._rng = random.Random(int(self.np_random.integers(2**63 - 1)))
        if goal_text is None:
            goal_text = self._rng.choice(self.goal_set)
        goal = parse_goal(goal_text)
        objects = scene if scene is not None else sample_scene(goal, self.n_objects, self._rng)
        self._start_episode(goal_text, goal, objects)
        info = {
            "candidates": self.candidates(),
            "goal": goal_text,
            "achieved_goals": [],
            "scene": list(self._names),
        }
        return self._observe(), info

    def _parse_options(self, options: dict[str, Any] | None) -> tuple[str | None, list[SceneObject] | None]:
        if options is None:
            return None, None
        if not isinstance(options, dict):
            raise TypeError(f"options must be a dict with keys among {RESET_OPTIONS}, got {options!r}")
        unknown = set(options) - set(RESET_OPTIONS)
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; supported: {list(RESET_OPTIONS)}")
        goal_text = options.get("goal")
        if goal_text is not None and goal_text not in self._goal_members:
            parse_goal(goal_text)  # raises for a string that is no goal at all
            other = "test" if goal_text in goal_set_members("test") else "train"
            raise ValueError(
                f"goal {goal_text!r} is not in this environment's goal set goals={self.goals!r} (it is a "
                f"{other} goal); build the environment with the goal set that holds it"
            )
        scene = options.get("scene")
        return goal_text, (parse_scene(scene, self.n_objects) if scene is not None else None)

    def _start_episode(self, goal_text: str, goal: tuple, objects: Sequence[SceneObject]) -> None:
        self._objects = tuple(objects)
        self._names = tuple(object_name(o) for o in self._objects)
        self._grows = grow_table(self._objects)
        self._goal_text = goal_text
        self._goal_line = f"Goal: {goal_text}\nYou see: "
        self._goal = CompiledGoal.compile(goal, self._objects)
        self._stage = 0
        self._on = NOTHING
        self._holding = NOTHING
        self._grown = [False] * len(self._objects)
        self._grown_text = "nothing"
        self._steps = 0
        self._action_codes = {GO_TO_PREFIX + name: j for j, name in enumerate(self._names)}
        self._action_codes[GRASP_ACTION] = ACTION_GRASP
        self._action_codes[RELEASE_ACTION] = ACTION_RELEASE
        self._candidates_by_holding: dict[int, tuple[str, ...]] = {}
        self._seen_by_holding: dict[int, str] = {}
        self._partner.reset(self._objects)
        self._running = True

    # ------------------------------------------------------------------ step

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._running:
            raise ResetNeeded(
                "step() called before reset() or after the episode ended (terminated or truncated); call reset() first"
            )
        code = self._action_code(action)
        if code is None:
            raise InvalidActionError(f"action {action!r} is not one of this step's candidates {self.candidates()}")
        self._on, self._holding, event = transition(self._grows, self._on, self._holding, code)
        self._steps += 1
        if event is not None and event[0] == GROW and not self._grown[event[1]]:
            self._grown[event[1]] = True
            self._grown_text = ", ".join(n for n, g in zip(self._names, self._grown) if g)
        self._stage = self._goal.advance(self._stage, event)
        terminated = self._stage == self._goal.n_parts
        truncated = not terminated and self._steps >= self.max_steps
        self._running = not (terminated or truncated)
        info = {
            "candidates": self.candidates(),
            "goal": self._goal_text,
            "achieved_goals": self._partner.describe(event),
        }
        return self._observe(), 1.0 if terminated else 0.0, terminated, truncated, info

    # ------------------------------------------------------------------ views

    def _action_code(self, action: str) -> int | None:
        """The action's code, or None when it is not a candidate of the current step."""
        code = self._action_codes.get(action) if isinstance(action, str) else None
        if code is not None and code >= 0 and code == self._holding:
            return None  # `Go to` the held object is no candidate
        return code

    def is_candidate(self, action: str) -> bool:
        """True when `action` can be passed to `step` now."""
        return self._running and self._action_code(action) is not None

    def _candidate_tuple(self) -> tuple[str, ...]:
        holding = self._holding
        cached = self._candidates_by_holding.get(holding)
        if cached is None:
            cached = tuple(GO_TO_PREFIX + n for j, n in enumerate(self._names) if j != holding)
            cached += (GRASP_ACTION, RELEASE_ACTION)
            self._candidates_by_holding[holding] = cached
        return cached

    def candidates(self) -> list[str]:
        """The current step's candidate actions, in the spec's order (a new list)."""
        return list(self._candidate_tuple())

    def _observe(self) -> str:
        holding = self._holding
        seen = self._seen_by_holding.get(holding)
        if seen is None:
            seen = ", ".join(n for j, n in enumerate(self._names) if j != holding)
            self._seen_by_holding[holding] = seen
        on = self._names[self._on] if self._on != NOTHING else "nothing"
        held = self._names[holding] if holding != NOTHING else "nothing"
        self._obs = (
            f"{self._goal_line}{seen}\nYou are on: {on}\nYou are holding: {held}\n"
            f"You have grown: {self._grown_text}\nAction:"
        )
        return self._obs

    def render(self) -> str | None:
        return self._obs if self.render_mode == "ansi" else None

    @property
    def state(self) -> PlaygroundState:
        """The current episode's state (raises ResetNeeded before the first reset)."""
        if not hasattr(self, "_objects"):
            raise ResetNeeded("no episode yet: call reset() first")
        name = lambda j: self._names[j] if j != NOTHING else None  # noqa: E731
        return PlaygroundState(
            goal=self._goal_text,
            scene=self._names,
            on=name(self._on),
            holding=name(self._holding),
            grown=tuple(n for n, g in zip(self._names, self._grown) if g),
            steps=self._steps,
            goal_stage=self._stage,
        )
