"""Data types that cross component boundaries (kept in one place, small and frozen)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: a rollout worker, which holds no tensor, never imports torch
    import torch


class Policy(Protocol):
    """Anything that picks one action per state: scripted policies, the LLM agent.

    `observations[i]` is an environment's observation text and `candidates[i]` its candidate
    actions; the result holds one element of `candidates[i]` per state.
    """

    name: str

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]: ...


@runtime_checkable
class MeasuredPolicy(Protocol):
    """A policy that measures each state it acts in: `act_measured` returns the actions, as `act`
    does, and one figure per state (None: nothing measured this time). Evaluation averages the
    figures over each episode (`EpisodeResult.measure`)."""

    name: str

    def act_measured(
        self, observations: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> tuple[list[str], list[float] | None]: ...


@runtime_checkable
class EnvironmentPolicy(Protocol):
    """A policy that reads the live environments themselves (an expert with access to the state
    behind the text, such as the BabyAI bot); `envs[i]` is the environment of state i."""

    name: str

    def act_in(
        self, envs: Sequence[Any], observations: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> list[str]: ...


@dataclass(frozen=True)
class EpisodeSpec:
    """One evaluation episode, fully determined: the goal (None: the environment draws it), and
    the seed its scene is drawn with."""

    goal: str | None
    seed: int


@dataclass(frozen=True)
class EpisodeResult:
    """The outcome of one evaluation episode."""

    goal: str
    goal_type: str  # one of the environment's goal types
    seed: int
    success: bool  # the goal was achieved (reward 1) before truncation
    steps: int  # env steps taken in the episode
    # The mean over the episode's steps of what a `MeasuredPolicy` measured (the agent: the
    # probability pi gives the critic's argmax); None for a policy that measures nothing.
    measure: float | None = None


@dataclass(frozen=True)
class AgentOutput:
    """What one forward of the LLM agent gives for a batch of B states with up to C candidates.

    Padding slots (a state with fewer than C candidates) are False in `mask`; there `log_pi` is
    -inf, `action_log_likelihood` and `q` are 0.
    """

    log_pi: torch.Tensor  # (B, C) float32: log pi(a|s), a log-softmax over each state's candidates
    action_log_likelihood: torch.Tensor  # (B, C) float32: LP_LLM(a|s), paper eq. 1 (or its mean per token)
    q: torch.Tensor | None  # (B, C) float32: Q(s, a) (the minimum over twin critics), None without a Q-critic
    mask: torch.Tensor  # (B, C) bool
    value: torch.Tensor | None = None  # (B,) float32: V(s), with a value head (PPO-GLAM)
    q_critics: torch.Tensor | None = None  # (n_critics, B, C) float32: each critic's Q(s, a)

    @property
    def probs(self) -> torch.Tensor:
        """(B, C): pi(a|s), 0 at padding."""
        return self.log_pi.exp()


@dataclass(frozen=True)
class Episode:
    """One finished episode, the unit the rollout side produces and the replay side stores; or,
    for on-policy rollouts (PPO), a segment of one that the rollout's end cut (`cut`): its value
    bootstraps from s_T and the episode goes on, from s_T, in the next rollout's segment.

    Observations are kept as goal-free state texts (the four state lines and `Action:`), so the
    same states serve the episode's own goal and every relabeled goal: the prompt for goal g is
    `sacglam.envs.observation.with_goal(state, g)`. T = number of steps.
    """

    goal: str
    scene: tuple[str, ...]  # the objects, in scene order (replays the episode with env.reset options)
    states: tuple[str, ...]  # T+1 state texts s_0..s_T (s_T: where the episode ended)
    candidates: tuple[tuple[str, ...], ...]  # T+1 candidate lists
    actions: tuple[int, ...]  # T indices into candidates[t]
    rewards: tuple[float, ...]  # T environment rewards
    terminated: bool  # the last step ended the episode (no bootstrap beyond it): see `success`
    truncated: bool  # the episode hit max_steps (bootstrap from s_T)
    achieved_goals: tuple[tuple[str, ...], ...]  # T social-partner lists, one per step
    cut: bool = False  # a rollout's end stopped it here (neither terminated nor truncated yet)

    @property
    def success(self) -> bool:
        """The episode achieved its goal: it terminated on a rewarded step. A termination without
        reward is a failure some environments end episodes on (a wrong answer, a fall)."""
        return self.terminated and self.rewards[-1] > 0

    def __post_init__(self) -> None:
        T = len(self.actions)
        if not (
            len(self.states) == len(self.candidates) == T + 1 and len(self.rewards) == len(self.achieved_goals) == T
        ):
            raise ValueError(
                f"inconsistent episode: {len(self.states)} states, {len(self.candidates)} candidate lists, "
                f"{T} actions, {len(self.rewards)} rewards, {len(self.achieved_goals)} partner lists "
                "(expected T+1, T+1, T, T, T)"
            )
        if T == 0 or self.terminated + self.truncated + self.cut != 1:
            raise ValueError("an episode has at least one step and ends either terminated, truncated or cut")

    @property
    def length(self) -> int:
        return len(self.actions)


@dataclass(frozen=True)
class ChunkReport:
    """What a rollout worker reports of one collection call (its episodes went to the storage)."""

    env_steps: int  # environment steps taken (vector steps x environments)
    episodes: int  # episodes that ended (terminated or truncated; not the segments a rollout's end cut)
    successes: int  # of which successful (`Episode.success`: terminated on a rewarded step)
    episode_steps: int  # steps of those episodes
    policy_version: int  # the oldest weights version that chose an action (-1: uniform-random actions only)
    goal_outcomes: tuple[tuple[str, bool], ...] = ()  # (goal, success) of each episode that ended, in order
    reported_goals: tuple[str, ...] = ()  # the distinct goals the social partner reported in the chunk's steps
    rewarded_steps: int = 0  # steps with a nonzero reward (a learning signal) in the chunk's episodes and segments


@dataclass(frozen=True)
class GoalPlan:
    """The goal sampler's distribution over the goals it knows, as rollout workers draw from it.

    `goals[i]` is drawn with probability given by Walker's alias table (`accept`, `alias`): pick a
    column i uniformly, keep it with probability `accept[i]`, else take `alias[i]`; O(1) per draw
    whatever the number of goals. `environment_share` of the episodes (and every episode while
    `goals` is empty) keep the environment's own goal draw.
    """

    goals: tuple[str, ...] = ()
    accept: tuple[float, ...] = ()
    alias: tuple[int, ...] = ()
    environment_share: float = 0.0
    version: int = 0  # the sampler's build count: a worker holding this version needs no new copy

    def draw(self, rng: Any) -> str | None:
        """A goal, or None for the environment's own draw; `rng` is a `numpy.random.Generator`."""
        if not self.goals or (self.environment_share > 0 and rng.random() < self.environment_share):
            return None
        i = int(rng.integers(len(self.goals)))
        return self.goals[i] if rng.random() < self.accept[i] else self.goals[self.alias[i]]


@dataclass(frozen=True)
class Relabel:
    """A hindsight goal for the first `length` steps of an episode: reward 1 at step length-1,
    which terminates the relabeled episode (HER with the social partner's goals)."""

    goal: str
    length: int  # k + 1 for a goal reported at step k


@dataclass(frozen=True)
class TransitionBatch:
    """B sampled transitions with n-step targets (n-step quantities derived at sample time).

    `reward` is the discounted sum over the k <= n steps taken, `discount` is gamma^k, and
    `terminal` says the episode terminated within them (then the target does not bootstrap; a
    truncation bootstraps from `next_observations`).
    """

    observations: list[str]  # B prompts (goal line + state) at s_t
    candidates: list[tuple[str, ...]]  # B candidate lists (shared with the buffer: do not mutate)
    actions: torch.Tensor  # (B,) long: index of a_t among candidates
    reward: torch.Tensor  # (B,) float32
    discount: torch.Tensor  # (B,) float32
    terminal: torch.Tensor  # (B,) bool
    next_observations: list[str]  # B prompts at s_{t+k}
    next_candidates: list[tuple[str, ...]]
    relabeled: torch.Tensor  # (B,) bool: the transition comes from a hindsight relabel
    goals: list[str]  # B goals the transitions are conditioned on
    # B goal types (the environment's names: `grasp`, `grow`, ...) of `goals`; empty in a batch
    # pickled before the field existed (a checkpoint's prefetched batch).
    goal_types: Sequence[str] = ()
