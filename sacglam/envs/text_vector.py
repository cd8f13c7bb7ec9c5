"""`TextVectorEnv`: any protocol text environments (`docs/reference/environment-protocol.md`) stepped as one vector.

The same contract as Playground-Text's vector form, for every environment: gymnasium's
`AutoresetMode.SAME_STEP` (an environment whose episode ends at a step is reset within that
step, and the returned observation and per-episode info are the new episode's), observations as a
list of str, rewards float32, flags bool arrays; what the finished episode ended on is in
`info["final_obs"][i]` / `info["final_info"][i]`, flagged by `info["_final_obs"]`.

`info` holds one list per key the environments report (`candidates`, and where present `goal`,
`goal_type`, `achieved_goals`, `scene`, ...). A key an environment gives at reset but not at step
(a per-episode fact such as the scene) keeps its reset value for the whole episode, and the
finished episode's value is in its `final_info`. `achieved_goals` always describes the step just
taken (at reset: []).

`goal_source`, when set, is asked for the goal of every episode an auto-reset starts (a goal
sampler's choice; None from it: the environment draws its own goal); such resets pass
`options={"goal": g}`, which the environment must accept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sacglam.envs.protocol import InvalidActionError, reset_on_goal

_STEP_ONLY = ("achieved_goals", "success")  # facts of one step, never carried over


class TextVectorEnv(VectorEnv):
    """`envs` stepped synchronously in one process. `reset(seed=s)` seeds environment i with
    `s + i` (a list gives one seed each); `reset(options={key: [...]})` gives each environment its
    own entry of every option (None: no option for that environment)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, envs: Sequence[gymnasium.Env]):
        if not envs:
            raise ValueError("TextVectorEnv needs at least one environment")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._episode_info: list[dict[str, Any]] = [{} for _ in self.envs]  # the current episodes' reset facts
        self._needs_reset = True
        self.goal_source: Callable[[], str | None] | None = None  # the goals of auto-reset episodes

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[str], dict[str, Any]]:
        seeds = self._per_env_seeds(seed)
        per_env_options = self._per_env_options(options)
        observations = []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i], options=per_env_options[i])
            observations.append(obs)
            self._episode_info[i] = {k: v for k, v in info.items() if k not in _STEP_ONLY}
            self._episode_info[i]["candidates"] = list(info.get("candidates") or [])
        self._needs_reset = False
        infos = self._gather([dict(e) for e in self._episode_info])
        infos["achieved_goals"] = [[] for _ in self.envs]
        return observations, infos

    def step(self, actions: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset(); call reset() first")
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(f"step() takes one action string per environment ({self.num_envs}), got {actions!r}")
        # Check every action before stepping any environment: a bad one changes nothing.
        for i, action in enumerate(actions):
            candidates = self._episode_info[i]["candidates"]
            if action not in candidates:
                raise InvalidActionError(
                    f"environment {i}: action {action!r} is not one of its candidates {candidates}"
                )
        n = self.num_envs
        observations: list[str] = [""] * n
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        achieved: list[list[str]] = [[] for _ in range(n)]
        final_obs: list[str | None] = [None] * n
        final_info: list[dict[str, Any] | None] = [None] * n
        current: list[dict[str, Any]] = [{}] * n
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, info = env.step(actions[i])
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            achieved[i] = list(info.get("achieved_goals", []))
            # the step's values over the reset's; the candidate list copied, so an environment
            # that rewrites its own list later (at reset) cannot change what was recorded
            episode_info = {**self._episode_info[i], **info}
            if "candidates" in info:
                episode_info["candidates"] = list(info["candidates"])
            if term or trunc:
                final_obs[i], final_info[i] = obs, episode_info
                obs, info = reset_on_goal(env, self.goal_source() if self.goal_source else None)
                episode_info = {k: v for k, v in info.items() if k not in _STEP_ONLY}
                episode_info["candidates"] = list(info.get("candidates") or [])
            self._episode_info[i] = {k: v for k, v in episode_info.items() if k not in _STEP_ONLY}
            observations[i] = obs
            current[i] = self._episode_info[i]
        infos: dict[str, Any] = self._gather(current)
        infos |= {
            "achieved_goals": achieved,
            "final_obs": final_obs,
            "final_info": final_info,
            "_final_obs": terminated | truncated,
        }
        return observations, rewards, terminated, truncated, infos

    @staticmethod
    def _gather(per_env: list[dict[str, Any]]) -> dict[str, list[Any]]:
        """One list per key, over environments (a key some environment lacks gives None there)."""
        keys = dict.fromkeys(k for info in per_env for k in info)
        return {k: [info.get(k) for info in per_env] for k in keys}

    def _per_env_seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        return per_env_seeds(seed, self.num_envs)

    def _per_env_options(self, options: dict[str, Any] | None) -> list[dict[str, Any] | None]:
        return per_env_options(options, self.num_envs)


def per_env_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """A vector reset's `seed` per environment: None for all, `s + i` for an int, or one each."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"reset(seed=...) got {len(seeds)} seeds for {num_envs} environments")
    return seeds


def per_env_options(options: dict[str, Any] | None, num_envs: int) -> list[dict[str, Any] | None]:
    """A vector reset's `options` (a dict of lists, one entry per environment, None: no option)
    as one options dict (or None) per environment."""
    if options is None:
        return [None] * num_envs
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict of lists (one entry per environment), got {options!r}")
    per_env: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, values in options.items():
        if isinstance(values, str) or not isinstance(values, Sequence) or len(values) != num_envs:
            raise ValueError(f"options[{key!r}] must be a list of {num_envs} entries (one per environment)")
        for i, value in enumerate(values):
            if value is not None:
                per_env[i][key] = value
    return [o or None for o in per_env]
