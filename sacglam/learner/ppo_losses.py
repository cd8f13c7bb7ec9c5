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
    policy: torch.Tensor  # scalar: the policy loss (clipped surrogate or KL-penalised), to minimise
    value: torch.Tensor  # scalar: E[(V - R)^2], or E[max((V - R)^2, (V_clipped - R)^2)] with old values
    entropy: torch.Tensor  # scalar: mean policy entropy (a bonus: subtracted in the total)
    total: torch.Tensor  # policy + vf_coef * value - ent_coef * entropy
    clip_fraction: torch.Tensor  # scalar, detached: share of ratios outside [center - clip, center + clip]
    approx_kl: torch.Tensor  # scalar, detached: E[(ratio - 1) - log ratio]


def candidate_kl(behavior_log_pi: torch.Tensor, log_pi: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(behaviour || pi) over each state's candidates. (B, C) x2 + mask -> (B,)"""
    b = behavior_log_pi.masked_fill(~mask, 0.0)
    p = log_pi.masked_fill(~mask, 0.0)
    return (b.exp() * (b - p)).masked_fill(~mask, 0.0).sum(-1)


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages scaled to mean 0 and standard deviation 1 (unchanged for a single one)."""
    if advantages.numel() <= 1:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


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
    loss: str = "clip",
    kl_coef: float = 0.0,
    clip_center: torch.Tensor | None = None,
    behavior_log_pi: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
) -> PPOLosses:
    """PPO (Schulman et al., 2017) over each state's candidates, with the paper's appendix G options.

    Shapes: log_pi, mask (B, C); actions, old_log_prob, advantages, returns, values, old_values (B,).
    - The value loss is E[(V - R)^2] weighted by `vf_coef` (lamorel's PPO, GLAM's code: no 0.5);
      with `old_values` (V_old(s), from the weights that acted) it is clipped as lamorel clips it,
      E[max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2)], with the policy's `clip`.
    - `loss="clip"`: -E[min(r A, clip(r, c - clip, c + clip) A)], c = `clip_center` (B,) or 1.
    - `loss="kl"`: -E[r A] + kl_coef E[KL(pi_old(.|s, g) || pi(.|s, g'))], with `behavior_log_pi`
      (B, C) the behaviour policy's log-probs over the same candidates (for the original goal g).
    The ratio r is pi(a|s, g') / pi_old(a|s, g): for a relabeled transition it is not 1 even at
    the first epoch.
    """
    if normalize_advantages:
        advantages = normalized(advantages)
    new_log_prob = log_pi.gather(1, actions[:, None]).squeeze(1)
    log_ratio = new_log_prob - old_log_prob
    ratio = log_ratio.exp()
    center = torch.ones_like(ratio) if clip_center is None else clip_center
    if loss == "clip":
        clipped = torch.clamp(ratio, center - clip, center + clip)
        policy = -torch.minimum(ratio * advantages, clipped * advantages).mean()
    elif loss == "kl":
        if behavior_log_pi is None:
            raise ValueError("loss='kl' needs behavior_log_pi, the behaviour policy's log-probs over the candidates")
        policy = -(ratio * advantages).mean() + kl_coef * candidate_kl(behavior_log_pi, log_pi, mask).mean()
    else:
        raise ValueError(f"unknown PPO loss {loss!r}; choose 'clip' or 'kl'")
    value_error = (values - returns).pow(2)
    if old_values is not None:
        clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
        value_error = torch.maximum(value_error, (clipped_values - returns).pow(2))
    value = value_error.mean()
    clean = log_pi.masked_fill(~mask, 0.0)  # no 0 * -inf in the backward pass
    entropy = -(clean.exp() * clean).masked_fill(~mask, 0.0).sum(-1).mean()
    with torch.no_grad():
        clip_fraction = ((ratio - center).abs() > clip).float().mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
    return PPOLosses(policy, value, entropy, policy + vf_coef * value - ent_coef * entropy, clip_fraction, approx_kl)
