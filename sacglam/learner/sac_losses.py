"""Discrete Soft Actor-Critic losses for a policy over variable candidate sets, as pure functions.

Discrete SAC (Christodoulou, 2019) as adapted by SAC-GLAM (paper section 2): the expectations over
actions are exact sums over each state's candidates, weighted by pi. States have different numbers
of candidates, so every (B, C) tensor comes with a (B, C) bool `mask`; padding slots never
contribute (they are selected out with `torch.where`, never multiplied by 0, so a -inf log-prob
cannot turn into NaN).

Nothing here steps an optimizer, logs, or touches the models: the learner calls these functions
with the agent's outputs and owns the optimizers.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

ActorLoss = Literal["reverse_kl", "forward_kl"]


class SACLosses(NamedTuple):
    critic: torch.Tensor  # scalar
    policy: torch.Tensor  # scalar
    alpha: torch.Tensor  # scalar
    entropy: torch.Tensor  # scalar: mean policy entropy over the batch (nats), detached
    q_target: torch.Tensor  # (B,): the regression target y, detached


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over candidates (last dim), ignoring padding."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(-1)


def _clean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Padding set to 0 before any arithmetic. Selecting it out afterwards is not enough: the
    backward of pi * log pi at log pi = -inf is 0 * inf = NaN, even behind a `where`."""
    return values.masked_fill(~mask, 0.0)


def soft_state_value(
    log_pi: torch.Tensor, q: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """V(s) = sum_a pi(a|s) [Q(s, a) - alpha log pi(a|s)] over each state's candidates. -> (B,)"""
    log_pi, q = _clean(log_pi, mask), _clean(q, mask)
    return _masked_sum(log_pi.exp() * (q - alpha * log_pi), mask)


@torch.no_grad()
def n_step_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    terminal: torch.Tensor,
    next_log_pi: torch.Tensor,
    next_q_target: torch.Tensor,
    next_mask: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """The paper's eq. 3: y = sum_{i<k} gamma^i r_{t+i} + gamma^k (1 - terminal) V_target(s_{t+k}).

    Args:
        reward: (B,) the discounted reward sum over the k <= n steps taken.
        discount: (B,) gamma^k.
        terminal: (B,) bool, the episode terminated within those k steps (no bootstrap). A
            truncation is not terminal: it bootstraps from the state it stopped in.
        next_log_pi: (B, C') log pi(.|s_{t+k}) from the current policy.
        next_q_target: (B, C') Q_target(s_{t+k}, .); with twin critics, the element-wise minimum.
        next_mask: (B, C') candidates of s_{t+k}: at least one in every row that is not terminal
            (a row without any would get V = 0; the encoder refuses a state without candidates).
        alpha: the entropy coefficient.
    Returns (B,), without gradient.
    """
    value = soft_state_value(next_log_pi, next_q_target, next_mask, alpha)
    return reward + discount * torch.where(terminal, torch.zeros_like(value), value)


def critic_loss(q_taken: torch.Tensor, q_target: torch.Tensor) -> torch.Tensor:
    """Mean squared TD error, halved: 0.5 E[(Q(s, a) - y)^2]. `q_taken` is (B,) or (n_critics, B)
    (twin critics: the losses add up)."""
    error = q_taken - q_target.detach()
    return 0.5 * error.pow(2).mean(-1).sum()


def policy_loss(log_pi: torch.Tensor, q: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """E_s[ sum_a pi(a|s) (alpha log pi(a|s) - Q(s, a)) ]: the critic is held fixed (Q detached),
    so this loss moves only the policy."""
    log_pi, q = _clean(log_pi, mask), _clean(q.detach(), mask)
    return _masked_sum(log_pi.exp() * (alpha * log_pi - q), mask).mean()


def forward_kl_policy_loss(
    log_pi: torch.Tensor, q: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """E_s[ KL(softmax(Q(s, .)/alpha) || pi(.|s)) ] up to a constant: the cross-entropy
    -sum_a p(a|s) log pi(a|s) towards the Boltzmann policy p = softmax(Q/alpha) over each state's
    candidates (Q held fixed). The reverse KL of `policy_loss` has the same minimiser, but its
    gradient on an action's logit is scaled by pi(a|s): an action the policy gives 1% of its mass
    barely moves however high its Q. Here that gradient is pi(a|s) - p(a|s), so an action the
    critic ranks first is pulled up in proportion to p, whatever pi gives it now."""
    scaled = (q.detach() / alpha).masked_fill(~mask, float("-inf"))
    target = scaled.log_softmax(-1).exp()  # 0 at padding
    return -_masked_sum(target * _clean(log_pi, mask), mask).mean()


def entropy(log_pi: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """H(pi(.|s)) in nats. (B, C) -> (B,)"""
    log_pi = _clean(log_pi, mask)
    return -_masked_sum(log_pi.exp() * log_pi, mask)


def entropy_targets(mask: torch.Tensor, target_entropy: float, ratio: float | None) -> torch.Tensor | float:
    """Per-state entropy targets (B,) as `ratio` * log(number of candidates), or the constant
    `target_entropy` when `ratio` is None."""
    if ratio is None:
        return target_entropy
    return ratio * mask.sum(-1).to(torch.float32).log()


def alpha_loss(
    log_alpha: torch.Tensor, log_pi: torch.Tensor, mask: torch.Tensor, target_entropy: torch.Tensor | float
) -> torch.Tensor:
    """Automatic entropy tuning: log_alpha * (H(pi) - target) averaged over states (`target_entropy`
    a scalar or one target per state, (B,)). Its gradient
    lowers alpha when the policy's entropy is above the target and raises it below; only
    `log_alpha` receives a gradient (the policy is detached)."""
    return (log_alpha * (entropy(log_pi.detach(), mask) - target_entropy)).mean()


def sac_losses(
    *,
    log_pi: torch.Tensor,
    q_taken: torch.Tensor,
    q_all: torch.Tensor,
    mask: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    terminal: torch.Tensor,
    next_log_pi: torch.Tensor,
    next_q_target: torch.Tensor,
    next_mask: torch.Tensor,
    log_alpha: torch.Tensor,
    target_entropy: torch.Tensor | float,
    actor_loss: ActorLoss = "reverse_kl",
    critic_entropy: bool = True,
) -> SACLosses:
    """All three losses for one batch.

    Shapes: log_pi, q_all, mask (B, C) at s_t; q_taken (B,) or (n_critics, B) = Q(s_t, a_t);
    next_* (B, C') at s_{t+k}; reward, discount, terminal (B,); log_alpha a scalar parameter.
    `q_all` is the critic's Q(s_t, .) used by the policy loss (min over twins; detached there).
    `actor_loss`: SAC's `reverse_kl` (`policy_loss`) or `forward_kl` (`forward_kl_policy_loss`).
    `critic_entropy=False` decouples the critic from the entropy: its target's next-state value
    is sum_a pi Q, without the -alpha log pi bonus (alpha then acts on the actor alone).
    """
    alpha = log_alpha.detach().exp()
    target_alpha = alpha if critic_entropy else torch.zeros_like(alpha)
    y = n_step_target(reward, discount, terminal, next_log_pi.detach(), next_q_target.detach(), next_mask, target_alpha)
    policy = (forward_kl_policy_loss if actor_loss == "forward_kl" else policy_loss)(log_pi, q_all, mask, alpha)
    return SACLosses(
        critic=critic_loss(q_taken, y),
        policy=policy,
        alpha=alpha_loss(log_alpha, log_pi, mask, target_entropy),
        entropy=entropy(log_pi.detach(), mask).mean(),
        q_target=y,
    )


@torch.no_grad()
def polyak_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target, parameter by parameter (same structure)."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.lerp_(o, tau)
