"""`PlaygroundTextVector`: many Playground-Text environments stepped in one call, with auto-reset.

Auto-reset semantics (gymnasium's `AutoresetMode.SAME_STEP`): when an environment's episode ends
at a step (terminated or truncated), it is reset within that same `step` call. The returned
observation, `info["candidates"]`, `info["goal"]` and `info["scene"]` are then those of the NEW
episode, so every returned observation can be acted on. What the finished episode ended on is in
`info["final_obs"][i]` and `info["final_info"][i]` (its `candidates`, `goal`, `achieved_goals`,
`scene`), flagged by the boolean mask `info["_final_obs"]`; entries of unfinished environments are
None. `reward`, `terminated`, `truncated` and `info["achieved_goals"]` always describe the step just
taken (i.e. the finished episode's last step). Auto-resets draw from each environment's own
generator, so a seeded `reset` makes the whole stream reproducible. `goal_source`, when set, gives
the goal of every auto-reset episode (a goal sampler's choice; None: the environment's draw).

`info` keys (lists of length `num_envs` unless noted):
- `candidates`: list[list[str]], the next step's candidate actions;
- `goal`: list[str], the goal of each current episode;
- `scene`: list[list[str]], each current episode's objects in scene order;
- `achieved_goals`: list[list[str]], the social partner's goals for the step just taken (at reset: []);
- `final_obs`, `final_info`, `_final_obs` (np.ndarray of bool): see above (step only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sacglam.envs.playground_text import PlaygroundText
from sacglam.envs.protocol import InvalidActionError, reset_on_goal
from sacglam.envs.text_vector import per_env_options, per_env_seeds


class PlaygroundTextVector(VectorEnv):
    """`num_envs` copies of `PlaygroundText(n_objects, goals, max_steps)` stepped synchronously in
    one process. Observations are a list of str; rewards float32, terminated/truncated bool arrays.

    `reset(seed=s)` seeds environment i with `s + i` (a list gives one seed each);
    `reset(options={"goal": [...], "scene": [...]})` takes one entry per environment (None: draw).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 32, n_objects: int = 6, goals: str = "train", max_steps: int = 30):
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.envs = [PlaygroundText(n_objects=n_objects, goals=goals, max_steps=max_steps) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._scenes: list[list[str]] = [[] for _ in range(num_envs)]
        self._needs_reset = True
        self.goal_source: Callable[[], str | None] | None = None  # the goals of auto-reset episodes

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[str], dict[str, Any]]:
        seeds = self._per_env_seeds(seed)
        per_env_options = self._per_env_options(options)
        observations, candidates, goals = [], [], []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i], options=per_env_options[i])
            observations.append(obs)
            candidates.append(info["candidates"])
            goals.append(info["goal"])
            self._scenes[i] = info["scene"]
        self._needs_reset = False
        infos = {
            "candidates": candidates,
            "goal": goals,
            "scene": list(self._scenes),
            "achieved_goals": [[] for _ in self.envs],
        }
        return observations, infos

    def step(self, actions: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("PlaygroundTextVector.step() called before reset(); call reset() first")
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(f"step() takes one action string per environment ({self.num_envs}), got {actions!r}")
        # Check every action before stepping any environment: a bad one changes nothing.
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            if not env.is_candidate(action):
                raise InvalidActionError(
                    f"environment {i}: action {action!r} is not one of its candidates {env.candidates()}"
                )
        n = self.num_envs
        observations: list[str] = [""] * n
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        candidates: list[list[str]] = [None] * n  # type: ignore[list-item]
        goals: list[str] = [""] * n
        achieved: list[list[str]] = [None] * n  # type: ignore[list-item]
        final_obs: list[str | None] = [None] * n
        final_info: list[dict[str, Any] | None] = [None] * n
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, info = env.step(actions[i])
            rewards[i] = reward
            terminated[i] = term
            truncated[i] = trunc
            achieved[i] = info["achieved_goals"]
            if term or trunc:
                info["scene"] = self._scenes[i]
                final_obs[i], final_info[i] = obs, info
                obs, info = reset_on_goal(env, self.goal_source() if self.goal_source else None)
                self._scenes[i] = info["scene"]
            observations[i] = obs
            candidates[i] = info["candidates"]
            goals[i] = info["goal"]
        infos = {
            "candidates": candidates,
            "goal": goals,
            "scene": list(self._scenes),
            "achieved_goals": achieved,
            "final_obs": final_obs,
            "final_info": final_info,
            "_final_obs": terminated | truncated,
        }
        return observations, rewards, terminated, truncated, infos

    def _per_env_seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        return per_env_seeds(seed, self.num_envs)

    def _per_env_options(self, options: dict[str, Any] | None) -> list[dict[str, Any] | None]:
        if options is None:
            return [None] * self.num_envs
        if not isinstance(options, dict) or set(options) - {"goal", "scene"}:
            raise ValueError(
                "options must be a dict with keys among 'goal' and 'scene', each a list with one entry "
                f"(or None) per environment; got {options!r}"
            )
        return per_env_options(options, self.num_envs)
