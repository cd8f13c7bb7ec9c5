"""The SAC-GLAM learner on a tiny model: what an update changes, the warm-up, the NaN guard, the
target critic, and checkpoints."""

import copy
import dataclasses

import pytest
import torch

from sacglam.config import AgentConfig, SACConfig
from sacglam.learner.sac import NonFiniteLossError, SACLearner
from sacglam.models import GLAMAgent
from tests.helpers import random_play_buffer


@pytest.fixture(scope="module")
def buffer():
    return random_play_buffer(60)


def learner(**sac):
    torch.manual_seed(0)
    agent = GLAMAgent(
        AgentConfig(**({"model": "tiny-causal", "lora_r": 16, "critic_width": 32} | sac.pop("agent", {})))
    )
    return SACLearner(agent, SACConfig(gamma=0.9, batch_size=16, **sac))


def snapshot(sac: SACLearner):
    return {
        "agent": {k: v.clone() for k, v in sac.agent.trainable_state_dict().items()},
        "target": {k: v.clone() for k, v in sac.target.items()},
        "log_alpha": sac.log_alpha.detach().clone(),
        "optimizer": copy.deepcopy(sac.optimizer.state_dict()),
    }


def changed(a, b):
    return {k for k in a if not torch.equal(a[k], b[k])}


def test_update_moves_lora_head_alpha_and_the_target_by_tau(buffer):
    sac = learner(tau=0.5)
    before = snapshot(sac)
    metrics = sac.update(buffer.sample(16, n_step=3, mode="ratio"))
    after = snapshot(sac)
    moved = changed(before["agent"], after["agent"])
    assert any("lora_" in k for k in moved) and any(k.startswith("critic.") for k in moved)
    assert not torch.equal(before["log_alpha"], after["log_alpha"])
    for name in moved:  # target <- 0.5 target + 0.5 online, from equal starting points
        torch.testing.assert_close(after["target"][name], 0.5 * before["target"][name] + 0.5 * after["agent"][name])
    assert sac.updates == 1 and metrics["batch/relabeled_fraction"] == 0.5
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_critic_warmup_trains_the_critic_only(buffer):
    sac = learner(critic_warmup_updates=2, agent={"critic_detach": True})
    start = snapshot(sac)
    for _ in range(2):
        assert sac.update(buffer.sample(16))["warmup"] == 1.0
    warm = snapshot(sac)
    moved = changed(start["agent"], warm["agent"])
    assert moved and all(k.startswith("critic.") for k in moved)  # no policy (LoRA) update
    assert torch.equal(start["log_alpha"], warm["log_alpha"])
    assert sac.update(buffer.sample(16))["warmup"] == 0.0
    assert any("lora_" in k for k in changed(warm["agent"], snapshot(sac)["agent"]))


def policy_outputs(sac: SACLearner, batch):
    with torch.no_grad():
        out = sac.agent(sac.agent.encode(batch.observations, batch.candidates), with_critic=False)
    return out.log_pi, out.action_log_likelihood


@pytest.mark.parametrize("model, lora_r", [("tiny-causal", 16), ("tiny-causal", 0), ("tiny-seq2seq", 16)])
def test_warmup_leaves_pi_bit_identical_even_when_the_critic_trains_the_shared_weights(buffer, model, lora_r):
    sac = learner(
        critic_warmup_updates=3, warmup_head_only=True, agent={"model": model, "lora_r": lora_r, "critic_detach": False}
    )
    probe = buffer.sample(32, n_step=3)
    log_pi, likelihood = policy_outputs(sac, probe)
    start = snapshot(sac)
    for _ in range(3):
        sac.update(buffer.sample(16, n_step=3))
    log_pi_after, likelihood_after = policy_outputs(sac, probe)
    assert torch.equal(log_pi, log_pi_after) and torch.equal(likelihood, likelihood_after)
    warm = snapshot(sac)
    moved = changed(start["agent"], warm["agent"])
    assert moved and all(k.startswith("critic.") for k in moved)
    assert not changed(start["target"], warm["target"]) - set(moved)  # the target's LLM weights stay too
    llm = [p for n, p in sac.agent.named_parameters() if p.requires_grad and not n.startswith("critic.")]
    assert llm and all(p not in sac.optimizer.state for p in llm)  # Adam never stepped them (no moments)
    sac.update(buffer.sample(16, n_step=3))  # the warm-up is over: the policy moves
    assert not torch.equal(log_pi, policy_outputs(sac, probe)[0])


def test_a_shared_weights_warmup_moves_pi_when_asked_for(buffer):
    sac = learner(critic_warmup_updates=3, agent={"critic_detach": False})  # the default: warmup_head_only=False
    probe = buffer.sample(32, n_step=3)
    log_pi, _ = policy_outputs(sac, probe)
    for _ in range(3):
        sac.update(buffer.sample(16, n_step=3))
    assert not torch.equal(log_pi, policy_outputs(sac, probe)[0])


def test_a_non_finite_loss_raises_and_leaves_everything_untouched(buffer):
    sac = learner()
    sac.update(buffer.sample(16))
    before = snapshot(sac)
    batch = buffer.sample(16)
    batch.reward[0] = float("nan")
    with pytest.raises(NonFiniteLossError, match="critic"):
        sac.update(batch)
    after = snapshot(sac)
    assert not changed(before["agent"], after["agent"]) and not changed(before["target"], after["target"])
    assert torch.equal(before["log_alpha"], after["log_alpha"]) and sac.updates == 1
    assert all(p.grad is None for p in sac.agent.parameters())


def test_an_update_leaves_no_gradient_on_any_tensor_either_optimizer_steps(buffer):
    sac = learner(critic_warmup_updates=0)  # the entropy coefficient gets a gradient and a step too
    alpha_before = float(sac.log_alpha.detach())
    sac.update(buffer.sample(16))
    assert float(sac.log_alpha.detach()) != alpha_before
    optimized = [p for opt in (sac.optimizer, sac.alpha_optimizer) for g in opt.param_groups for p in g["params"]]
    assert len(optimized) > 2 and all(p.grad is None for p in optimized)
    assert all(p.grad is None for p in sac.agent.parameters())


def test_repeated_updates_on_one_batch_fit_its_td_targets(buffer):
    sac = learner(tau=1.0)
    batch = buffer.sample(16, n_step=3)
    first = sac.update(batch)["loss/critic"]
    for _ in range(40):
        last = sac.update(batch)["loss/critic"]
    assert last < 0.5 * first


def test_learner_state_dict_resumes_identically(buffer):
    a = learner()
    for _ in range(3):
        a.update(buffer.sample(16))
    b = learner()
    b.load_state_dict(a.state_dict())
    batch = buffer.sample(16)
    assert a.update(batch) == pytest.approx(b.update(batch))
    assert not changed(a.agent.trainable_state_dict(), b.agent.trainable_state_dict())


def test_sac_needs_a_critic():
    with pytest.raises(ValueError, match="needs an agent with a critic"):
        SACLearner(GLAMAgent(AgentConfig(model="tiny-causal", critic="none")), SACConfig())


def test_twin_critic_update_trains_both_heads(buffer):
    sac = learner(agent={"n_critics": 2})
    before = snapshot(sac)
    metrics = sac.update(buffer.sample(16))
    moved = changed(before["agent"], snapshot(sac)["agent"])
    assert any(k.startswith("critic.nets.0.") for k in moved) and any(k.startswith("critic.nets.1.") for k in moved)
    assert metrics["loss/critic"] > 0


def test_target_next_policy_saves_a_forward_and_equals_online_while_the_weights_agree(buffer):
    """`next_policy='target'` takes log pi(s') from the target forward: one LLM forward less, and
    the same update as SAC's online next policy as long as target and online weights are equal
    (a fresh learner); once they differ, the targets differ."""
    batch = buffer.sample(16, n_step=3, mode="ratio")
    metrics, forwards, learners = {}, {}, {}
    for mode in ("online", "target"):
        sac = learners[mode] = learner(next_policy=mode)
        calls = []  # LLM passes: the decoder's forwards
        sac.agent.base_model.get_decoder().register_forward_hook(lambda *_, calls=calls: calls.append(1))
        metrics[mode] = sac.update(batch)
        forwards[mode] = len(calls)
    assert forwards == {"online": 3, "target": 2}
    for key in ("q/target", "loss/critic", "loss/policy", "entropy"):
        assert metrics["target"][key] == pytest.approx(metrics["online"][key], rel=1e-5), key
    for sac in learners.values():  # the online weights moved, the targets only by tau: they now differ
        sac.update(batch)
    second = {mode: sac.update(batch)["q/target"] for mode, sac in learners.items()}
    assert second["target"] != pytest.approx(second["online"], rel=1e-6)


def test_alpha_never_falls_below_its_floor(buffer):
    """With a learning rate that drives alpha down fast (the policy's entropy is far above a 0
    target), alpha stops at `alpha_min`; without the floor it goes below."""
    floors = {}
    for alpha_min in (0.0, 0.04):
        sac = learner(alpha_init=0.05, alpha_lr=0.5, alpha_min=alpha_min, target_entropy=0.0)
        for _ in range(4):
            sac.update(buffer.sample(16, n_step=3, mode="ratio"))
        floors[alpha_min] = sac.alpha
    assert floors[0.04] == pytest.approx(0.04, rel=1e-5)
    assert floors[0.0] < 0.04


def test_entropy_floor_settings_are_validated():
    with pytest.raises(ValueError, match="alpha_min"):
        SACConfig(alpha_init=0.01, alpha_min=0.02)
    with pytest.raises(ValueError, match="target_entropy_ratio"):
        SACConfig(target_entropy_ratio=1.5)


def test_entropy_target_schedule_moves_linearly_then_holds(buffer):
    """0.5 -> 0.1 over 4 steps: the alpha loss of step u uses ratio 0.5 - 0.1 u (then 0.1), each
    state's target that ratio times log(#candidates), checked against the reported loss."""
    sac = learner(target_entropy_ratio=0.5, target_entropy_ratio_final=0.1, target_entropy_anneal_updates=4)
    for step in range(6):
        expected = 0.5 - 0.1 * min(step, 4)
        batch = buffer.sample(16, n_step=3, mode="ratio")
        log_alpha = float(sac.log_alpha.detach())
        metrics = sac.update(batch)
        assert metrics["target_entropy_ratio"] == pytest.approx(expected)
        mean_target = (
            expected * sum(torch.tensor(float(len(c))).log() for c in batch.candidates) / len(batch.candidates)
        )
        assert metrics["loss/alpha"] == pytest.approx(log_alpha * (metrics["entropy"] - float(mean_target)), abs=1e-5)


def test_entropy_schedule_settings_are_validated():
    start = {"target_entropy_ratio": 0.5}
    for settings, message in (
        ({"target_entropy_ratio_final": 0.3, "target_entropy_anneal_updates": 10}, "ratio the schedule starts from"),
        (start | {"target_entropy_ratio_final": 0.3}, "go together"),
        (start | {"target_entropy_anneal_updates": 10}, "go together"),
        (start | {"target_entropy_ratio_final": 1.3, "target_entropy_anneal_updates": 10}, r"must be in \[0, 1\]"),
        (start | {"target_entropy_anneal_updates": -1}, "must be >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            SACConfig(**settings)


def test_a_resumed_learner_continues_the_entropy_schedule(buffer):
    sac = learner(target_entropy_ratio=0.5, target_entropy_ratio_final=0.1, target_entropy_anneal_updates=4)
    for _ in range(2):
        sac.update(buffer.sample(16, n_step=3, mode="ratio"))
    resumed = learner(target_entropy_ratio=0.5, target_entropy_ratio_final=0.1, target_entropy_anneal_updates=4)
    resumed.load_state_dict(sac.state_dict())
    batch = buffer.sample(16, n_step=3, mode="ratio")
    assert resumed.update(batch)["target_entropy_ratio"] == pytest.approx(0.3)


def encoded_rows(sac: SACLearner) -> list[int]:
    """Record how many states each `agent.encode` call of `sac` gets."""
    calls: list[int] = []
    encode = sac.agent.encode

    def counting_encode(observations, candidates):
        calls.append(len(observations))
        return encode(observations, candidates)

    sac.agent.encode = counting_encode  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize(
    "next_policy, agent",
    [("target", {}), ("online", {}), ("target", {"lora_r": 0, "n_critics": 2})],  # the last: the CPU configs' agent
)
def test_terminal_rows_skip_the_next_state_forward_and_the_updates_stay_those_of_a_full_forward(
    buffer, next_policy, agent
):
    """A terminal row's target is its reward alone, so the learner does not forward its next state;
    the updates equal those of a reference learner that forwards every next state (an all-terminal
    batch included, whose targets are the rewards)."""
    batches = [buffer.sample(16, n_step=3, mode="ratio") for _ in range(3)]
    terminal = [int(b.terminal.sum()) for b in batches]
    assert all(0 < t < 16 for t in terminal), terminal  # the batches mix both kinds of row
    batches.append(dataclasses.replace(batches[0], terminal=torch.ones(16, dtype=torch.bool)))
    fast, reference = learner(next_policy=next_policy, agent=agent), learner(next_policy=next_policy, agent=agent)
    reference.skip_terminal_next_states = False
    fast_rows, reference_rows = encoded_rows(fast), encoded_rows(reference)
    for batch in batches:
        got, want = fast.update(batch), reference.update(batch)
        for key in ("q/target", "loss/critic", "loss/policy", "loss/alpha", "entropy", "grad_norm"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    assert got["q/target"] == pytest.approx(float(batches[-1].reward.mean()), rel=1e-6)
    assert fast_rows == [16, 16 - terminal[0], 16, 16 - terminal[1], 16, 16 - terminal[2], 16]
    assert reference_rows == [16] * 8
    for name, value in reference.agent.trainable_state_dict().items():
        torch.testing.assert_close(fast.agent.trainable_state_dict()[name], value, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_of_the_unfused_optimizer_resumes_with_the_fused_one(buffer):
    """Checkpoints written before the learners used the fused Adam hold `fused: None` in their
    parameter groups; loading one must not turn the fused implementation off."""
    sac = learner()
    sac.update(buffer.sample(16))
    state = sac.state_dict()
    for key in ("optimizer", "alpha_optimizer"):
        for group in state[key]["param_groups"]:
            group["fused"] = None  # as the earlier code saved it
    resumed = learner()
    resumed.load_state_dict(state)
    for optimizer in (resumed.optimizer, resumed.alpha_optimizer):
        assert all(group["fused"] for group in optimizer.param_groups)
    before = snapshot(resumed)["agent"]
    resumed.update(buffer.sample(16))
    assert changed(before, snapshot(resumed)["agent"])
