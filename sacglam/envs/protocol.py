"""The environment protocol: what a text environment must give sacglam, and a checker for it.

Spec: `docs/reference/environment-protocol.md`, "The protocol". A text environment is a gymnasium environment whose
observations are the prompt text and whose `info` (at reset and after every step) carries:
- `candidates` (required): the non-empty list of action texts the agent may take next;
- `goal` (optional): the episode's goal text, which the observation carries on its first line
  as `Goal: <goal>` (that line is what hindsight relabeling rewrites);
- `achieved_goals` (optional, turns hindsight relabeling on): the goals the step just taken
  achieved, each reported once per episode; a goal reported at a step must be one whose episode
  would have ended with success at that step (reward > 0, terminated);
- `goal_type` (optional): the goal's category, for per-category evaluation.
`reset(options={"goal": g})` starting an episode on goal g is optional (evaluation on fixed goal
lists and goal samplers use it).
"""

from __future__ import annotations

import math
import numbers
import random
import string
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from sacglam.errors import SacglamWarning, UserInputError

GOAL_PREFIX = "Goal: "


class InvalidActionError(ValueError):
    """An action text that is not among the environment's current candidates."""


class ExpertUnavailableError(ValueError):
    """The environment has no expert policy."""


class EnvironmentProtocolError(UserInputError, ValueError):
    """An environment does not follow the protocol; the message names what is wrong."""


def split_goal(observation: str) -> tuple[str, str]:
    """`"Goal: g\\n<rest>"` -> `(g, "<rest>")`: the goal and the goal-free rest of the observation."""
    head, sep, rest = observation.partition("\n")
    if not head.startswith(GOAL_PREFIX) or not sep:
        raise EnvironmentProtocolError(
            f"an observation of a goal-conditioned environment must start with a '{GOAL_PREFIX}<goal>' line "
            f"followed by the rest of the text; got {observation[:120]!r}"
        )
    return head[len(GOAL_PREFIX) :], rest


def with_goal(rest: str, goal: str) -> str:
    """The observation of a goal-free text under `goal` (inverse of `split_goal` and of
    `goal_and_rest`; the empty goal, an environment without goals, leaves the text as it is)."""
    return f"{GOAL_PREFIX}{goal}\n{rest}" if goal else rest


def goal_and_rest(observation: str) -> tuple[str, str]:
    """`split_goal` for any environment: an observation without a goal line has the empty goal."""
    if observation.startswith(GOAL_PREFIX) and "\n" in observation:
        return split_goal(observation)
    return "", observation


def info_problems(info: Any, where: str, goal_conditioned: bool, flags: tuple[Any, Any] = (False, False)) -> list[str]:
    """What in a reset's or step's `info` breaks the protocol (`where` starts each message;
    `flags`: a step's terminated and truncated, read only for a problem: an info after the step that
    ends its episode still lists the final state's candidates)."""
    problems = []
    if not isinstance(info, dict):
        return [f"{where}: info must be a dict, got {type(info).__name__}"]
    candidates = info.get("candidates")
    if candidates is None:
        problems.append(f"{where}: info has no 'candidates' (the list of action texts the agent may take)")
    elif (
        not isinstance(candidates, Sequence)
        or isinstance(candidates, str)
        or not candidates
        or not all(isinstance(c, str) and c for c in candidates)
    ):
        problems.append(
            f"{where}: info['candidates'] must be a non-empty list of non-empty strings, got {candidates!r}"
            + _first_bad_candidate(candidates)
            + (
                " (after an episode's last step too: return the final state's candidates, which the value of a "
                "truncated episode's last state is computed over)"
                if ended(*flags)
                and isinstance(candidates, Sequence)
                and not isinstance(candidates, str)
                and not candidates
                else ""
            )
        )
    elif len(set(candidates)) != len(candidates):
        problems.append(f"{where}: info['candidates'] repeats an action: {candidates!r}")
    if goal_conditioned and not isinstance(info.get("goal"), str):
        got = f"got {info['goal']!r} (a {type(info['goal']).__name__})" if "goal" in info else "it has none"
        problems.append(
            f"{where}: info['goal'] must be the episode's goal text (a str) in every info of an environment whose "
            f"reset info has a 'goal'; {got}"
        )
    achieved = info.get("achieved_goals")
    if achieved is not None and (isinstance(achieved, str) or not all(isinstance(g, str) for g in achieved)):
        problems.append(f"{where}: info['achieved_goals'] must be a list of goal strings, got {achieved!r}")
    goal = info.get("goal")  # checked at every step: no list built for it (a step of a guarded env is hot)
    padded = goal if isinstance(goal, str) and goal != goal.strip() else None
    for reported in achieved or ():
        if padded is None and isinstance(reported, str) and reported != reported.strip():
            padded = reported
    if padded is not None:  # "Cook the egg " reported for "Cook the egg" would be another goal, silently
        problems.append(
            f"{where}: goal {padded!r} (in info['goal'] or info['achieved_goals']) has whitespace around it: goals "
            "are compared as exact texts (a report with the episode's goal, a goal list), so strip them"
        )
    if "goal_type" in info and not isinstance(info["goal_type"], str):
        problems.append(f"{where}: info['goal_type'] must be a str, got {info['goal_type']!r}")
    return problems


def _first_bad_candidate(candidates: Any) -> str:
    """`: item i is <repr> (<type>)` for the first item of a candidate list that is not a
    non-empty str; "" when the list itself is what is wrong."""
    if not isinstance(candidates, Sequence) or isinstance(candidates, str):
        return f" (a {type(candidates).__name__})"
    for i, candidate in enumerate(candidates):
        if not (isinstance(candidate, str) and candidate):
            return f": item {i} is {candidate!r} ({type(candidate).__name__})"
    return ""


STEP_RESULT = "(observation, reward, terminated, truncated, info)"
CHECKER_HINT = (
    "(sacglam.envs.protocol.check_environment(env) checks every rule: docs/reference/environment-protocol.md)"
)


def step_arity_problem(result: Any) -> str | None:
    """Why `result` is not the 5-tuple a gymnasium step returns, or None when it is (the 4-tuple
    of gym's old API, `(obs, reward, done, info)`, is named as such)."""
    if isinstance(result, tuple) and len(result) == 5:
        return None
    if isinstance(result, tuple) and len(result) == 4:
        return (
            f"step() returned 4 values, gym's old (obs, reward, done, info); gymnasium's step returns {STEP_RESULT}: "
            "split done into terminated (the task ended) and truncated (a time limit)"
        )
    size = f"{len(result)} values" if isinstance(result, tuple) else f"a {type(result).__name__}"
    return f"step() must return {STEP_RESULT}, got {size}"


def step_value_problems(reward: Any, terminated: Any, truncated: Any, where: str) -> list[str]:
    """What breaks the protocol in a step's reward (a real number: int, float or a numpy scalar,
    not a bool) and flags (bool, numpy bool, or an int 0 or 1: a string such as "False", or any
    other value, would be read as a truth value, silently)."""
    problems = []
    if (
        isinstance(reward, (bool, np.bool_))
        or not isinstance(reward, (numbers.Real, np.number))
        or isinstance(reward, np.complexfloating)
    ):
        problems.append(f"{where}: reward must be a number (float), got {reward!r} ({type(reward).__name__})")
    elif not math.isfinite(float(reward)):
        problems.append(f"{where}: reward must be finite, got {reward!r}")
    if not _is_flag(terminated) or not _is_flag(truncated):
        problems.append(
            f"{where}: terminated and truncated must be bools, got {terminated!r}, {truncated!r} "
            f"({type(terminated).__name__}, {type(truncated).__name__})"
        )
    return problems


def ended(terminated: Any, truncated: Any) -> bool:
    """Whether a step's flags end its episode, read only where they are valid flags."""
    return any(_is_flag(flag) and bool(flag) for flag in (terminated, truncated))


def _is_flag(value: Any) -> bool:
    """A bool, a numpy bool, or an int that is 0 or 1 (unambiguous; a string is not: `"False"` is true)."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, (int, np.integer)) and value in (0, 1)


def check_environment(env: gymnasium.Env, episodes: int = 5, max_steps: int = 200, seed: int = 0) -> dict[str, bool]:
    """Run `episodes` episodes of `env` (at most `max_steps` steps each) with uniformly random
    candidates, and check every value against the protocol: types, the goal line, that a listed
    candidate is accepted, that a goal is reported achieved at most once per episode and the
    episode's own goal only on a success. It warns about a step that sets terminated and truncated
    together, a candidate list that the step rewrites in place, and an environment that takes an
    action it did not offer. Raises `EnvironmentProtocolError` listing every problem
    found (at most 10); returns the optional features the environment has: `goal` (goal-conditioned,
    relabelable observations), `hindsight` (`achieved_goals` reported), `goal_type`, `goal_reset`
    (`reset(options={"goal": g})` honoured). When no random step was rewarded, one episode follows
    the environment's `expert_action()` (if it has one) to see a success's reward; without one, a
    warning says the reward scale went unchecked."""
    rng = random.Random(seed)
    problems: list[str] = [
        f"it has no {name} (gymnasium environments declare theirs, e.g. gymnasium.spaces.Text(max_length=...))"
        for name in ("observation_space", "action_space")
        if getattr(env, name, None) is None
    ]
    if problems:
        raise EnvironmentProtocolError(
            f"{type(env.unwrapped).__name__} does not follow the environment protocol: {'; '.join(problems)}"
        )
    features = {"goal": False, "hindsight": False, "goal_type": False, "goal_reset": False}
    both_flags_seen = mutation_seen = reward_scale_seen = rewarded = False
    outside_space: set[str] = set()  # the spaces a text was found outside of (warned of once each)
    for episode in range(episodes):
        result = env.reset(seed=seed + episode)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise EnvironmentProtocolError("reset() must return (observation, info)")
        obs, info = result
        if episode == 0:
            features["goal"] = isinstance(info, dict) and "goal" in info
            features["goal_type"] = isinstance(info, dict) and "goal_type" in info
        problems += observation_problems(obs, info, "reset", features["goal"])
        problems += info_problems(info, "reset", features["goal"])
        if problems:
            break
        _warn_outside_space(env, "observation_space", obs, "reset", outside_space)
        goal = info.get("goal")
        reported: dict[str, int] = {}  # goal -> the step that reported it achieved
        for t in range(max_steps):
            where = f"episode {episode}, step {t + 1}"
            candidates = info["candidates"]
            listed = list(candidates)  # what the agent was offered, kept apart from the environment's object
            action = rng.choice(listed)
            step, found = _checked_step(env, action, listed, where, features["goal"])
            problems += found
            if step is None:
                break
            if list(candidates) != listed and not mutation_seen:
                mutation_seen = True
                warnings.warn(
                    f"{type(env.unwrapped).__name__}, {where}: the info['candidates'] list returned before this step "
                    f"was changed in place by step() (was {listed!r}, now {list(candidates)!r}); sacglam copies "
                    "each list it is given, but code that keeps the environment's list would record candidates "
                    "the action was not chosen from: return a new list each time",
                    category=SacglamWarning,
                    stacklevel=2,
                )
            if problems:
                break
            obs, reward, terminated, truncated, info = step
            _warn_outside_space(env, "observation_space", obs, where, outside_space)
            _warn_outside_space(env, "action_space", action, where, outside_space)
            rewarded = rewarded or float(reward) != 0.0
            if "achieved_goals" in info and float(reward) not in (0.0, 1.0) and not reward_scale_seen:
                reward_scale_seen = True
                warnings.warn(
                    reward_scale_warning(type(env.unwrapped).__name__, where, float(reward)),
                    category=SacglamWarning,
                    stacklevel=2,
                )
            if "achieved_goals" in info:
                features["hindsight"] = True
                for achieved in info["achieved_goals"]:
                    if achieved in reported:
                        problems.append(
                            f"{where}: goal {achieved!r} was reported achieved again (first at step {reported[achieved]}); "
                            "each goal is reported once per episode, the first time it is achieved, or hindsight "
                            "relabeling would count it twice"
                        )
                    reported.setdefault(achieved, t + 1)
                if goal in info["achieved_goals"] and not (terminated and float(reward) > 0):
                    problems.append(
                        f"{where}: the episode's own goal {goal!r} was reported achieved but the step was not a "
                        f"success (reward {reward}, terminated {terminated}); relabeled rewards would disagree"
                    )
            if terminated and truncated and not both_flags_seen:
                both_flags_seen = True
                warnings.warn(
                    f"{type(env.unwrapped).__name__}, {where}: terminated and truncated are both set (gymnasium's "
                    "TimeLimit does this when an episode terminates on its last allowed step); sacglam counts such "
                    "a step as terminated and does not bootstrap from it",
                    category=SacglamWarning,
                    stacklevel=2,
                )
            if terminated or truncated:
                break
        if problems:
            break
    if not problems and not rewarded and features["hindsight"]:
        # random play never succeeded: the expert's episode shows a success's reward (the scale
        # matters to an environment that reports goals, whose relabeled successes pay 1)
        problems += _check_an_expert_episode(env, seed, max_steps, features["goal"])
    if not problems:
        _probe_an_action_outside_the_candidates(env, seed)
    if features["goal"] and not problems:
        features["goal_reset"] = _honours_goal_reset(env, goal_of=env.reset(seed=seed)[1]["goal"], seed=seed + 1)
    if problems:
        shown = "; ".join(problems[:10])
        raise EnvironmentProtocolError(
            f"{type(env.unwrapped).__name__} does not follow the environment protocol: {shown}"
        )
    return features


def _checked_step(
    env: gymnasium.Env, action: str, listed: list[str], where: str, goal_conditioned: bool
) -> tuple[tuple | None, list[str]]:
    """`env.step(action)` for an `action` the info before it `listed`, and what in it breaks the
    protocol: a step that raises, gym's 4-value step, the reward and flags, the info, the
    observation. The step is None when it gives nothing to read on."""
    try:
        step = env.step(action)
    except Exception as error:  # a listed candidate must be accepted
        return None, [
            f"{where}: step({action!r}) failed ({type(error).__name__}: {error}) although info['candidates'] "
            f"listed it ({listed!r}): the candidates changed between info and step, or the environment "
            "refuses its own candidates"
        ]
    if (arity := step_arity_problem(step)) is not None:
        return None, [f"{where}: {arity}"]
    obs, reward, terminated, truncated, info = step
    problems = step_value_problems(reward, terminated, truncated, where)
    problems += info_problems(info, where, goal_conditioned, (terminated, truncated))
    problems += observation_problems(obs, info, where, goal_conditioned)
    return step, problems


def _check_an_expert_episode(env: gymnasium.Env, seed: int, max_steps: int, has_goal: bool) -> list[str]:
    """One episode following `expert_action()` (found on any wrapper, as a run finds it), for an
    environment that reports goals and whose random episodes were never rewarded: the reward of a
    success is checked against the scale relabeling uses (a warning, as for random play's steps).
    Without an expert, or when the expert's episode is not rewarded either, it warns that the scale
    went unchecked. Returns the problems found (an expert action that is not a candidate, a step
    that fails on it, values against the protocol)."""
    name = type(env.unwrapped).__name__
    find = getattr(env, "get_wrapper_attr", None)  # gymnasium's: searches every wrapper, then the environment
    try:
        expert = find("expert_action") if callable(find) else getattr(env, "expert_action", None)
    except AttributeError:
        expert = None
    if callable(expert):
        _, info = env.reset(seed=seed)
        for t in range(max_steps):
            where = f"the expert's episode, step {t + 1}"
            try:
                action = expert()
            except Exception as error:  # the user's code: said in the checker's one line, not a traceback
                return [f"{where}: expert_action() failed ({type(error).__name__}: {error})"]
            listed = list(info["candidates"])
            if action not in listed:
                return [f"{where}: expert_action() returned {action!r}, which is not one of info['candidates']"]
            step, problems = _checked_step(env, action, listed, where, has_goal)
            if step is None or problems:
                return problems
            _, reward, terminated, truncated, info = step
            if float(reward) != 0.0:
                if "achieved_goals" in info and float(reward) not in (0.0, 1.0):
                    warnings.warn(
                        reward_scale_warning(name, where, float(reward)), category=SacglamWarning, stacklevel=3
                    )
                return []
            if terminated or truncated:
                break
    expert_too = " or the expert's episode" if callable(expert) else ""
    warnings.warn(
        f"{name}: no step was rewarded in the random episodes{expert_too}, so the reward of a success (1 for relabeling) was not checked: check_environment(env, episodes=...) with "
        "more episodes, or give the environment an expert_action()",
        category=SacglamWarning,
        stacklevel=3,
    )
    return []


def reward_scale_warning(name: str, where: str, reward: float) -> str:
    """The warning for a reward other than 0 or 1 from an environment that reports achieved goals."""
    return (
        f"{name}, {where}: reward {reward:g}, where an environment that reports achieved goals pays 1 on success "
        "and 0 otherwise: a relabeled transition is rewarded 1 at its goal's report and 0 elsewhere, so with "
        "relabeling (sac-her, ppo.her) the critic would learn two reward scales; scale the success reward to 1 and "
        "drop shaping (docs/reference/environment-protocol.md)"
    )


def _warn_outside_space(env: gymnasium.Env, name: str, text: Any, where: str, warned: set[str]) -> None:
    """Warn, once per space, of a text outside the `gymnasium.spaces.Text` the environment declares
    (sacglam never reads the spaces, but gymnasium's own `check_env` and wrappers do): gymnasium's
    default charset is letters and digits only, without the space every sentence has."""
    space = getattr(env, name, None)
    if name in warned or not isinstance(space, gymnasium.spaces.Text) or not isinstance(text, str):
        return
    if space.contains(text):
        return
    warned.add(name)
    outside = sorted(set(text) - set(space.character_set))
    why = (
        f"characters outside its charset: {''.join(outside[:10])!r}"
        if outside
        else f"{len(text)} characters, outside its lengths {space.min_length}-{space.max_length}"
    )
    beyond_printable = "".join(c for c in outside if c not in string.printable)
    example = (
        f"string.printable + {beyond_printable!r}, with every other character its texts use"
        if beyond_printable
        else "string.printable"
    )
    warnings.warn(
        f"{type(env.unwrapped).__name__}, {where}: {text[:40]!r}{'...' if len(text) > 40 else ''} is not in its "
        f"{name} ({why}); gymnasium's check_env would fail: declare gymnasium.spaces.Text(max_length=..., "
        f"charset=...) with every character and the length its texts have (e.g. charset={example})",
        category=SacglamWarning,
        stacklevel=3,
    )


NOT_A_CANDIDATE = "<sacglam: not one of the candidates>"


def _probe_an_action_outside_the_candidates(env: gymnasium.Env, seed: int) -> None:
    """Step once, on a fresh episode, with a text that is no candidate: an environment should refuse
    it (raise, e.g. `InvalidActionError`). One that takes it warns: sacglam only ever sends listed
    candidates, but a stale or mistyped action would then pass unnoticed."""
    _, info = env.reset(seed=seed)
    if not isinstance(info, dict) or NOT_A_CANDIDATE in (info.get("candidates") or ()):
        return
    try:
        env.step(NOT_A_CANDIDATE)
    except Exception:  # refused, in whatever way the environment refuses
        return
    warnings.warn(
        f"{type(env.unwrapped).__name__}: step({NOT_A_CANDIDATE!r}) was accepted although it is not among "
        "info['candidates']; an environment should raise for an action it did not offer (for example "
        "sacglam.envs.protocol.InvalidActionError), or an action taken from stale candidates goes unnoticed",
        category=SacglamWarning,
        stacklevel=3,
    )


def observation_problems(obs: Any, info: Any, where: str, goal_conditioned: bool) -> list[str]:
    """What in an observation breaks the protocol: not text, or (goal-conditioned) no goal line
    that agrees with `info['goal']` and gives the text back when rewritten."""
    if not isinstance(obs, str) or not obs:
        return [f"{where}: the observation must be the prompt text (a non-empty str), got {type(obs).__name__}"]
    if goal_conditioned and isinstance(info, dict) and isinstance(info.get("goal"), str):
        try:
            goal, rest = split_goal(obs)
        except EnvironmentProtocolError as error:
            return [f"{where}: {error}"]
        if goal != info["goal"]:
            return [f"{where}: the observation's goal line says {goal!r} but info['goal'] is {info['goal']!r}"]
        if with_goal(rest, goal) != obs:
            return [f"{where}: rewriting the observation under its own goal does not give it back"]
    return []


def _honours_goal_reset(env: gymnasium.Env, goal_of: str, seed: int) -> bool:
    try:
        _, info = env.reset(seed=seed, options={"goal": goal_of})
    except Exception:  # an environment without goal resets may refuse the option in any way
        return False
    return isinstance(info, dict) and info.get("goal") == goal_of


def reset_on_goal(env: gymnasium.Env, goal: str | None) -> tuple[Any, dict[str, Any]]:
    """`env.reset()` as a vector's auto-reset does it, on `goal` when one is given (a goal
    sampler's choice). An environment that refuses the goal option fails with a message that
    says why sacglam asked."""
    if goal is None:
        return env.reset()
    try:
        return env.reset(options={"goal": goal})
    except Exception as error:  # an environment without goal resets may refuse the option in any way
        raise EnvironmentProtocolError(
            f"{type(env.unwrapped).__name__} refused reset(options={{'goal': {goal!r}}}) ({error}): a goal sampler "
            "(goal_sampler.mode) starts episodes on its own goals, which needs an environment that accepts a goal "
            "at reset (docs/reference/environment-protocol.md); use goal_sampler.mode='environment' with this one"
        ) from error
