"""One on-policy rollout, from the segments the rollout workers recorded to PPO's training rows.

A rollout is a list of episode segments (`Episode`s: finished episodes, and the open ones the
rollout's end cut). The learner holds the very weights that acted (the driver syncs them before
every rollout, so the policy lag is 0), so it recomputes here, in one no-grad pass, what the acting
forward saw: the behaviour policy's log-probabilities and the value head on every state.

- **GAE per segment** (`generalized_advantages`, one segment per column): a terminated segment
  bootstraps from 0, a truncated or cut one from V(s_T).
- **Value targets** (`ppo.value_target`): the discounted reward-to-go, bootstrapped from V(s_T)
  where a segment does not terminate (lamorel's, which is GAE's return at lambda = 1), or GAE's
  return, advantage + V(s) at the configured lambda.
- **HER** (paper appendix G, `ppo.her`): the relabel rule is `sacglam.her`'s (a goal the social
  partner reported at step k relabels steps 0..k, reward 1 and termination at k), applied to each
  segment; `her_aligned` keeps sub-goals of the segment's goal only. At most `her_ratio` relabeled
  transitions per environment transition are kept, as a random subset of whole relabels. A
  relabeled transition keeps the action and the behaviour probabilities of the original goal (they
  are what was sampled), so its ratio pi(a|s, g') / pi_old(a|s, g) is not 1 at the first epoch;
  its advantages come from GAE over the relabeled prefix with the value head on (s, g').
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sacglam.config import PPOConfig
from sacglam.envs.goals import is_subgoal
from sacglam.envs.protocol import with_goal
from sacglam.her import hindsight_relabels
from sacglam.learner.ppo import Rollout
from sacglam.learner.ppo_losses import generalized_advantages
from sacglam.models.agent import GLAMAgent
from sacglam.types import Episode, Relabel

FORWARD_STATES = 256  # states per no-grad forward (bounds the memory of one pass)


@torch.no_grad()
def _forward(
    agent: GLAMAgent, prompts: Sequence[str], candidates: Sequence[Sequence[str]]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per state: log pi over its candidates ((C_i,) tensors), and V(s) (S,); CPU float32."""
    log_pis, values = [], []
    for start in range(0, len(prompts), FORWARD_STATES):
        end = start + FORWARD_STATES
        out = agent(agent.encode(prompts[start:end], candidates[start:end]))
        log_pi, counts = out.log_pi.float().cpu(), out.mask.sum(-1).tolist()
        log_pis += [log_pi[i, :n] for i, n in enumerate(counts)]
        values.append(out.value.float().cpu())
    return log_pis, torch.cat(values)


def _advantages_and_returns(
    rewards: list[list[float]], values: list[torch.Tensor], terminated: list[bool], cfg: PPOConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated advantages and value targets (`ppo.value_target`) of the segments, each (sum T_i,)."""
    advantages = torch.cat(_segment_advantages(rewards, values, terminated, cfg.gamma, cfg.gae_lambda))
    own_values = torch.cat([v[: len(r)] for r, v in zip(rewards, values, strict=True)])
    if cfg.value_target == "gae":
        return advantages, advantages + own_values
    to_go = torch.cat(_segment_advantages(rewards, values, terminated, cfg.gamma, 1.0))  # lambda 1: R_t - V(s_t)
    return advantages, to_go + own_values


def _segment_advantages(
    rewards: list[list[float]], values: list[torch.Tensor], terminated: list[bool], gamma: float, lam: float
) -> list[torch.Tensor]:
    """GAE of each segment: `values[i]` holds V(s_0..s_T) (T+1 entries), `rewards[i]` T rewards;
    segment i ends terminated (no bootstrap) or not (bootstrap from V(s_T)). -> (T_i,) each."""
    longest = max(len(r) for r in rewards)
    S = len(rewards)
    R, V = torch.zeros(longest, S), torch.zeros(longest, S)
    term, trunc = torch.zeros(longest, S, dtype=torch.bool), torch.zeros(longest, S, dtype=torch.bool)
    final = torch.zeros(longest, S)
    for i, (r, v) in enumerate(zip(rewards, values, strict=True)):
        T = len(r)
        R[:T, i], V[:T, i] = torch.tensor(r), v[:T]
        term[T - 1, i], trunc[T - 1, i] = terminated[i], not terminated[i]
        final[T - 1, i] = v[T]
    advantages, _ = generalized_advantages(R, V, term, trunc, final, torch.zeros(S), gamma, lam)
    return [advantages[: len(r), i] for i, r in enumerate(rewards)]


def _padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """(C_i,) rows -> (N, max C_i), -inf at padding."""
    out = torch.full((len(rows), max(len(r) for r in rows)), float("-inf"))
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def choose_relabels(
    relabels: list[tuple[int, Relabel]], budget: int, rng: np.random.Generator
) -> list[tuple[int, Relabel]]:
    """A random subset of whole relabels ((segment index, relabel) pairs) with at most `budget`
    transitions in total, in their original order."""
    chosen, used = [], 0
    for i in rng.permutation(len(relabels)).tolist():
        length = relabels[i][1].length
        if used + length <= budget:
            chosen.append(i)
            used += length
    return [relabels[i] for i in sorted(chosen)]


def rollout_from_segments(
    agent: GLAMAgent, segments: Sequence[Episode], cfg: PPOConfig, rng: np.random.Generator
) -> tuple[Rollout, int]:
    """The training rows of one rollout (its own transitions, then the relabeled ones) and the
    number of relabeled transitions among them."""
    if not segments:
        raise ValueError("an empty rollout: the rollout workers handed no segment to the rollout storage")
    prompts = [with_goal(state, s.goal) for s in segments for state in s.states]
    candidates = [list(c) for s in segments for c in s.candidates]
    log_pis, values = _forward(agent, prompts, candidates)
    starts = np.cumsum([0] + [len(s.states) for s in segments])
    per_segment_values = [values[a:b] for a, b in zip(starts[:-1], starts[1:])]
    adv, returns = _advantages_and_returns(
        [list(s.rewards) for s in segments], per_segment_values, [s.terminated for s in segments], cfg
    )
    rows = [(i, t) for i, s in enumerate(segments) for t in range(s.length)]  # transitions, without each s_T
    flat = [starts[i] + t for i, t in rows]
    actions = torch.tensor([segments[i].actions[t] for i, t in rows], dtype=torch.long)
    behavior = [log_pis[k] for k in flat]
    old_log_prob = torch.stack([row[a] for row, a in zip(behavior, actions.tolist())])
    parts: dict[str, Any] = {
        "observations": [prompts[k] for k in flat],
        "candidates": [candidates[k] for k in flat],
        "actions": actions,
        "old_log_prob": old_log_prob,
        "advantages": adv,
        "returns": returns,
        "behavior": behavior,
        "clip_center": torch.ones(len(rows)),
    }
    added = 0
    if cfg.her:
        relabeled = _relabeled_rows(agent, segments, rows, parts, cfg, rng)
        added = len(relabeled["actions"])
        for key in ("observations", "candidates", "behavior"):
            parts[key] = parts[key] + relabeled[key]
        for key in ("actions", "old_log_prob", "advantages", "returns", "clip_center"):
            parts[key] = torch.cat([parts[key], relabeled[key]])
    behavior_log_pi = _padded(parts.pop("behavior"))
    is_relabeled = torch.arange(len(parts["actions"])) >= len(rows)  # own rows first, then the relabeled ones
    return Rollout(**parts, behavior_log_pi=behavior_log_pi, relabeled=is_relabeled), added


def _relabeled_rows(
    agent: GLAMAgent,
    segments: Sequence[Episode],
    rows: list[tuple[int, int]],
    own: dict,
    cfg: PPOConfig,
    rng: np.random.Generator,
) -> dict:
    """Relabeled transitions (see the module docstring): the same keys as the rollout's own rows."""
    aligned = (lambda goal, relabel: is_subgoal(relabel, goal)) if cfg.her_aligned else None
    offers = [(i, r) for i, s in enumerate(segments) for r in hindsight_relabels(s, goal_filter=aligned)]
    chosen = choose_relabels(offers, int(cfg.her_ratio * len(rows)), rng)
    empty = {"observations": [], "candidates": [], "behavior": [], "actions": torch.zeros(0, dtype=torch.long)}
    if not chosen:
        return empty | {k: torch.zeros(0) for k in ("old_log_prob", "advantages", "returns", "clip_center")}
    row_of = {pair: k for k, pair in enumerate(rows)}
    picked = [(i, t, r.goal) for i, r in chosen for t in range(r.length)]
    own_rows = [row_of[(i, t)] for i, t, _ in picked]
    prompts = [with_goal(segments[i].states[t], goal) for i, t, goal in picked]
    candidates = [own["candidates"][k] for k in own_rows]
    log_pis, values = _forward(agent, prompts, candidates)
    actions = own["actions"][own_rows]
    old_log_prob = own["old_log_prob"][own_rows]  # the behaviour's, for the original goal
    lengths = [r.length for _, r in chosen]
    bounds = np.cumsum([0] + lengths)
    advantages, returns = _advantages_and_returns(
        [[0.0] * (n - 1) + [1.0] for n in lengths],
        [torch.cat([values[a:b], torch.zeros(1)]) for a, b in zip(bounds[:-1], bounds[1:])],
        [True] * len(lengths),
        cfg,
    )
    first_log_prob = torch.stack([row[a] for row, a in zip(log_pis, actions.tolist())])
    center = (first_log_prob - old_log_prob).exp() if cfg.her_centered else torch.ones(len(picked))
    return {
        "observations": prompts,
        "candidates": candidates,
        "behavior": [own["behavior"][k] for k in own_rows],
        "actions": actions,
        "old_log_prob": old_log_prob,
        "advantages": advantages,
        "returns": returns,
        "clip_center": center,
    }
