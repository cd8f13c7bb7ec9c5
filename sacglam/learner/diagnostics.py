"""What a learner step tells about its own health, as pure functions of its tensors.

They answer the questions a run that fails to generalise raises (docs/reference/metrics.md, "Learner
diagnostics"): does the policy keep its entropy on every goal type, which goal types fill the
relabeled share of a batch, and which loss moves the weights that the actor and the critic share.
Nothing here steps an optimizer or logs: the learner passes tensors in and metrics out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

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


def gradient_split(
    critic_grads: Sequence[torch.Tensor | None], policy_grads: Iterable[torch.Tensor | None]
) -> dict[str, float]:
    """Each loss's gradient norm, over every weight it reaches and over the weights both reach
    (`shared`: a parameter both gradients are given for), and the cosine of the two on the shared
    weights (0 when either is zero there). The two sequences run over the same parameters; a
    gradient is None for a weight its loss does not reach. `policy_grads` may be a generator: each
    tensor is read once and may be dropped after (the learner forms the policy's from the total
    and the critic's one parameter at a time, so no second copy of every gradient is held). Sums
    are float64 on the gradients' device, with one transfer at the end.

    `grad_norm/critic`, `grad_norm/policy`, `grad_norm/critic_shared`, `grad_norm/policy_shared`,
    `grad_cosine/shared`; the shared figures are 0 when no weight is shared."""
    sums: dict[str, torch.Tensor | float] = dict.fromkeys(
        ("critic", "policy", "critic_shared", "policy_shared", "dot"), 0.0
    )
    for critic, policy in zip(critic_grads, policy_grads, strict=True):
        c = critic.detach().double() if critic is not None else None
        p = policy.detach().double() if policy is not None else None
        if c is not None:
            sums["critic"] = sums["critic"] + c.square().sum()
        if p is not None:
            sums["policy"] = sums["policy"] + p.square().sum()
        if c is not None and p is not None:
            sums["critic_shared"] = sums["critic_shared"] + c.square().sum()
            sums["policy_shared"] = sums["policy_shared"] + p.square().sum()
            sums["dot"] = sums["dot"] + (c * p).sum()
    values = {k: float(v) for k, v in sums.items()}  # one transfer per figure, at the end
    norms = math.sqrt(values["critic_shared"]) * math.sqrt(values["policy_shared"])
    return {
        "grad_norm/critic": math.sqrt(values["critic"]),
        "grad_norm/policy": math.sqrt(values["policy"]),
        "grad_norm/critic_shared": math.sqrt(values["critic_shared"]),
        "grad_norm/policy_shared": math.sqrt(values["policy_shared"]),
        "grad_cosine/shared": values["dot"] / norms if norms > 0 else 0.0,
    }
