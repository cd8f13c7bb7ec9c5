"""The critic's input standardisation (`sacglam.models.standardise`): its statistics against numpy
on the whole data, the heads against a plain reference in float64, when statistics move, and
that they travel with the weights (checkpoints, broadcasts) and through a SAC learner."""

import threading

import numpy as np
import pytest
import torch

from sacglam.config import AgentConfig, SACConfig
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from sacglam.models.critic import ActionCritic, ObservationCritic, ValueHead
from sacglam.models.standardise import CLIP, VARIANCE_FLOOR, RunningStandardiser
from tests.helpers import random_play_buffer


def feature_batches(seed=0, sizes=(7, 1, 30, 12), dim=6):
    """Pre-trained-like features: a large shared offset, one near-constant dimension, small spread."""
    rng = np.random.default_rng(seed)
    offset = rng.normal(0, 20, dim)
    batches = []
    for n in sizes:
        x = offset + rng.normal(0, 0.5, (n, dim))
        x[:, 0] = 35.0 + rng.normal(0, 1e-3, n)
        batches.append(x)
    return batches


def reference_mlp(x: np.ndarray, net: torch.nn.Sequential) -> np.ndarray:
    """The critic MLP in numpy: Linear, ReLU, Linear, ReLU, Linear."""
    w = [m.weight.detach().numpy() for m in net if isinstance(m, torch.nn.Linear)]
    b = [m.bias.detach().numpy() for m in net if isinstance(m, torch.nn.Linear)]
    h = np.maximum(x @ w[0].T + b[0], 0)
    h = np.maximum(h @ w[1].T + b[1], 0)
    return h @ w[2].T + b[2]


def reference_standardise(x: np.ndarray, seen: np.ndarray) -> np.ndarray:
    mean, var = seen.mean(0), seen.var(0)
    return np.clip((x - mean) / np.sqrt(var + VARIANCE_FLOOR), -CLIP, CLIP)


@pytest.mark.parametrize("head", ["action", "observation", "value"])
def test_a_standardised_head_equals_the_plain_mlp_on_inputs_standardised_by_the_whole_data_in_float64(head):
    torch.manual_seed(0)
    dim = 6
    module = {
        "action": lambda: ActionCritic(dim, width=16, n_critics=2, standardise=True),
        "observation": lambda: ObservationCritic(dim, max_actions=3, width=16, n_critics=2, standardise=True),
        "value": lambda: ValueHead(dim, width=16, standardise=True),
    }[head]().double()
    batches = feature_batches(dim=dim)
    module.input_norm.learning = True
    for x in batches:  # a learner's updates: learning, gradients on
        module(torch.from_numpy(x))
    module.input_norm.learning = False
    seen = np.concatenate(batches)
    probe = feature_batches(seed=1, sizes=(9,), dim=dim)[0]
    probe[0, 1] += 1e3  # far outside the data: clipped
    got = module(torch.from_numpy(probe)).detach().numpy()  # not learning: the statistics stay
    inputs = reference_standardise(probe, seen)
    assert np.abs(inputs).max() == CLIP  # the clip is exercised
    nets = [module.net] if head == "value" else list(module.nets)
    want = np.stack([reference_mlp(inputs, net) for net in nets])
    want = want[0, :, 0] if head == "value" else want[..., 0] if head == "action" else want
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    norm = module.input_norm
    assert norm is not None and float(norm.count) == len(seen)
    np.testing.assert_allclose(norm.mean.numpy(), seen.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), seen.var(0), rtol=1e-9, atol=1e-15)


def test_statistics_merged_batch_by_batch_equal_numpy_on_every_prefix_and_are_float64():
    norm = RunningStandardiser(6)
    norm.learning = True
    batches = feature_batches(seed=3)
    for k, x in enumerate(batches):
        norm(torch.from_numpy(x).float().requires_grad_())
        seen = np.concatenate([b.astype(np.float32).astype(np.float64) for b in batches[: k + 1]])
        np.testing.assert_allclose(norm.mean.numpy(), seen.mean(0), rtol=1e-12)
        np.testing.assert_allclose(norm.var.numpy(), seen.var(0), rtol=1e-8, atol=1e-14)
    assert norm.mean.dtype == norm.var.dtype == norm.count.dtype == torch.float64


def test_before_any_update_the_map_is_exactly_the_identity():
    x = torch.from_numpy(feature_batches()[0]).float()
    norm = RunningStandardiser(6)
    assert torch.equal(norm(x), x)


def test_only_a_learning_forward_with_gradients_moves_the_statistics():
    norm = RunningStandardiser(6)
    x = torch.from_numpy(feature_batches()[2]).float().requires_grad_()
    norm(x)  # acting, evaluating: not learning
    assert float(norm.count) == 0
    norm.learning = True
    with torch.no_grad():  # a target critic's next-state values inside a learner's update
        norm(x)
    assert float(norm.count) == 0
    out = norm(x)
    assert float(norm.count) == len(x)
    out.sum().backward()  # the gradient reaches the features, scaled per dimension; no buffer needs one
    assert x.grad is not None and torch.allclose(x.grad[0], (norm.var.float() + VARIANCE_FLOOR).rsqrt())


def test_standardisation_removes_the_shared_offset_and_equalises_the_scales():
    x = torch.from_numpy(np.concatenate(feature_batches(sizes=(500,)))).float()
    norm = RunningStandardiser(6)
    norm.learning = True
    out = norm(x).detach()
    assert x.mean(0).abs().max() > 10 and out.mean(0).abs().max() < 1e-3
    spread = x[:, 1:].std(0, unbiased=False)  # about 0.5: scaled to unit spread, up to the floor
    np.testing.assert_allclose(
        out[:, 1:].std(0, unbiased=False), spread / (spread**2 + VARIANCE_FLOOR).sqrt(), rtol=1e-3
    )
    assert out[:, 1:].std(0).min() > 0.95
    # the near-constant dimension (std 1e-3) is scaled by at most 1/sqrt(VARIANCE_FLOOR), not to unit scale
    assert out[:, 0].std() < 0.2


def agent(norm: str, seed: int = 0, critic: str = "action") -> GLAMAgent:
    torch.manual_seed(seed)
    return GLAMAgent(AgentConfig(model="tiny-causal", lora_r=8, critic=critic, critic_width=16, critic_input_norm=norm))


def test_auto_standardises_pre_trained_models_only_and_a_run_records_the_choice():
    assert AgentConfig(model="smollm2-135m").standardises_critic_input
    assert AgentConfig(model="some/hub-model").resolved().critic_input_norm == "standardise"
    assert not AgentConfig(model="tiny-causal").standardises_critic_input
    assert AgentConfig(model="tiny-causal").resolved().critic_input_norm == "none"
    assert AgentConfig(model="tiny-causal", critic_input_norm="standardise").standardises_critic_input
    assert not AgentConfig(model="smollm2-135m", critic_input_norm="none").standardises_critic_input
    with pytest.raises(ValueError, match="critic_input_norm"):
        AgentConfig(critic_input_norm="layer")  # type: ignore[arg-type]


@pytest.mark.parametrize("critic", ["action", "value"])
def test_the_statistics_travel_in_the_trainable_state_and_restore_the_same_outputs(critic):
    trained = agent("standardise", critic=critic)
    observations = ["Goal: grasp red rose\nYou see: red rose, blue door\nAction:"] * 2
    candidates = [["Grasp red rose", "Go to blue door"], ["Go to red rose"]]
    batch = trained.encode(observations, candidates)
    with trained.learning_critic_statistics():  # a learner's forward: the statistics take this batch's features
        trained(batch)
    assert not trained.critic.input_norm.learning
    state = trained.trainable_state_dict()
    assert float(state["critic.input_norm.count"]) > 0
    assert {"critic.input_norm.mean", "critic.input_norm.var"} <= set(state)
    fresh = agent("standardise", seed=1, critic=critic)
    fresh.load_trainable_state_dict(state)
    with torch.no_grad():
        a, b = trained(batch), fresh(batch)
    out_a, out_b = (a.q, b.q) if critic == "action" else (a.value, b.value)
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="missing"):  # a raw-input agent's state does not fit
        fresh.load_trainable_state_dict(agent("none").trainable_state_dict())


def test_a_sac_update_accumulates_the_current_states_candidates_only():
    buffer = random_play_buffer(40)
    sac = SACLearner(agent("standardise"), SACConfig(gamma=0.9, batch_size=8, critic_warmup_updates=1))
    norm = sac.agent.critic.input_norm
    expected = 0
    for step in range(3):  # a head-only warm-up step, then ordinary steps
        batch = buffer.sample(8, n_step=3, mode="ratio")
        # the first update primes the statistics with its batch before its targets, then its
        # forward adds the batch as every update does; next states (the target's forward) add nothing
        expected += sum(len(c) for c in batch.candidates) * (2 if step == 0 else 1)
        sac.update(batch)
        assert float(norm.count) == expected
    assert "critic.input_norm.mean" not in sac.target  # the target critic reads the online statistics
    restored = SACLearner(agent("standardise", seed=2), SACConfig(gamma=0.9, batch_size=8))
    restored.load_state_dict(sac.state_dict())
    assert torch.equal(restored.agent.critic.input_norm.mean, norm.mean)


class ThreadGroup:
    """torch.distributed's all_reduce (sum) between ranks running in threads of this process, with a
    barrier that times out instead of hanging: what `RunningStandardiser.update` calls."""

    def __init__(self, world: int):
        self.world, self.barrier = world, threading.Barrier(world, timeout=60)
        self.rank = threading.local()
        self.slots: list = [None] * world

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self) -> int:
        return self.world

    def all_reduce(self, tensor: torch.Tensor) -> None:
        self.slots[self.rank.value] = tensor.clone()
        self.barrier.wait()
        total = sum(self.slots)
        self.barrier.wait()
        tensor.copy_(total)


def test_data_parallel_learners_merge_every_ranks_rows_and_keep_identical_statistics(monkeypatch):
    import sacglam.models.standardise as standardise

    # unequal shares, one of them empty: the merge weights rows, not ranks, and an empty rank
    # still takes part in the collectives
    shares = [feature_batches(seed=10, sizes=(5, 9)), feature_batches(seed=11, sizes=(2, 0))]
    group = ThreadGroup(2)
    monkeypatch.setattr(standardise, "dist", group)
    results: dict[int, tuple] = {}

    def rank(r: int) -> None:
        group.rank.value = r
        norm = RunningStandardiser(6)
        norm.learning = True
        for batch in shares[r]:  # each update: rank r takes its own share
            norm(torch.from_numpy(batch).requires_grad_())
        results[r] = (norm.mean.numpy().copy(), norm.var.numpy().copy(), float(norm.count))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    seen = np.concatenate(shares[0] + shares[1])
    assert sorted(results) == [0, 1]
    for mean, var, count in results.values():
        assert count == len(seen)
        np.testing.assert_allclose(mean, seen.mean(0), rtol=1e-12)
        np.testing.assert_allclose(var, seen.var(0), rtol=1e-9, atol=1e-15)


def test_a_ppo_update_adds_each_rollout_row_once_whatever_the_epochs():
    from sacglam.config import EnvConfig, PPOConfig
    from sacglam.learner.ppo import PPOLearner
    from sacglam.learner.ppo_rollout import rollout_from_segments
    from sacglam.rollout_workers.worker import RolloutWorker

    value = agent("standardise", critic="value")
    cfg = PPOConfig(epochs=3, minibatch_size=16)
    episodes = RolloutWorker(EnvConfig.variant("simple"), 4, seed=0).collect(12, None).episodes
    rollout, _ = rollout_from_segments(value, episodes, cfg, np.random.default_rng(0))
    learner = PPOLearner(value, cfg, seed=0)
    first_share = len(learner.minibatches(len(rollout.actions))[0][1])
    encodes = []
    encode = value.encode
    value.encode = lambda *a, **k: encodes.append(1) or encode(*a, **k)
    assert value.critic_statistics_unprimed() and not agent("none", critic="value").critic_statistics_unprimed()
    learner.update(rollout)  # primed with the first minibatch, then every row once
    assert float(value.critic.input_norm.count) == first_share + len(rollout.actions) > first_share
    assert not value.critic_statistics_unprimed()
    first_update_encodes, encodes[:] = len(encodes), []
    learner.update(rollout)  # primed already: the rows once more, and no batch encoded to prime
    assert float(value.critic.input_norm.count) == first_share + 2 * len(rollout.actions)
    assert len(encodes) == first_update_encodes - 1


def test_a_non_finite_batch_leaves_the_statistics_as_they_were():
    norm = RunningStandardiser(6)
    norm.learning = True
    norm(torch.from_numpy(feature_batches()[0]).float())
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    poisoned = torch.from_numpy(feature_batches()[2]).float()
    poisoned[3, 2] = float("nan")
    norm(poisoned)
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
