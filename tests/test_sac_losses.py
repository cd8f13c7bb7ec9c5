"""Discrete SAC losses on small tensors: a hand-computed case, masks, gradient isolation, and a
cross-check against an independent float64 loop implementation."""

import math

import pytest
import torch
from torch import nn

from sacglam.learner.sac_losses import (
    alpha_loss,
    critic_loss,
    entropy,
    entropy_targets,
    forward_kl_policy_loss,
    n_step_target,
    policy_loss,
    polyak_update,
    sac_losses,
    soft_state_value,
)


def test_hand_computed_two_action_case():
    log_pi = torch.log(torch.tensor([[0.25, 0.75]]))
    q = torch.tensor([[1.0, 2.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    alpha = 0.1
    value = 0.25 * (1 - 0.1 * math.log(0.25)) + 0.75 * (2 - 0.1 * math.log(0.75))
    assert value == pytest.approx(1.8062335, abs=1e-6)
    y = n_step_target(torch.tensor([0.5]), torch.tensor([0.81]), torch.tensor([False]), log_pi, q, mask, alpha)
    assert y.item() == pytest.approx(0.5 + 0.81 * value, abs=1e-6)
    assert critic_loss(torch.tensor([1.0]), y).item() == pytest.approx(0.5 * (1 - (0.5 + 0.81 * value)) ** 2, abs=1e-6)
    assert policy_loss(log_pi, q, mask, alpha).item() == pytest.approx(-value, abs=1e-6)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy(log_pi, mask).item() == pytest.approx(h, abs=1e-6)
    log_alpha = torch.tensor(math.log(0.1))
    assert alpha_loss(log_alpha, log_pi, mask, 0.01).item() == pytest.approx(math.log(0.1) * (h - 0.01), abs=1e-6)


def test_per_state_entropy_targets_scale_with_the_candidate_count():
    mask = torch.tensor([[True, True, False, False], [True, True, True, True], [True, False, False, False]])
    assert entropy_targets(mask, 0.01, None) == 0.01
    targets = entropy_targets(mask, 0.01, 0.5)
    assert targets.tolist() == pytest.approx([0.5 * math.log(2), 0.5 * math.log(4), 0.0])
    log_pi = torch.log(torch.tensor([[0.5, 0.5, 1.0, 1.0], [0.25] * 4, [1.0, 1.0, 1.0, 1.0]]))
    log_alpha = torch.tensor(0.3)
    h = entropy(log_pi, mask)  # log 2, log 4, 0: each state's entropy is twice its target
    assert alpha_loss(log_alpha, log_pi, mask, targets).item() == pytest.approx(
        0.3 * (h - targets).mean().item(), abs=1e-6
    )
    assert alpha_loss(log_alpha, log_pi, mask, targets).item() > 0  # entropy above target: alpha goes down


def test_termination_cuts_the_bootstrap_and_truncation_does_not():
    log_pi = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    q = torch.tensor([[3.0, 3.0], [3.0, 3.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    y = n_step_target(
        torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.9]), torch.tensor([True, False]), log_pi, q, mask, 0.0
    )
    assert y.tolist() == pytest.approx([1.0, 0.9 * 3.0])


def test_padding_slots_never_contribute_even_when_inf_or_nan():
    log_pi = torch.log(torch.tensor([[0.2, 0.8]]))
    q = torch.tensor([[0.5, -1.0]])
    padded_log_pi = torch.cat([log_pi, torch.tensor([[float("-inf")]])], -1)
    padded_q = torch.cat([q, torch.tensor([[float("nan")]])], -1)
    mask, padded_mask = torch.ones(1, 2, dtype=torch.bool), torch.tensor([[True, True, False]])
    assert soft_state_value(padded_log_pi, padded_q, padded_mask, 0.3).item() == pytest.approx(
        soft_state_value(log_pi, q, mask, 0.3).item()
    )
    assert policy_loss(padded_log_pi, padded_q, padded_mask, 0.3).item() == pytest.approx(
        policy_loss(log_pi, q, mask, 0.3).item()
    )
    assert entropy(padded_log_pi, padded_mask).item() == pytest.approx(entropy(log_pi, mask).item())


class TinyActorCritic(nn.Module):
    """A shared trunk, a policy head and a critic head: the shape of the GLAM agent."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk, self.policy_head, self.critic_head = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x, detach_critic=False):
        h = torch.tanh(self.trunk(x))
        return self.policy_head(h).log_softmax(-1), self.critic_head(h.detach() if detach_critic else h)


def batch_losses(model, target_model, log_alpha, x, next_x, mask):
    log_pi, q = model(x)
    with torch.no_grad():
        next_log_pi, _ = model(next_x)
        _, next_q = target_model(next_x)
    actions = torch.tensor([0, 1, 2, 1])
    return sac_losses(
        log_pi=log_pi,
        q_taken=q.gather(1, actions[:, None]).squeeze(1),
        q_all=q,
        mask=mask,
        reward=torch.tensor([0.0, 1.0, 0.0, 0.5]),
        discount=torch.full((4,), 0.9),
        terminal=torch.tensor([False, True, False, False]),
        next_log_pi=next_log_pi,
        next_q_target=next_q,
        next_mask=mask,
        log_alpha=log_alpha,
        target_entropy=0.01,
    )


@pytest.fixture
def setup():
    model, target = TinyActorCritic(), TinyActorCritic()
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.1)
    log_alpha = nn.Parameter(torch.tensor(math.log(0.05)))
    x, next_x = torch.randn(4, 4), torch.randn(4, 4)
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True], [True, False, False]])
    return model, target, log_alpha, x, next_x, mask


def gradient_map(loss, model, target, log_alpha):
    named = {f"model.{n}": p for n, p in model.named_parameters()} | {
        f"target.{n}": p for n, p in target.named_parameters()
    }
    named["log_alpha"] = log_alpha
    for p in named.values():
        p.grad = None
    loss.backward(retain_graph=True)
    return {n for n, p in named.items() if p.grad is not None and p.grad.abs().sum() > 0}


def test_policy_loss_moves_no_critic_parameter(setup):
    model, target, log_alpha, x, next_x, mask = setup
    moved = gradient_map(batch_losses(*setup).policy, model, target, log_alpha)
    assert moved and all(n.startswith(("model.trunk", "model.policy_head")) for n in moved)


def test_critic_loss_moves_no_policy_only_parameter(setup):
    model, target, log_alpha, x, next_x, mask = setup
    moved = gradient_map(batch_losses(*setup).critic, model, target, log_alpha)
    assert "model.critic_head.weight" in moved
    assert all(n.startswith(("model.trunk", "model.critic_head")) for n in moved)


def test_alpha_loss_moves_only_the_entropy_coefficient(setup):
    model, target, log_alpha, *_ = setup
    assert gradient_map(batch_losses(*setup).alpha, model, target, log_alpha) == {"log_alpha"}


def test_target_critic_gets_no_gradient(setup):
    model, target, log_alpha, *_ = setup
    losses = batch_losses(*setup)
    moved = gradient_map(losses.critic + losses.policy + losses.alpha, model, target, log_alpha)
    assert not any(n.startswith("target.") for n in moved)


def test_losses_do_not_mutate_their_inputs():
    torch.manual_seed(1)
    inputs = dict(
        log_pi=torch.randn(3, 4).log_softmax(-1),
        q_taken=torch.randn(2, 3),
        q_all=torch.randn(3, 4),
        mask=torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool),
        reward=torch.randn(3),
        discount=torch.rand(3),
        terminal=torch.tensor([False, True, False]),
        next_log_pi=torch.randn(3, 2).log_softmax(-1),
        next_q_target=torch.randn(3, 2),
        next_mask=torch.ones(3, 2, dtype=torch.bool),
        log_alpha=torch.tensor(-3.0),
        target_entropy=0.0,
    )
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    sac_losses(**inputs)
    for k, v in inputs.items():
        assert torch.equal(v, before[k]) if isinstance(v, torch.Tensor) else v == before[k], k


def reference_losses(
    log_pi,
    q_taken,
    q_all,
    mask,
    reward,
    discount,
    terminal,
    next_log_pi,
    next_q,
    next_mask,
    log_alpha,
    target_entropy,
    actor_loss="reverse_kl",
    critic_entropy=True,
):
    """Discrete SAC written out per state with Python floats (float64), from Christodoulou (2019);
    `forward_kl`: the cross-entropy from softmax(Q/alpha) to pi; `critic_entropy=False`: the
    critic's target without the entropy bonus (Asad et al., 2025)."""
    alpha = math.exp(log_alpha)
    bonus = alpha if critic_entropy else 0.0
    B = len(reward)
    critic = policy = alpha_l = 0.0
    for b in range(B):
        v_next = sum(
            math.exp(next_log_pi[b][a]) * (next_q[b][a] - bonus * next_log_pi[b][a])
            for a in range(len(next_mask[b]))
            if next_mask[b][a]
        )
        y = reward[b] + (0.0 if terminal[b] else discount[b] * v_next)
        critic += 0.5 * (q_taken[b] - y) ** 2 / B
        valid = [a for a in range(len(mask[b])) if mask[b][a]]
        if actor_loss == "forward_kl":
            weights = [math.exp(q_all[b][a] / alpha) for a in valid]
            policy -= sum(w / sum(weights) * log_pi[b][a] for w, a in zip(weights, valid)) / B
        else:
            policy += sum(math.exp(log_pi[b][a]) * (alpha * log_pi[b][a] - q_all[b][a]) for a in valid) / B
        h = -sum(math.exp(log_pi[b][a]) * log_pi[b][a] for a in valid)
        alpha_l += log_alpha * (h - target_entropy) / B
    return critic, policy, alpha_l


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "actor_loss,critic_entropy", [("reverse_kl", True), ("forward_kl", True), ("reverse_kl", False)]
)
def test_losses_match_an_independent_loop_implementation(seed, actor_loss, critic_entropy):
    g = torch.Generator().manual_seed(seed)
    B, C, C2 = 6, 5, 4
    counts, next_counts = torch.randint(1, C + 1, (B,), generator=g), torch.randint(1, C2 + 1, (B,), generator=g)
    mask = torch.arange(C)[None] < counts[:, None]
    next_mask = torch.arange(C2)[None] < next_counts[:, None]
    log_pi = torch.randn(B, C, generator=g).masked_fill(~mask, float("-inf")).log_softmax(-1)
    next_log_pi = torch.randn(B, C2, generator=g).masked_fill(~next_mask, float("-inf")).log_softmax(-1)
    q_all, next_q = torch.randn(B, C, generator=g), torch.randn(B, C2, generator=g)
    actions = (torch.rand(B, generator=g) * counts).long()
    q_taken = q_all.gather(1, actions[:, None]).squeeze(1)
    reward, discount = torch.rand(B, generator=g), torch.full((B,), 0.9**3)
    terminal = torch.rand(B, generator=g) < 0.3
    log_alpha = torch.tensor(math.log(0.05))
    losses = sac_losses(
        log_pi=log_pi,
        q_taken=q_taken,
        q_all=q_all,
        mask=mask,
        reward=reward,
        discount=discount,
        terminal=terminal,
        next_log_pi=next_log_pi,
        next_q_target=next_q,
        next_mask=next_mask,
        log_alpha=log_alpha,
        target_entropy=0.01,
        actor_loss=actor_loss,
        critic_entropy=critic_entropy,
    )
    to = lambda t: t.double().tolist()  # noqa: E731
    critic, policy, alpha_l = reference_losses(
        to(log_pi),
        to(q_taken),
        to(q_all),
        mask.tolist(),
        to(reward),
        to(discount),
        terminal.tolist(),
        to(next_log_pi),
        to(next_q),
        next_mask.tolist(),
        math.log(0.05),
        0.01,
        actor_loss,
        critic_entropy,
    )
    assert losses.critic.item() == pytest.approx(critic, rel=1e-5, abs=1e-6)
    assert losses.policy.item() == pytest.approx(policy, rel=1e-5, abs=1e-6)
    assert losses.alpha.item() == pytest.approx(alpha_l, rel=1e-5, abs=1e-6)


def test_twin_critic_losses_add_up():
    y = torch.tensor([1.0, 2.0])
    twin = torch.tensor([[0.0, 2.0], [1.0, 0.0]])
    assert critic_loss(twin, y).item() == pytest.approx(critic_loss(twin[0], y).item() + critic_loss(twin[1], y).item())


def test_polyak_update_interpolates_parameters():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, online, 0.25)
    for t, b, o in zip(target.parameters(), before, online.parameters()):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * o)
    polyak_update(target, online, 1.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters()))


def test_gradients_stay_finite_with_padded_candidates():
    logits = torch.randn(2, 3, requires_grad=True)
    q = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    log_pi = logits.masked_fill(~mask, float("-inf")).log_softmax(-1)
    log_alpha = torch.tensor(-2.0, requires_grad=True)
    losses = sac_losses(
        log_pi=log_pi,
        q_taken=q[:, 0],
        q_all=q,
        mask=mask,
        reward=torch.zeros(2),
        discount=torch.ones(2),
        terminal=torch.tensor([False, False]),
        next_log_pi=log_pi.detach(),
        next_q_target=q.detach(),
        next_mask=mask,
        log_alpha=log_alpha,
        target_entropy=0.0,
    )
    (losses.critic + losses.policy + losses.alpha).backward()
    for grad in (logits.grad, q.grad, log_alpha.grad):
        assert torch.isfinite(grad).all()
    assert (logits.grad[~mask] == 0).all()


def _logit_gradient(loss_fn, logits, q, mask, alpha):
    logits = logits.clone().requires_grad_(True)
    log_pi = logits.masked_fill(~mask, float("-inf")).log_softmax(-1)
    loss_fn(log_pi, q, mask, alpha).backward()
    return logits.grad


def test_forward_kl_gradient_is_pi_minus_the_boltzmann_policy():
    logits = torch.tensor([[2.0, -5.0, 0.5, 9.0]])
    mask = torch.tensor([[True, True, True, False]])
    q, alpha = torch.tensor([[0.2, 0.5, 0.1, 7.0]]), 0.05
    grad = _logit_gradient(forward_kl_policy_loss, logits, q, mask, alpha)
    pi = torch.softmax(logits[:, :3], -1)
    boltzmann = torch.softmax(q[:, :3] / alpha, -1)
    assert torch.allclose(grad[:, :3], pi - boltzmann, atol=1e-6)
    assert grad[0, 3].item() == 0.0  # padding (its Q of 7 included) plays no part


def test_forward_kl_pulls_up_a_dropped_action_the_critic_ranks_first():
    """The symptom the option is for: pi gives 0.1% to the action whose Q is highest. The reverse
    KL's gradient on that action's logit is scaled by pi(a); the forward KL's is pi(a) - p(a)."""
    mask = torch.ones(1, 3, dtype=torch.bool)
    q, alpha = torch.tensor([[0.6, 0.5, 0.1]]), 0.05
    logits = torch.log(torch.tensor([[0.001, 0.989, 0.01]]))
    reverse = _logit_gradient(policy_loss, logits, q, mask, alpha)[0, 0].item()
    forward = _logit_gradient(forward_kl_policy_loss, logits, q, mask, alpha)[0, 0].item()
    assert reverse < 0 and forward < 0  # both raise it (descent), but
    assert abs(forward) > 100 * abs(reverse)


def test_the_forward_kl_minimiser_is_the_boltzmann_policy():
    mask = torch.tensor([[True, True, True], [True, True, False]])
    q, alpha = torch.tensor([[0.3, -0.2, 0.9], [1.0, 0.7, 0.0]]), 0.2
    logits = (q / alpha).masked_fill(~mask, 0.0)
    assert _logit_gradient(forward_kl_policy_loss, logits, q, mask, alpha).abs().max().item() < 1e-6
