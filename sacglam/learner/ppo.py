"""The PPO-GLAM learner: epochs of clipped-PPO minibatch steps over one on-policy rollout.

With several data-parallel learners, every learner holds the whole rollout and draws the same
minibatches (same seed); each computes the loss on its share of every minibatch (rows
rank::world) and the gradients are averaged, which is the single-learner step when the shares
are equal. Advantages are normalised over the whole minibatch before it is split.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sacglam.config import PPOConfig
from sacglam.learner.optim import adam, drop_gradients, load_adam_state
from sacglam.learner.ppo_losses import normalized, ppo_losses
from sacglam.learner.sac import NonFiniteLossError
from sacglam.models.agent import GLAMAgent


@dataclass(frozen=True)
class Rollout:
    """M on-policy transitions with their advantages (flattened over steps and environments)."""

    observations: list[str]  # M
    candidates: list[list[str]]  # M
    actions: torch.Tensor  # (M,) long
    old_log_prob: torch.Tensor  # (M,) float32: log pi_old(a|s) when the action was taken
    advantages: torch.Tensor  # (M,) float32
    returns: torch.Tensor  # (M,) float32: advantages + V_old(s)
    behavior_log_pi: torch.Tensor | None = None  # (M, C_max) float32, -inf at padding: pi_old(.|s, g) (KL loss)
    clip_center: torch.Tensor | None = None  # (M,) float32: centre of the clipping range (1 unless centred HER)


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

    def update(self, rollout: Rollout) -> dict[str, float]:
        """`epochs` passes of shuffled minibatches; returns the means of the step metrics."""
        cfg, device = self.config, self.agent.device
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(len(rollout.actions), generator=self.generator)
            for start in range(0, len(order), cfg.minibatch_size):
                minibatch = order[start : start + cfg.minibatch_size]
                advantages = rollout.advantages[minibatch]
                if cfg.normalize_advantages:
                    advantages = normalized(advantages)
                share = torch.arange(self.rank, len(minibatch), self.world_size)
                rows, advantages = minibatch[share], advantages[share]
                out = self.agent(
                    self.agent.encode([rollout.observations[i] for i in rows], [rollout.candidates[i] for i in rows])
                )
                behavior = None
                if rollout.behavior_log_pi is not None:
                    behavior = rollout.behavior_log_pi[rows][:, : out.log_pi.shape[1]].to(device)
                center = rollout.clip_center[rows].to(device) if rollout.clip_center is not None else None
                losses = ppo_losses(
                    out.log_pi,
                    out.mask,
                    rollout.actions[rows].to(device),
                    rollout.old_log_prob[rows].to(device),
                    advantages.to(device),
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
                )
                finite = bool(torch.isfinite(losses.total))
                drop_gradients(self._params)
                if finite:
                    losses.total.backward()
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
                    sums[name] = sums.get(name, 0.0) + float(value.detach())
        drop_gradients(self._params)
        return {name: total / steps for name, total in sums.items()}

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Everything a resumed run needs from the learner (the agent's trainable state included)."""
        return copy.deepcopy(
            {
                "agent": self.agent.trainable_state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(),
                "updates": self.updates,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_trainable_state_dict(state["agent"])
        load_adam_state(self.optimizer, copy.deepcopy(state["optimizer"]), self.agent.device)
        self.generator.set_state(state["generator"])
        self.updates = state["updates"]
