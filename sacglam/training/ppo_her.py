"""PPO with HER (paper appendix G): relabeled transitions for one on-policy rollout.

Within the rollout, each environment's steps split into episode segments. A train goal g' that the
social partner reported at step k of a segment relabels the segment's steps up to k with g':
reward 1 and termination at k, 0 before. The action and the behaviour policy's probabilities stay
those of the original goal g (they are what was sampled), so the importance ratio of a relabeled
transition is pi(a|s, g') / pi_old(a|s, g) and is not 1 even at the first epoch. Advantages come
from GAE over the relabeled segment with the current value head on (s, g').
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sacglam.envs.goals import is_subgoal
from sacglam.envs.observation import with_goal
from sacglam.learner.ppo_losses import generalized_advantages


@dataclass
class StepRecord:
    """What the rollout kept of one vector step, per environment (N of them)."""

    states: list[str]  # goal-free state texts
    goals: list[str]
    candidates: list[list[str]]
    actions: list[int]
    old_log_prob: torch.Tensor  # (N,)
    behavior_log_pi: torch.Tensor  # (N, C) -inf at padding
    reported: list[tuple[str, ...]]  # the partner's train goals after the step
    ended: list[bool]  # terminated or truncated at this step


@dataclass
class RelabeledSegment:
    env: int
    start: int  # first step (rollout time index)
    end: int  # the step the goal was reported at (inclusive)
    goal: str


def relabel_candidates(records: list[StepRecord], aligned: bool) -> list[RelabeledSegment]:
    """Every (segment prefix, reported goal) pair the rollout offers, in rollout order."""
    out = []
    n_envs = len(records[0].states)
    for env in range(n_envs):
        start = 0
        for t, record in enumerate(records):
            own = record.goals[env]
            for goal in record.reported[env]:
                if goal != own and (not aligned or is_subgoal(goal, own)):
                    out.append(RelabeledSegment(env, start, t, goal))
            if record.ended[env]:
                start = t + 1
    return out


@torch.no_grad()
def relabeled_transitions(agent, records: list[StepRecord], segments: list[RelabeledSegment], gamma: float,
                          lam: float, centered: bool) -> dict:
    """Flat relabeled transitions of `segments`: observations, candidates, actions, old log-probs
    (behaviour, original goal), behaviour log-pi rows, advantages, returns, clip centres."""
    rows = [(s, t) for s in segments for t in range(s.start, s.end + 1)]
    observations = [with_goal(records[t].states[s.env], s.goal) for s, t in rows]
    candidates = [records[t].candidates[s.env] for s, t in rows]
    actions = torch.tensor([records[t].actions[s.env] for s, t in rows], dtype=torch.long)
    old_log_prob = torch.stack([records[t].old_log_prob[s.env] for s, t in rows])
    width = max(r.behavior_log_pi.shape[1] for r in records)
    behavior = torch.full((len(rows), width), float("-inf"))
    for i, (s, t) in enumerate(rows):
        row = records[t].behavior_log_pi[s.env]
        behavior[i, : row.shape[0]] = row
    out = agent(agent.encode(observations, candidates))
    values = out.value.float().cpu()
    first_log_prob = out.log_pi.float().cpu().gather(1, actions[:, None]).squeeze(1)
    advantages = torch.zeros(len(rows))
    at = 0
    for s in segments:
        length = s.end - s.start + 1
        rewards = torch.zeros(length, 1)
        rewards[-1] = 1.0
        terminated = torch.zeros(length, 1, dtype=torch.bool)
        terminated[-1] = True
        adv, _ = generalized_advantages(
            rewards, values[at : at + length, None], terminated, torch.zeros_like(terminated),
            torch.zeros(length, 1), torch.zeros(1), gamma, lam,
        )
        advantages[at : at + length] = adv[:, 0]
        at += length
    center = (first_log_prob - old_log_prob).exp() if centered else torch.ones(len(rows))
    return {
        "observations": observations, "candidates": candidates, "actions": actions, "old_log_prob": old_log_prob,
        "behavior_log_pi": behavior, "advantages": advantages, "returns": advantages + values, "clip_center": center,
    }


def choose_segments(segments: list[RelabeledSegment], budget: int, generator: torch.Generator) -> list[RelabeledSegment]:
    """A random subset of whole segments with at most `budget` transitions in total."""
    chosen, used = [], 0
    for i in torch.randperm(len(segments), generator=generator).tolist():
        length = segments[i].end - segments[i].start + 1
        if used + length <= budget:
            chosen.append(segments[i])
            used += length
    return sorted(chosen, key=lambda s: (s.env, s.start, s.end, s.goal))
