"""What a learner step tells about its own health, as pure functions of its tensors.

They answer the questions a run that fails to generalise raises (docs/reference/metrics.md, "Learner
diagnostics"): does the policy keep its entropy on every goal type, which goal types fill the
relabeled share of a batch, and which loss moves the weights that the actor and the critic share.
Nothing here steps an optimizer or logs: the learner passes tensors in and metrics out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch


def mean_by_type(values: torch.Tensor, goal_types: Sequence[str], prefix: str) -> dict[str, float]:
    """`{prefix/<type>: mean of values over the rows of that goal type}` for the types present.
    values: (B,); goal_types: B names (empty: no goal types known, nothing returned)."""
    if not goal_types:
        return {}
    if len(goal_types) != values.shape[0]:
        raise ValueError(f"{len(goal_types)} goal types for {values.shape[0]} rows")
    rows: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(goal_types):
        rows[name].append(i)
    flat = values.detach().float().cpu()
    return {f"{prefix}/{name}": float(flat[index].mean()) for name, index in rows.items()}


def share_by_type(goal_types: Sequence[str], selected: torch.Tensor, prefix: str) -> dict[str, float]:
    """`{prefix/<type>: share of the selected rows whose goal has that type}` (the types among the
    selected rows; nothing when no row is selected). selected: (B,) bool."""
    chosen = [name for name, keep in zip(goal_types, selected.tolist(), strict=True) if keep]
    if not chosen:
        return {}
    counts: dict[str, int] = defaultdict(int)
    for name in chosen:
        counts[name] += 1
    return {f"{prefix}/{name}": count / len(chosen) for name, count in counts.items()}


def _flat(grads: Sequence[torch.Tensor | None], like: Sequence[torch.Tensor]) -> torch.Tensor:
    """The gradients as one float64 vector (None: zeros of the parameter's size)."""
    parts = [
        (g if g is not None else torch.zeros_like(p)).detach().reshape(-1).double().cpu()
        for g, p in zip(grads, like, strict=True)
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def gradient_split(
    params: Sequence[torch.Tensor],
    critic_grads: Sequence[torch.Tensor | None],
    policy_grads: Sequence[torch.Tensor | None],
) -> dict[str, float]:
    """Each loss's gradient norm, over every weight it reaches and over the weights both reach
    (`shared`: a parameter both gradients are given for), and the cosine of the two on the shared
    weights (0 when either is zero there). A gradient is None for a weight its loss does not reach.

    `grad_norm/critic`, `grad_norm/policy`, `grad_norm/critic_shared`, `grad_norm/policy_shared`,
    `grad_cosine/shared`; the shared figures are 0 when no weight is shared."""
    shared = [
        i for i, (c, p) in enumerate(zip(critic_grads, policy_grads, strict=True)) if c is not None and p is not None
    ]
    critic_all = _flat(critic_grads, params)
    policy_all = _flat(policy_grads, params)
    critic_shared = _flat([critic_grads[i] for i in shared], [params[i] for i in shared])
    policy_shared = _flat([policy_grads[i] for i in shared], [params[i] for i in shared])
    norms = critic_shared.norm() * policy_shared.norm()
    cosine = float(critic_shared @ policy_shared / norms) if float(norms) > 0 else 0.0
    return {
        "grad_norm/critic": float(critic_all.norm()),
        "grad_norm/policy": float(policy_all.norm()),
        "grad_norm/critic_shared": float(critic_shared.norm()),
        "grad_norm/policy_shared": float(policy_shared.norm()),
        "grad_cosine/shared": cosine,
    }
