"""The SAC-GLAM learner: one gradient step on a batch of n-step transitions (plain class, no Ray).

Per step (paper sections 2.1-2.2):
1. forward the current states with gradients: log pi(.|s_t) and Q(s_t, .);
2. forward the n-step next states without gradients with the target critic's weights
   (Q_target(s_{t+k}, .), without the LM head) and, unless `next_policy` is `target` (the target
   forward's log pi is used then), with the online weights (log pi(.|s_{t+k}), without the
   critic); only the rows that bootstrap (a terminal row's target is its reward). With LoRA on
   the top blocks only (`agent.lora_layers`), the frozen blocks below run once per batch, without
   autograd, and both next-state forwards run only the top blocks on that trunk (not with the
   critic's own blocks, `agent.critic_weights: own`: each forward runs the blocks below again);
3. losses from `sac_losses`: critic always; policy and entropy coefficient after the critic-only
   warm-up, during which (`warmup_head_only`) the LLM forward of the current states runs without
   gradients, so only the critic head trains and pi does not move (with the critic's own blocks,
   which the critic loss alone reaches, those blocks train too: pi does not move either way);
4. one backward of critic + policy loss (the policy loss holds Q fixed), global-norm clipping,
   Adam steps, then Polyak averaging of the target critic.

The target critic is a copy of every trainable weight on the critic's path (LoRA + head, or every
LLM weight when lora_r = 0), swapped into the agent for the next-state forward (no second model in
memory). A non-finite loss or gradient raises before any optimizer step: weights, optimizer state
and the target stay untouched.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch

from sacglam.config import SACConfig
from sacglam.learner.diagnostics import gradient_split, mean_by_type, share_by_type
from sacglam.learner.optim import adam, drop_gradients, load_adam_state
from sacglam.learner.sac_losses import entropy, entropy_targets, sac_losses
from sacglam.models.agent import GLAMAgent
from sacglam.runtime.devices import to_host
from sacglam.types import TransitionBatch


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient was NaN or infinite; the update was not applied."""


@contextmanager
def swapped_parameters(parameters: Mapping[str, torch.nn.Parameter], values: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily point the data of `parameters` (name -> parameter, e.g. from a module's
    `named_parameters()`) at `values` of the same names (no copy), then restore them. Names not in
    `values` are left alone. The learner passes a mapping built once: walking the module's
    parameters on every update cost about 1% of an update of the tiny model."""
    live = {name: p for name, p in parameters.items() if name in values}
    saved = {name: p.data for name, p in live.items()}
    try:
        for name, p in live.items():
            p.data = values[name]
        yield
    finally:
        for name, p in live.items():
            p.data = saved[name]


class SACLearner:
    """Owns the agent's optimizers, the entropy coefficient and the target critic."""

    # Terminal rows' next states are not forwarded (their target does not bootstrap). A reference
    # learner for tests sets this False to forward every row, as a naive implementation would.
    skip_terminal_next_states: bool = True

    def __init__(self, agent: GLAMAgent, config: SACConfig):
        if agent.config.critic not in ("action", "observation"):
            raise ValueError("SAC needs an agent with a critic: AgentConfig(critic='action' or 'observation')")
        self.agent, self.config = agent, config
        device = agent.device
        assert agent.critic is not None
        # The critic's group: its head, and its own top blocks' trainable weights when it has them
        # (`agent.critic_weights: own`: a copy of the frozen base weights sits beside its LoRA).
        critic_params = [p for p in agent.critic.parameters() if p.requires_grad]
        critic_ids = {id(p) for p in critic_params}
        llm_params = [p for p in agent.parameters() if p.requires_grad and id(p) not in critic_ids]
        self.optimizer = adam(
            [{"params": llm_params, "lr": config.actor_lr}, {"params": critic_params, "lr": config.critic_lr}],
            config.actor_lr,
            device,
        )
        self._params: list[torch.Tensor] = [*llm_params, *critic_params]  # what gradient clipping covers
        self._critic_ids = critic_ids  # the weights only the critic loss reaches
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(config.alpha_init), device=device))
        self._optimized = [*self._params, self.log_alpha]  # every tensor of both optimizers
        self.alpha_optimizer = adam([self.log_alpha], config.alpha_lr, device)
        self.target = {name: p.detach().clone() for name, p in agent.named_parameters() if p.requires_grad}
        # Polyak's sources, and the parameters the target weights are swapped into
        self._online = {name: p for name, p in agent.named_parameters() if name in self.target}
        self.updates = 0  # gradient steps applied
        # Data-parallel learners set this (`distributed.average_gradients`): called after the
        # backward with every gradient-holding parameter and whether this rank's losses were
        # finite; returns whether all ranks' were. Gradients are averaged in place.
        self.gradient_sync: Callable[[list[torch.Tensor], bool], bool] | None = None

    @property
    def alpha(self) -> float:
        return self.log_alpha.detach().exp().item()

    @property
    def target_entropy_ratio(self) -> float | None:
        """This step's fraction of log(#candidates) that is each state's entropy target (None: the
        fixed `target_entropy`); linear from `target_entropy_ratio` to `target_entropy_ratio_final`
        over `target_entropy_anneal_updates` steps when a final value is set."""
        cfg = self.config
        if cfg.target_entropy_ratio is None or cfg.target_entropy_ratio_final is None:
            return cfg.target_entropy_ratio
        progress = min(self.updates / cfg.target_entropy_anneal_updates, 1.0)
        return cfg.target_entropy_ratio + progress * (cfg.target_entropy_ratio_final - cfg.target_entropy_ratio)

    @property
    def warming_up(self) -> bool:
        return self.updates < self.config.critic_warmup_updates

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One gradient step. Returns the step's metrics (losses, alpha, entropy, Q statistics)."""
        agent, cfg = self.agent, self.config
        device = agent.device
        current = agent.encode(batch.observations, batch.candidates)
        agent.prime_critic_statistics(current)  # a first update's targets read standardised features too
        next_log_pi, next_q_target, next_mask = self._next_state_values(batch)
        warming_up = self.warming_up
        trunk = agent.frozen_trunk(current)  # None unless LoRA leaves a frozen trunk below it
        with agent.learning_critic_statistics():  # the current states' features (not the next states')
            # With the critic's own blocks the critic loss cannot reach pi anyway: they train too.
            if warming_up and cfg.warmup_head_only and not agent.has_own_critic_weights:
                # The LLM runs without a graph: the critic head reads constant features, so the critic
                # loss cannot reach the weights the policy uses and pi stays exactly as it was.
                with torch.no_grad():
                    scores = agent.candidate_scores(current, trunk)
                out = agent.outputs_from_scores(current, scores)
            else:
                out = agent(current, trunk=trunk)
        assert out.q is not None and out.q_critics is not None  # a Q-critic agent
        actions = batch.actions.to(device)
        n_critics = out.q_critics.shape[0]
        ratio = self.target_entropy_ratio
        q_taken = out.q_critics.gather(2, actions[None, :, None].expand(n_critics, -1, 1)).squeeze(2)  # (n, B)
        losses = sac_losses(
            log_pi=out.log_pi,
            q_taken=q_taken,
            q_all=out.q,
            mask=out.mask,
            reward=batch.reward.to(device),
            discount=batch.discount.to(device),
            terminal=batch.terminal.to(device),
            next_log_pi=next_log_pi,
            next_q_target=next_q_target,
            next_mask=next_mask,
            log_alpha=self.log_alpha,
            target_entropy=entropy_targets(out.mask, cfg.target_entropy, ratio),
            actor_loss=cfg.actor_loss,
            critic_entropy=cfg.critic_entropy,
        )
        loss = losses.critic if warming_up else losses.critic + losses.policy
        named_losses = {"critic": losses.critic, "policy": losses.policy, "alpha": losses.alpha}
        finite = all(bool(torch.isfinite(v)) for v in named_losses.values())
        drop_gradients(self._optimized)
        every = cfg.grad_diagnostics_every
        diagnose = finite and every > 0 and self.updates % every == 0
        critic_grads: tuple[torch.Tensor | None, ...] = ()
        if diagnose:  # the critic loss's own gradient: one extra backward, on these updates only
            critic_grads = torch.autograd.grad(losses.critic, self._params, retain_graph=True, allow_unused=True)
        if finite:
            loss.backward()
            if not warming_up:
                losses.alpha.backward()
        diagnostics = self._diagnostics(batch, out.log_pi, out.mask)
        if diagnose:
            diagnostics |= self._gradient_split(critic_grads, warming_up)
        all_finite = finite
        if self.gradient_sync is not None:  # every rank takes part, even one whose losses broke
            all_finite = self.gradient_sync(self._optimized, finite)
        if not all_finite:
            drop_gradients(self._optimized)
            self._check_finite(named_losses)
            raise NonFiniteLossError("another learner's loss was non-finite; the update was not applied on any learner")
        grad_norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm or float("inf"))
        alpha_grad = self.log_alpha.grad
        if not torch.isfinite(grad_norm) or (alpha_grad is not None and not torch.isfinite(alpha_grad)):
            drop_gradients(self._optimized)
            raise NonFiniteLossError(f"non-finite gradient (norm {float(grad_norm)}); the update was not applied")
        self.optimizer.step()
        if not warming_up:
            self.alpha_optimizer.step()
            if cfg.alpha_min > 0:
                with torch.no_grad():
                    self.log_alpha.clamp_(min=math.log(cfg.alpha_min))
        drop_gradients(self._optimized)  # free the gradients between updates
        with torch.no_grad():  # one foreach call: a Python loop of lerps costs 2.5x as much
            targets = [self.target[name] for name in self._online]
            torch._foreach_lerp_(targets, [p.detach() for p in self._online.values()], cfg.tau)
        self.updates += 1
        valid_q = out.q.detach()[out.mask]
        return {
            "loss/critic": losses.critic.item(),
            "loss/policy": losses.policy.item(),
            "loss/alpha": losses.alpha.item(),
            "alpha": self.alpha,
            "entropy": float(losses.entropy),
            "q/mean": float(valid_q.mean()),
            "q/taken": float(q_taken.detach().min(0).values.mean()),
            "q/target": float(losses.q_target.mean()),
            "grad_norm": float(grad_norm),
            "batch/relabeled_fraction": float(batch.relabeled.float().mean()),
            "warmup": float(warming_up),
            **({} if ratio is None else {"target_entropy_ratio": ratio}),
            **diagnostics,
        }

    def _diagnostics(self, batch: TransitionBatch, log_pi: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """The batch's policy entropy per goal type and the goal-type mix of its relabeled rows."""
        types = list(batch.goal_types)
        if not types:
            return {}
        return mean_by_type(entropy(log_pi.detach(), mask), types, "entropy") | share_by_type(
            types, batch.relabeled, "batch/relabeled_share"
        )

    def _gradient_split(self, critic_grads: tuple[torch.Tensor | None, ...], warming_up: bool) -> dict[str, float]:
        """Per-loss gradient norms from the critic loss's gradient and the step's total (before
        clipping and before data-parallel averaging: this learner's own batch). The policy's is the
        total less the critic's on the weights the policy reaches (every trainable weight outside
        the critic's own); during the warm-up it reaches none."""
        own = self._critic_ids
        policy_grads = (  # one parameter at a time: no second copy of every gradient
            None if warming_up or id(p) in own or p.grad is None else (p.grad if critic is None else p.grad - critic)
            for p, critic in zip(self._params, critic_grads, strict=True)
        )
        split = gradient_split(critic_grads, policy_grads)
        if warming_up:
            split = {k: v for k, v in split.items() if "policy" not in k and "cosine" not in k}
        return split

    def _next_state_values(self, batch: TransitionBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """log pi(.|s'), Q_target(s', .) and the candidate mask of s', each (B, C'), for the
        bootstrapped rows only: a terminal row's target is its reward alone (`n_step_target` selects
        zero there whatever V(s') is), so its next state is not encoded or forwarded and its row
        holds zeros with one valid candidate. This saves the terminal share of the next-state
        forward (about 8% of a full-task replay batch of random play, 35% on the simplified task,
        more once the agent succeeds)."""
        agent, device = self.agent, self.agent.device
        B = len(batch.next_observations)
        if self.skip_terminal_next_states:
            rows = (~batch.terminal).nonzero().flatten().tolist()
        else:
            rows = list(range(B))
        if not rows:  # every row terminal: nothing to bootstrap from
            zeros = torch.zeros(B, 1, device=device)
            return zeros, zeros.clone(), torch.ones(B, 1, dtype=torch.bool, device=device)
        following = agent.encode([batch.next_observations[i] for i in rows], [batch.next_candidates[i] for i in rows])
        with torch.no_grad():
            trunk = agent.frozen_trunk(following)  # the frozen blocks hold no target weight: shared
            with swapped_parameters(self._online, self.target):
                if self.config.next_policy == "target":
                    next_target = agent(following, with_critic=True, trunk=trunk)
                    assert next_target.q is not None
                    rows_log_pi, rows_q = next_target.log_pi, next_target.q
                else:
                    rows_q, _ = agent.q_values(following, trunk)
            if self.config.next_policy == "online":
                rows_log_pi = agent(following, with_critic=False, trunk=trunk).log_pi
        rows_mask = following.index.mask().to(device)
        if len(rows) == B:
            return rows_log_pi, rows_q, rows_mask
        index = torch.tensor(rows, device=device)
        C = rows_mask.shape[1]
        log_pi = rows_log_pi.new_zeros(B, C).index_copy_(0, index, rows_log_pi)
        q = rows_q.new_zeros(B, C).index_copy_(0, index, rows_q)
        mask = torch.zeros(B, C, dtype=torch.bool, device=device)
        mask[:, 0] = True
        mask.index_copy_(0, index, rows_mask)
        return log_pi, q, mask

    @staticmethod
    def _check_finite(losses: dict[str, torch.Tensor]) -> None:
        bad = [name for name, value in losses.items() if not torch.isfinite(value)]
        if bad:
            raise NonFiniteLossError(
                f"non-finite {', '.join(bad)} loss ({', '.join(f'{n}={float(losses[n].detach())}' for n in bad)}); "
                "the update was not applied (check rewards, learning rates and the entropy coefficient)"
            )

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Everything a resumed run needs from the learner (the agent's trainable state included)."""
        return copy.deepcopy(  # copies, never views of the live tensors (`.cpu()` of a CPU tensor is itself)
            {
                "agent": self.agent.trainable_state_dict(),
                "target": {k: v.detach().cpu() for k, v in self.target.items()},
                "optimizer": to_host(self.optimizer.state_dict()),  # Adam's moments live on the device
                "log_alpha": self.log_alpha.detach().cpu(),
                "alpha_optimizer": to_host(self.alpha_optimizer.state_dict()),
                "updates": self.updates,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_trainable_state_dict(state["agent"])
        device = self.agent.device
        self.target = {k: v.to(device, copy=True) for k, v in state["target"].items()}
        load_adam_state(self.optimizer, copy.deepcopy(state["optimizer"]), device)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"].to(device))
        load_adam_state(self.alpha_optimizer, copy.deepcopy(state["alpha_optimizer"]), device)
        self.updates = state["updates"]
