"""Turning a vector environment's step stream into finished `Episode`s (rollout side)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sacglam.envs.protocol import goal_and_rest
from sacglam.types import Episode


class _Open:
    """The episode an environment slot is in the middle of."""

    def __init__(self, observation: str, candidates: Sequence[str], scene: Sequence[str]):
        goal, state = goal_and_rest(observation)
        self._begin(goal, state, candidates, scene)

    def _begin(self, goal: str, state: str, candidates: Sequence[str], scene: Sequence[str]) -> None:
        self.goal = goal
        self.scene = tuple(scene)
        self.states, self.candidates = [state], [tuple(candidates)]
        self.actions: list[int] = []
        self.rewards: list[float] = []
        self.achieved: list[tuple[str, ...]] = []

    def episode(self, terminated: bool, truncated: bool, cut: bool) -> Episode:
        return Episode(
            goal=self.goal,
            scene=self.scene,
            states=tuple(self.states),
            candidates=tuple(self.candidates),
            actions=tuple(self.actions),
            rewards=tuple(self.rewards),
            terminated=terminated,
            truncated=truncated,
            achieved_goals=tuple(self.achieved),
            cut=cut,
        )

    def restart_from_last_state(self) -> None:
        """Continue the same episode as a new segment that starts where this one stopped."""
        self._begin(self.goal, self.states[-1], self.candidates[-1], self.scene)


class EpisodeRecorder:
    """Feed it what a vector environment's `reset` / `step` return (same-step auto-reset,
    `docs/reference/environment-protocol.md`); it returns the episodes that finished at each step."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self._open: list[_Open | None] = [None] * num_envs

    def start(self, observations: Sequence[str], infos: dict[str, Any]) -> None:
        """After `reset`: every slot starts a new episode."""
        scenes = infos.get("scene") or [()] * self.num_envs  # only Playground-Text reports scenes
        self._open = [_Open(o, c, s or ()) for o, c, s in zip(observations, infos["candidates"], scenes, strict=True)]

    def record(
        self,
        actions: Sequence[str],
        observations: Sequence[str],
        rewards: Sequence[float] | np.ndarray,
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
        infos: dict[str, Any],
    ) -> list[Episode]:
        """After `step(actions)`: append the step to every slot; return the episodes that ended."""
        finished = []
        for i in range(self.num_envs):
            episode = self._open[i]
            if episode is None:
                raise RuntimeError("EpisodeRecorder.record() before start(): pass it the reset's outputs first")
            episode.actions.append(episode.candidates[-1].index(actions[i]))
            episode.rewards.append(float(rewards[i]))
            episode.achieved.append(tuple(infos["achieved_goals"][i]) if "achieved_goals" in infos else ())
            done = bool(terminated[i] or truncated[i])
            last_obs = infos["final_obs"][i] if done else observations[i]
            last_candidates = infos["final_info"][i]["candidates"] if done else infos["candidates"][i]
            episode.states.append(goal_and_rest(last_obs)[1])
            episode.candidates.append(tuple(last_candidates))
            if done:
                # Termination wins: gymnasium's TimeLimit also sets truncated when the episode
                # terminates on its last allowed step, and a terminal state must not be bootstrapped.
                ended = bool(terminated[i])
                finished.append(episode.episode(terminated=ended, truncated=not ended, cut=False))
                scene = infos["scene"][i] if infos.get("scene") else ()
                self._open[i] = _Open(observations[i], infos["candidates"][i], scene or ())
        return finished

    def cut(self) -> list[Episode]:
        """End every open episode's segment here (an on-policy rollout's end): one `cut` segment
        per slot that took a step since its last segment began; each slot goes on with a new
        segment of the same episode from its current state."""
        segments = []
        for episode in self._open:
            if episode is not None and episode.actions:
                segments.append(episode.episode(terminated=False, truncated=False, cut=True))
                episode.restart_from_last_state()
        return segments
