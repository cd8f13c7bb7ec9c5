"""A rollout worker (plain class; the Ray actor and the local runner wrap it the same way).

It steps its vector of Playground-Text environments, asks an inference service for pi(.|s) over
each state's candidates, samples the actions itself (with its own seeded generator, so the
inference side stays stateless), and hands back the episodes that finished. With a goal
sampler, the goals of the episodes its environments start come from the sampler's latest
`GoalPlan`, drawn with the worker's own goal generator.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sacglam.config import EnvConfig
from sacglam.rollout_workers.recorder import EpisodeRecorder
from sacglam.types import Episode, GoalPlan

Distributions = Callable[[Sequence[str], Sequence[Sequence[str]]], tuple[np.ndarray, int]]
"""(observations, candidates) -> (probs (B, C) float32 with 0 at padding, policy version)."""


@dataclass
class Collected:
    """What one `collect` call produced."""

    env_steps: int
    episodes: list[Episode] = field(default_factory=list)
    policy_version: int = -1  # the oldest weights version that chose an action (-1: random actions only)


def sample_actions(probs: np.ndarray, candidates: Sequence[Sequence[str]], rng: np.random.Generator) -> list[str]:
    """One candidate per state drawn from its row of `probs` (B, C); padding columns have p = 0."""
    cumulative = np.cumsum(probs, axis=1)
    draws = rng.random(len(candidates)) * cumulative[:, -1]
    picks = (cumulative <= draws[:, None]).sum(axis=1)  # first index whose cumulative exceeds the draw
    return [c[min(int(i), len(c) - 1)] for c, i in zip(candidates, picks, strict=True)]


class GoalChooser:
    """The goal of each episode an auto-reset starts: a draw from the newest `GoalPlan` (its own
    generator, so choosing goals leaves the action stream alone; None: the environment's draw)."""

    def __init__(self, seed: int):
        self.plan = GoalPlan()
        self.rng = np.random.default_rng([seed, 0x60A1])

    def __call__(self) -> str | None:
        return self.plan.draw(self.rng)


class RolloutWorker:
    """`num_envs` environments of `env_config`, seeded from `seed`."""

    def __init__(self, env_config: EnvConfig, num_envs: int, seed: int):
        self.num_envs = num_envs
        self.env = env_config.make_vector(num_envs)
        self.rng = np.random.default_rng(seed)
        self.observations: list[str]
        self.infos: dict[str, Any]
        self.observations, self.infos = self.env.reset(seed=seed)
        self.recorder = EpisodeRecorder(num_envs)
        self.recorder.start(self.observations, self.infos)
        self.goals = GoalChooser(seed)
        self.env.goal_source = self.goals  # type: ignore[attr-defined]  # both vector forms have it

    def collect(
        self,
        vector_steps: int,
        distributions: Distributions | None,
        cut: bool = False,
        goal_plan: GoalPlan | None = None,
    ) -> Collected:
        """Take `vector_steps` steps in every environment; `distributions=None` acts uniformly at
        random. `cut`: end every open episode's segment after the last step (an on-policy
        rollout's end); the cut segments come last in `episodes`. `goal_plan`: the goal sampler's
        newest distribution, for the episodes that start from here on (None: keep the last one)."""
        if goal_plan is not None:
            self.goals.plan = goal_plan
        out = Collected(env_steps=0)
        versions = []
        for _ in range(vector_steps):
            candidates = self.infos["candidates"]
            if distributions is None:
                actions = [c[int(self.rng.integers(len(c)))] for c in candidates]
            else:
                probs, version = distributions(self.observations, candidates)
                versions.append(version)
                actions = sample_actions(probs, candidates, self.rng)
            self.observations, rewards, terminated, truncated, self.infos = self.env.step(actions)
            out.episodes += self.recorder.record(actions, self.observations, rewards, terminated, truncated, self.infos)
            out.env_steps += self.num_envs
        if cut:
            out.episodes += self.recorder.cut()
        out.policy_version = min(versions) if versions else -1
        return out

    # The whole worker (environments mid-episode, open episodes, generator) for checkpoints.
    def get_state(self) -> bytes:
        return pickle.dumps((self.env, self.rng, self.observations, self.infos, self.recorder))  # env holds the chooser

    def set_state(self, state: bytes) -> None:
        self.env, self.rng, self.observations, self.infos, self.recorder = pickle.loads(state)
        self.goals = self.env.goal_source  # type: ignore[attr-defined]
