"""The PPO-GLAM learner: epochs of clipped-PPO minibatch steps over one on-policy rollout.

**Fixed minibatches, old policy taken per minibatch.** Each rollout is shuffled once into
minibatches that stay the same for every epoch (each epoch visits them in a new order), and
before the first step the learner recomputes, minibatch by minibatch with the weights that
acted, what the ratio and the value clipping compare against: log pi_old(a|s) and the behaviour
distribution of the rollout's own rows, V_old(s) of every row, and the clipping centre of
relabeled rows (`ppo.her_centered`). A state's scores depend, in bfloat16, on the states it is
padded and batched with; computed over the very rows of the gradient step, in the same order,
they are bit-identical to that step's forward before it moves the weights, so the first step's
ratio is exactly 1 (and its value unclipped) in any dtype. This costs one forward over the
rollout, with autograd as the steps have it (the graph is dropped minibatch by minibatch); with
LoRA on the top blocks only, the frozen trunk it computes is kept for the epochs
(`reuse_frozen_trunk`), so the blocks below LoRA run once per rollout.

With several data-parallel learners, every learner holds the whole rollout and draws the same
minibatches (same seed); each computes the old policy and the loss on its share of every
minibatch (rows rank::world), weighted by the share's size, and the gradients are averaged,
which is the single learner's step on the same minibatches (a last minibatch smaller than the
number of learners joins the one before it, so there may be one step fewer per epoch). Advantages are normalised over the whole rollout (lamorel's PPO, the
paper's baseline code; `advantage_normalization`), or per minibatch before it is split.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from sacglam.config import PPOConfig
from sacglam.learner.optim import adam, drop_gradients, load_adam_state
from sacglam.learner.ppo_losses import normalized, ppo_losses
from sacglam.learner.sac import NonFiniteLossError
from sacglam.models.agent import GLAMAgent
from sacglam.models.encoding import EncodedBatch
from sacglam.models.trunk import FrozenTrunk
from sacglam.runtime.devices import to_host


@dataclass(frozen=True)
class Rollout:
    """M on-policy transitions with their advantages (flattened over steps and environments)."""

    observations: list[str]  # M
    candidates: list[list[str]]  # M
    actions: torch.Tensor  # (M,) long
    old_log_prob: torch.Tensor  # (M,) float32: log pi_old(a|s) when the action was taken
    advantages: torch.Tensor  # (M,) float32
    returns: torch.Tensor  # (M,) float32: the value head's regression target
    behavior_log_pi: torch.Tensor | None = None  # (M, C_max) float32, -inf at padding: pi_old(.|s, g) (KL loss)
    clip_center: torch.Tensor | None = None  # (M,) float32: centre of the clipping range (1 unless centred HER)
    relabeled: torch.Tensor | None = None  # (M,) bool: a hindsight-relabeled row (None: none is)


@dataclass(frozen=True)
class OldPolicy:
    """What the first step compares against, per row of the rollout (see the module docstring)."""

    log_prob: torch.Tensor  # (M,) float32: log pi_old(a|s, g) of the action taken
    values: torch.Tensor  # (M,) float32: V_old(s)
    behavior_log_pi: torch.Tensor | None  # (M, C_max) float32, -inf at padding
    clip_center: torch.Tensor | None  # (M,) float32


class PPOLearner:
    def __init__(self, agent: GLAMAgent, config: PPOConfig, seed: int = 0, rank: int = 0, world_size: int = 1):
        if agent.config.critic != "value":
            raise ValueError("PPO-GLAM needs a value head: AgentConfig(critic='value')")
        self.agent, self.config = agent, config
        self.rank, self.world_size = rank, world_size
        self._params: list[torch.Tensor] = [p for p in agent.parameters() if p.requires_grad]
        self.optimizer = adam(self._params, config.lr, agent.device)
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0  # gradient steps applied
        # Data-parallel learners set this (`distributed.average_gradients`), as for SAC.
        self.gradient_sync: Callable[[list[torch.Tensor], bool], bool] | None = None
        # share number -> (encoded batch, frozen trunk), for one update (`reuse_frozen_trunk`)
        self._trunks: dict[int, tuple[EncodedBatch, FrozenTrunk]] = {}

    def minibatches(self, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The rollout's fixed minibatches: (its rows, this rank's share of them), from one shuffle.
        With data-parallel learners a last minibatch smaller than their number joins the one before
        it, so that every learner has a row of every minibatch (a rollout's row count, own plus
        relabeled, is arbitrary)."""
        if size < self.world_size:
            raise ValueError(f"a rollout of {size} rows cannot be shared by {self.world_size} learners")
        order = torch.randperm(size, generator=self.generator)
        bounds = [
            (start, min(start + self.config.minibatch_size, size))
            for start in range(0, size, self.config.minibatch_size)
        ]
        if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < self.world_size:
            bounds[-2:] = [(bounds[-2][0], size)]
        out = []
        for start, end in bounds:
            rows = order[start:end]
            out.append((rows, rows[torch.arange(self.rank, len(rows), self.world_size)]))
        return out

    def old_policy(self, rollout: Rollout, shares: list[torch.Tensor]) -> OldPolicy:
        """Recompute the old policy over each share exactly as its gradient steps will forward it:
        the same rows in the same order, and with autograd on (on a GPU, attention may choose
        another kernel for a forward that needs no gradient; measured: 8e-6 of log ratio). The
        graph is dropped share by share. Relabeled rows keep the rollout's log pi_old and behaviour
        distribution: they are the original goal's (another prompt); their value and clipping
        centre are recomputed."""
        self._trunks.clear()  # trunks belong to one rollout's minibatches
        if len(shares) and len(shares[0]) and self.agent.critic_statistics_unprimed():  # before any value is read
            first = shares[0]
            self.agent.prime_critic_statistics(
                self.agent.encode([rollout.observations[i] for i in first], [rollout.candidates[i] for i in first])
            )
        M = len(rollout.actions)
        relabeled = rollout.relabeled if rollout.relabeled is not None else torch.zeros(M, dtype=torch.bool)
        log_prob, values = rollout.old_log_prob.clone(), torch.zeros(M)
        behavior = rollout.behavior_log_pi.clone() if rollout.behavior_log_pi is not None else None
        center = rollout.clip_center.clone() if rollout.clip_center is not None else None
        for index, rows in enumerate(shares):
            if len(rows) == 0:
                continue
            # Each row's prompt features join the value head's input statistics here, once per
            # rollout (the epochs' forwards leave them): a share's old values read the statistics
            # as they stand after it, a little before the epochs' (only value clipping reads them).
            with torch.enable_grad(), self.agent.learning_critic_statistics():
                out = self._forward(rollout, rows, index)
            out = replace(out, log_pi=out.log_pi.detach(), value=out.value.detach() if out.value is not None else None)
            assert out.value is not None
            taken = out.log_pi.gather(1, rollout.actions[rows].to(out.log_pi.device)[:, None]).squeeze(1).float().cpu()
            values[rows] = out.value.float().cpu()
            own = ~relabeled[rows]
            log_prob[rows[own]] = taken[own]
            if behavior is not None:
                C = out.log_pi.shape[1]
                behavior[rows[own], :C] = out.log_pi[own.to(out.log_pi.device)].float().cpu()
            if center is not None and self.config.her_centered:
                center[rows[~own]] = (taken[~own] - rollout.old_log_prob[rows[~own]]).exp()
        return OldPolicy(log_prob, values, behavior, center)

    def _forward(self, rollout: Rollout, rows: torch.Tensor, share: int):
        """The agent on `rows` (share number `share` of this update's minibatches). With
        `reuse_frozen_trunk` and a frozen trunk below LoRA, the first forward of a share keeps its
        encoding and trunk output, and later ones run the top blocks only."""
        agent = self.agent
        if share in self._trunks:
            cached_batch, cached_trunk = self._trunks[share]
            return agent(cached_batch, trunk=cached_trunk)
        batch = agent.encode([rollout.observations[i] for i in rows], [rollout.candidates[i] for i in rows])
        trunk = agent.frozen_trunk(batch) if self.config.reuse_frozen_trunk else None
        if trunk is None:
            return agent(batch)
        self._trunks[share] = (batch, trunk)
        return agent(batch, trunk=trunk)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """`epochs` passes over the rollout's fixed minibatches; returns the means of the step metrics."""
        cfg, device = self.config, self.agent.device
        minibatches = self.minibatches(len(rollout.actions))
        old = self.old_policy(rollout, [share for _, share in minibatches])
        advantages = rollout.advantages
        if cfg.advantage_normalization == "rollout":
            advantages = normalized(advantages)
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.epochs):
            for index in torch.randperm(len(minibatches), generator=self.generator).tolist():
                minibatch, rows = minibatches[index]
                if cfg.advantage_normalization == "minibatch":
                    share_advantages = normalized(advantages[minibatch])[
                        torch.arange(self.rank, len(minibatch), self.world_size)
                    ]
                else:
                    share_advantages = advantages[rows]
                out = self._forward(rollout, rows, index)
                behavior = None
                if old.behavior_log_pi is not None:
                    behavior = old.behavior_log_pi[rows][:, : out.log_pi.shape[1]].to(device)
                center = old.clip_center[rows].to(device) if old.clip_center is not None else None
                losses = ppo_losses(
                    out.log_pi,
                    out.mask,
                    rollout.actions[rows].to(device),
                    old.log_prob[rows].to(device),
                    share_advantages.to(device),
                    rollout.returns[rows].to(device),
                    out.value,
                    cfg.clip,
                    cfg.vf_coef,
                    cfg.ent_coef,
                    False,
                    loss=cfg.loss,
                    kl_coef=cfg.kl_coef,
                    clip_center=center,
                    behavior_log_pi=behavior,
                    old_values=old.values[rows].to(device) if cfg.clip_value else None,
                )
                if steps == 0:  # before any weight moved: 0 on own rows, by construction
                    first_step = self._first_step_metrics(out.log_pi.detach(), rollout, rows, old, losses.clip_fraction)
                share_weight = self.world_size * len(rows) / len(minibatch)
                finite = bool(torch.isfinite(losses.total))
                drop_gradients(self._params)
                if finite:
                    # Shares of a minibatch may differ by a row: weighting each learner's mean loss by
                    # its share makes the gradient average (a plain mean over learners) the mean over
                    # the minibatch's rows, the single learner's step.
                    (losses.total * share_weight if self.world_size > 1 else losses.total).backward()
                if self.gradient_sync is not None:  # every rank takes part, even one whose loss broke
                    finite = self.gradient_sync(self._params, finite)
                if not finite:
                    drop_gradients(self._params)
                    raise NonFiniteLossError(f"non-finite PPO loss {float(losses.total)}; the update was not applied")
                grad_norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm)
                if not torch.isfinite(grad_norm):
                    drop_gradients(self._params)
                    raise NonFiniteLossError("non-finite PPO gradient; the update was not applied")
                self.optimizer.step()
                self.updates += 1
                steps += 1
                for name, value in (
                    ("loss/policy", losses.policy),
                    ("loss/value", losses.value),
                    ("entropy", losses.entropy),
                    ("ppo/clip_fraction", losses.clip_fraction),
                    ("ppo/approx_kl", losses.approx_kl),
                    ("grad_norm", grad_norm),
                ):
                    # weighted as the loss: the driver's mean over learners is then the minibatch's
                    weighted = float(value.detach()) * share_weight if self.world_size > 1 else float(value.detach())
                    sums[name] = sums.get(name, 0.0) + weighted
        drop_gradients(self._params)
        self._trunks.clear()
        return {name: total / steps for name, total in sums.items()} | first_step

    @staticmethod
    def _first_step_metrics(log_pi, rollout: Rollout, rows, old: OldPolicy, clip_fraction) -> dict[str, float]:
        """The first step's largest |log pi(a|s) - log pi_old(a|s)| over the rollout's own rows
        (a relabeled row's ratio compares two goals, so it is not 1) and its clip fraction."""
        own = ~rollout.relabeled[rows] if rollout.relabeled is not None else torch.ones(len(rows), dtype=torch.bool)
        taken = log_pi.gather(1, rollout.actions[rows].to(log_pi.device)[:, None]).squeeze(1).float().cpu()
        log_ratio = (taken - old.log_prob[rows])[own]
        return {
            "ppo/first_step_log_ratio": float(log_ratio.abs().max()) if len(log_ratio) else 0.0,
            "ppo/first_step_clip_fraction": float(clip_fraction),
        }

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Everything a resumed run needs from the learner (the agent's trainable state included)."""
        return copy.deepcopy(
            {
                "agent": self.agent.trainable_state_dict(),
                "optimizer": to_host(self.optimizer.state_dict()),  # Adam's moments live on the device
                "generator": self.generator.get_state(),
                "updates": self.updates,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_trainable_state_dict(state["agent"])
        load_adam_state(self.optimizer, copy.deepcopy(state["optimizer"]), self.agent.device)
        self.generator.set_state(state["generator"])
        self.updates = state["updates"]
