"""`ProtocolGuard`: an environment written elsewhere, checked at every call a run makes to it.

Spec: `docs/reference/environment-protocol.md`, "The protocol". `check_environment` checks an environment when its
author asks; a run meets the environment in the warm start's random play, the collection of its
words, every rollout and every evaluation, in this process or in a Ray worker. Wrapped in this
guard, each `reset` and `step` is checked against the same rules (`sacglam.envs.protocol`) as it
happens, with no extra call to the environment:
- the values' types: a reward that is a number, flags that are bools (a string `"False"` or an
  int would otherwise be read as a truth value, silently), an `info` with the candidates, an
  observation with the goal line of its goal;
- the hindsight rules a run can see: the episode's own goal reported achieved only on a rewarded,
  terminated step; a goal reported again in the same episode is dropped (its first report is the
  one hindsight uses), with a warning, once per process; a reward other than 0 or 1 from an
  environment that reports goals (relabeled transitions are rewarded 1 and 0), with a warning;
- a failure inside the environment's own code on a candidate it offered, reported with where in
  that code it happened.
Any breach raises `EnvironmentProtocolError`: one line naming the environment, the episode and
step, and the rule, instead of a traceback from deep inside the run. Rewards come back as float
and flags as bool. The cost is a few type checks per step.
"""

from __future__ import annotations

import os
import traceback
import warnings
from typing import Any, NoReturn

import gymnasium

from sacglam.envs.protocol import (
    CHECKER_HINT,
    EnvironmentProtocolError,
    info_problems,
    observation_problems,
    reward_scale_warning,
    step_arity_problem,
    step_value_problems,
)
from sacglam.errors import SacglamWarning, UserInputError

_WARNED_OF_REPEATS: set[str] = set()  # the environment classes whose repeated reports this process warned of
_WARNED_OF_REWARDS: set[str] = set()  # ... and those whose rewards other than 0 and 1 it warned of


class ProtocolGuard(gymnasium.Wrapper):
    """`env` with every `reset` and `step` checked against the protocol (module docstring).
    `unwrapped` is still the environment itself (its `expert_action`, `vocabulary`, ...)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._name = type(env.unwrapped).__name__
        self._episode = -1  # episodes reset so far, minus one: the current episode's index
        self._t = 0  # steps taken in the current episode
        self._goal: str | None = None
        self._goal_conditioned = False
        self._candidates: tuple[str, ...] = ()
        self._reported: dict[str, int] = {}  # goal -> the step of this episode that reported it achieved

    def __getattr__(self, name: str) -> Any:
        """The environment's own public attributes (`goals`, `vocabulary`, ...) read through the
        guard as on the environment itself (gymnasium's wrappers no longer forward them): code
        that reads them should not see the guard."""
        env = self.__dict__.get("env")  # absent while unpickling: no recursion through here
        if env is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(env, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        where = "reset" if self._episode < 0 else f"reset of episode {self._episode + 1}"
        try:
            result = self.env.reset(seed=seed, options=options)
        except Exception as error:
            if isinstance(error, UserInputError):
                raise
            raise EnvironmentProtocolError(
                f"{self._name}, {where}: reset(seed={seed!r}, options={options!r}) raised {_what_and_where(error)}"
            ) from error
        if not (isinstance(result, tuple) and len(result) == 2):
            self._fail([f"reset() must return (observation, info), got {type(result).__name__}"])
        obs, info = result
        goal_conditioned = isinstance(info, dict) and "goal" in info
        problems = observation_problems(obs, info, where, goal_conditioned) + info_problems(
            info, where, goal_conditioned
        )
        if problems:
            self._fail(problems)
        self._episode, self._t, self._reported = self._episode + 1, 0, {}
        self._goal_conditioned, self._goal = goal_conditioned, info.get("goal")
        self._candidates = tuple(info["candidates"])
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        where = f"episode {self._episode}, step {self._t}"
        try:
            result = self.env.step(action)
        except Exception as error:
            if isinstance(error, UserInputError) or action not in self._candidates:
                raise  # an action it never offered: the caller's mistake, refused as the environment refuses it
            raise EnvironmentProtocolError(
                f"{self._name}, {where}: step({action!r}) raised {_what_and_where(error)}, although "
                f"info['candidates'] offered it ({list(self._candidates)!r}): the environment refuses one of its own "
                "candidates, or its code fails on it"
            ) from error
        if (arity := step_arity_problem(result)) is not None:
            self._fail([f"{where}: {arity}"], action)
        obs, reward, terminated, truncated, info = result
        problems = step_value_problems(reward, terminated, truncated, where)
        problems += info_problems(info, where, self._goal_conditioned, (terminated, truncated))
        problems += observation_problems(obs, info, where, self._goal_conditioned)
        if problems:
            self._fail(problems, action)
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        achieved = list(info.get("achieved_goals") or ())
        repeated = [goal for i, goal in enumerate(achieved) if goal in self._reported or goal in achieved[:i]]
        if repeated:  # counted once, as the protocol says, rather than relabeled twice
            achieved = [goal for goal in dict.fromkeys(achieved) if goal not in self._reported]
            info = {**info, "achieved_goals": achieved}
            if self._name not in _WARNED_OF_REPEATS:
                _WARNED_OF_REPEATS.add(self._name)
                warnings.warn(
                    f"{self._name}, {where}: goal {repeated[0]!r} was reported achieved again in the same episode; "
                    "sacglam keeps each goal's first report only (a goal is reported once per episode, the first time "
                    "it is achieved: docs/reference/environment-protocol.md). Said once per process",
                    category=SacglamWarning,
                    stacklevel=2,
                )
        for goal in achieved:
            self._reported[goal] = self._t
        if reward not in (0.0, 1.0) and "achieved_goals" in info and self._name not in _WARNED_OF_REWARDS:
            _WARNED_OF_REWARDS.add(self._name)
            warnings.warn(
                f"{reward_scale_warning(self._name, where, reward)}. Said once per process",
                category=SacglamWarning,
                stacklevel=2,
            )
        if self._goal is not None and self._goal in achieved and not (terminated and reward > 0):
            problems.append(
                f"{where}: the episode's own goal {self._goal!r} was reported achieved but the step was not a success "
                f"(reward {reward}, terminated {terminated}); relabeled rewards would disagree with the environment's"
            )
        if problems:
            self._fail(problems, action)
        self._candidates = tuple(info["candidates"])
        return obs, reward, terminated, truncated, info

    def _fail(self, problems: list[str], action: Any = None) -> NoReturn:
        """Raise the breach; `action`, for a step, is the action it took (what the author replays)."""
        took = f"; the step's action was {action!r}" if action is not None else ""
        raise EnvironmentProtocolError(
            f"{self._name} does not follow the environment protocol: {'; '.join(problems)}{took} {CHECKER_HINT}"
        )


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sacglam/


def raised_in_user_code(error: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of `error`'s traceback outside sacglam (an environment's own code, or a
    library it called), or None when sacglam's own call raised it (e.g. a keyword argument a
    constructor does not take)."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    return outside[-1] if outside else None


def _what_and_where(error: BaseException) -> str:
    """`"ValueError: <message> (at its_module.py:42, in step)"`."""
    frame = raised_in_user_code(error)
    at = f" (at {os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name})" if frame else ""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}{at}" if message else f"{type(error).__name__}{at}"
