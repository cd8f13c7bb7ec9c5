"""PPO-GLAM's pure functions: generalized advantage estimation and the clipped PPO losses.

GAE over a rollout of T steps in N environments (same-step auto-reset): the chain of advantages
is cut at every episode end. A terminated step bootstraps from 0; a truncated step bootstraps
from V of the state it stopped in (`final_values`), because truncation is not termination.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def generalized_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (both (T, N)).

    Args:
        rewards, values: (T, N): r_t and V(s_t).
        terminated, truncated: (T, N) bool: the episode ended at step t.
        final_values: (T, N): V of the state a truncated episode stopped in (ignored elsewhere).
        last_values: (N,): V(s_T) of the states the rollout stopped in (bootstrap of step T-1).
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(last_values)
    for t in reversed(range(T)):
        following = last_values if t == T - 1 else values[t + 1]
        next_value = torch.where(truncated[t], final_values[t], following)
        next_value = torch.where(terminated[t], torch.zeros_like(next_value), next_value)
        ended = terminated[t] | truncated[t]
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lam * torch.where(ended, torch.zeros_like(next_advantage), next_advantage)
        advantages[t] = next_advantage
    return advantages, advantages + values


class PPOLosses(NamedTuple):
    policy: torch.Tensor  # scalar: clipped surrogate, to minimise
    value: torch.Tensor  # scalar: 0.5 E[(V - R)^2]
    entropy: torch.Tensor  # scalar: mean policy entropy (a bonus: subtracted in the total)
    total: torch.Tensor  # policy + vf_coef * value - ent_coef * entropy
    clip_fraction: torch.Tensor  # scalar, detached: share of ratios outside [1 - clip, 1 + clip]
    approx_kl: torch.Tensor  # scalar, detached: E[(ratio - 1) - log ratio]


def ppo_losses(
    log_pi: torch.Tensor,
    mask: torch.Tensor,
    actions: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    clip: float,
    vf_coef: float,
    ent_coef: float,
    normalize_advantages: bool = True,
) -> PPOLosses:
    """Clipped PPO (Schulman et al., 2017) over each state's candidates.

    Shapes: log_pi, mask (B, C); actions, old_log_prob, advantages, returns, values (B,).
    """
    if normalize_advantages and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    new_log_prob = log_pi.gather(1, actions[:, None]).squeeze(1)
    log_ratio = new_log_prob - old_log_prob
    ratio = log_ratio.exp()
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    policy = -surrogate.mean()
    value = 0.5 * (values - returns).pow(2).mean()
    clean = log_pi.masked_fill(~mask, 0.0)  # no 0 * -inf in the backward pass
    entropy = -(clean.exp() * clean).masked_fill(~mask, 0.0).sum(-1).mean()
    with torch.no_grad():
        clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
    return PPOLosses(policy, value, entropy, policy + vf_coef * value - ent_coef * entropy, clip_fraction, approx_kl)
