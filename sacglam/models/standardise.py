"""Per-dimension standardisation of a critic's input features, with running statistics.

A pre-trained LLM's last hidden states are far from zero-mean, unit-scale inputs: SmolLM2-135M's
have L2 norm about 49, one dimension near 35 in every vector, and most of their energy in a mean
vector that every state and action shares, so the part that depends on the goal is a small
offset on a large constant. A LayerNorm cannot remove that (it normalises within one vector; the
shared direction stays); subtracting each dimension's mean over the data and dividing by its
standard deviation does. The statistics are those of every feature vector the critic has been
trained on (Chan et al.'s parallel merge of batch moments: constant cost per update, whatever the
run's length), like an RL observation normaliser; they are buffers, not weights: no gradient
reaches them, they are checkpointed and broadcast with the weights (`GLAMAgent.trainable_state_dict`),
and a target critic reads the online statistics.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

VARIANCE_FLOOR = 1e-2
"""Added to each dimension's variance: a dimension that is (nearly) constant over the data is
scaled by at most 10 rather than by the inverse of its rounding noise (a bfloat16 base rounds
features of magnitude 32-64 to steps of 0.25: noise of standard deviation about 0.07), and the
critic's gradient into the shared LLM is amplified by at most 10 along it. SmolLM2-135M's
features spread with a standard deviation of about 0.5 per dimension: most are scaled fully."""
CLIP = 10.0
"""Standardised features are clipped to +-CLIP: an input far outside what the statistics have
seen cannot blow up the critic's first layer."""


class RunningStandardiser(nn.Module):
    """x -> clip((x - mean) / sqrt(var + VARIANCE_FLOOR), +-CLIP), per dimension.

    `mean` and `var` (population variance) are those of every vector passed through `forward`
    while `learning` is set and gradients are enabled (a learner's update:
    `GLAMAgent.learning_critic_statistics`), counted in `count`. Every other forward (acting,
    evaluation, a target critic's next-state values under no_grad) reads the statistics and
    leaves them. A learner's first update primes them with its batch before computing any
    target (`GLAMAgent.prime_critic_statistics`; that batch then counts twice). Before that the
    map is the identity
    (mean 0, var 1, no floor: exactly x). Under torch.distributed each update merges the moments of
    every rank's batch, so data-parallel learners keep identical statistics.
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, features: int):
        super().__init__()
        # float64: the merge adds a batch's moments to a count that grows to billions of vectors
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(features, dtype=torch.float64))
        self.register_buffer("var", torch.ones(features, dtype=torch.float64))
        self.learning = False  # set by the learner around its update's forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, H) -> (N, H) in x's dtype; updates the statistics first when learning (see class)."""
        if self.learning and torch.is_grad_enabled():
            self.update(x.detach())
        scale = (self.var + VARIANCE_FLOOR).rsqrt()
        standardised = ((x - self.mean.to(x.dtype)) * scale.to(x.dtype)).clamp(-CLIP, CLIP)
        return torch.where(self.count > 0, standardised, x)  # no host sync: acting calls this each step

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the moments of the rows of x (N, H) (and of every rank's rows) into the statistics."""
        x = x.reshape(-1, x.shape[-1]).to(torch.float64)
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if x.shape[0] == 0 and not distributed:
            return
        # Two passes (mean, then squares about it), not sums of x and x^2: a dimension of mean 35
        # and variance 1e-6 would lose its variance to cancellation.
        count_and_sum = torch.cat([x.new_tensor([x.shape[0]]), x.sum(0)])
        if distributed:  # every rank calls this in the same update: same order everywhere
            dist.all_reduce(count_and_sum)
        n = count_and_sum[0]
        batch_mean = count_and_sum[1:] / n.clamp(min=1)
        squares = ((x - batch_mean) ** 2).sum(0)
        if distributed:
            dist.all_reduce(squares)
        if not (torch.isfinite(count_and_sum).all() and torch.isfinite(squares).all()):
            return  # a non-finite batch (its loss will fail the update) must not poison the statistics
        batch_var = squares / n.clamp(min=1)
        total = self.count + n
        weight = n / total.clamp(min=1)  # 0 when no rank had rows: nothing changes
        delta = batch_mean - self.mean
        self.var.copy_(self.var * (1 - weight) + batch_var * weight + delta * delta * weight * (1 - weight))
        self.mean.add_(delta * weight)
        self.count.copy_(total)
