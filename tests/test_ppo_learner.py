"""PPO-GLAM's learner: fixed minibatches with the old policy taken per minibatch (a first step at
ratio exactly 1, bfloat16 included), and lamorel's value loss, value target and rollout-wide
advantage normalisation, each against a hand or naive computation."""

import dataclasses
import threading

import numpy as np
import pytest
import torch

import sacglam.learner.ppo as ppo_module
from sacglam.config import AgentConfig, EnvConfig, PPOConfig
from sacglam.envs.protocol import with_goal
from sacglam.learner.ppo import PPOLearner
from sacglam.learner.ppo_losses import ppo_losses
from sacglam.learner.ppo_rollout import rollout_from_segments
from sacglam.models import GLAMAgent
from sacglam.rollout_workers.worker import RolloutWorker


def value_agent(**config) -> GLAMAgent:
    torch.manual_seed(0)
    return GLAMAgent(
        AgentConfig(**({"model": "tiny-causal", "lora_r": 16, "critic": "value", "critic_width": 32} | config))
    ).eval()


@pytest.fixture(scope="module")
def full_task_episodes():
    """Random-play episodes of the full task: long prompts, 3 to 9 candidates, so the states of a
    minibatch are padded differently from those of the rollout pass."""
    return RolloutWorker(EnvConfig.variant("full"), 10, seed=0).collect(30, None).episodes


def captured_losses(monkeypatch) -> list[dict]:
    """Every `ppo_losses` call of the learner, its arguments by name."""
    calls: list[dict] = []
    names = ["log_pi", "mask", "actions", "old_log_prob", "advantages", "returns", "values", "clip", "vf_coef"]

    def spy(*args, **kwargs):
        calls.append(dict(zip(names, args)) | kwargs)
        return ppo_losses(*args, **kwargs)

    monkeypatch.setattr(ppo_module, "ppo_losses", spy)
    return calls


def captured_forwards(monkeypatch) -> list[list[int]]:
    """The rollout rows of every forward the learner runs, in order (old-policy pass, then steps)."""
    seen: list[list[int]] = []
    real = PPOLearner._forward

    def spy(self, rollout, rows, share):
        seen.append(rows.tolist())
        return real(self, rollout, rows, share)

    monkeypatch.setattr(PPOLearner, "_forward", spy)
    return seen


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_first_step_has_ratio_exactly_one_and_no_clipping(monkeypatch, full_task_episodes, dtype):
    """The configured dtype's path end to end: the first step's ratio is exactly 1 and its value
    unclipped. (On this CPU bfloat16 scores do not depend on the batch, so the code before the fix
    passed this too; the next test makes the dependence large and fails that code.)"""
    agent = value_agent(lora_r=8, dtype=dtype)
    cfg = PPOConfig(epochs=2, minibatch_size=16, clip_value=True)
    rollout, _ = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
    calls = captured_losses(monkeypatch)
    metrics = PPOLearner(agent, cfg, seed=0).update(rollout)
    first = calls[0]
    new = first["log_pi"].detach().gather(1, first["actions"][:, None]).squeeze(1)
    assert torch.equal(new, first["old_log_prob"])  # ratio exactly 1
    assert torch.equal(first["values"].detach(), first["old_values"])  # the value starts unclipped
    assert metrics["ppo/first_step_log_ratio"] == 0.0 and metrics["ppo/first_step_clip_fraction"] == 0.0
    assert len(calls) == 2 * -(-len(rollout.actions) // 16)


def test_the_old_policy_is_taken_with_each_minibatchs_batch_composition(monkeypatch, full_task_episodes):
    """A model whose scores depend on the batch they are computed in (as bfloat16 kernels' rounding
    does, made large and deterministic here: a shift that grows with the batch size): the rollout
    pass (up to 256 states) and a minibatch (16) score a state differently, yet the first step's
    ratio is exactly 1, because the old policy comes from the minibatch's own composition. On the
    code that took it from the rollout pass, the first step's |log ratio| reached 1.3 here."""
    real = GLAMAgent.candidate_scores

    def batch_dependent(self, batch, *args, **kwargs):
        scores = real(self, batch, *args, **kwargs)
        shift = 1e-3 * len(batch.index.counts) * batch.index.slot.float()
        return dataclasses.replace(scores, log_likelihood=scores.log_likelihood + shift)

    monkeypatch.setattr(GLAMAgent, "candidate_scores", batch_dependent)
    agent = value_agent()
    cfg = PPOConfig(epochs=1, minibatch_size=16)
    rollout, _ = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
    first16 = torch.arange(16)
    alone = PPOLearner(agent, cfg, seed=0).old_policy(rollout, [first16]).log_prob[first16]
    assert (alone - rollout.old_log_prob[first16]).abs().max() > 0.1  # the rollout pass scored them otherwise
    calls = captured_losses(monkeypatch)
    metrics = PPOLearner(agent, cfg, seed=0).update(rollout)
    new = calls[0]["log_pi"].detach().gather(1, calls[0]["actions"][:, None]).squeeze(1)
    assert torch.equal(new, calls[0]["old_log_prob"])
    assert metrics["ppo/first_step_log_ratio"] == 0.0 and metrics["ppo/first_step_clip_fraction"] == 0.0


def test_minibatches_are_fixed_for_the_rollout_and_visited_in_a_new_order_every_epoch(monkeypatch, full_task_episodes):
    agent = value_agent()
    cfg = PPOConfig(epochs=3, minibatch_size=32)
    rollout, _ = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
    seen = captured_forwards(monkeypatch)
    PPOLearner(agent, cfg, seed=0).update(rollout)
    n = -(-len(rollout.actions) // 32)
    assert len(seen) == n + 3 * n  # the old-policy pass, then 3 epochs of n steps
    old_pass, epochs = seen[:n], [seen[n + e * n : n + (e + 1) * n] for e in range(3)]
    assert sorted(sum(old_pass, [])) == list(range(len(rollout.actions)))  # every row, once
    partition = sorted(map(tuple, old_pass))
    assert all(sorted(map(tuple, epoch)) == partition for epoch in epochs)
    assert len({tuple(map(tuple, epoch)) for epoch in epochs}) > 1  # the order changes


@pytest.mark.parametrize("mode", ["rollout", "minibatch", "none"])
def test_advantages_are_normalised_over_the_rollout_per_minibatch_or_not(monkeypatch, full_task_episodes, mode):
    agent = value_agent()
    cfg = PPOConfig(epochs=1, minibatch_size=32, advantage_normalization=mode)
    rollout, _ = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
    calls, seen = captured_losses(monkeypatch), captured_forwards(monkeypatch)
    PPOLearner(agent, cfg, seed=0).update(rollout)
    a = rollout.advantages
    steps = seen[len(calls) :]  # after the old-policy pass, one forward per step
    assert len(steps) == len(calls) > 1
    for call, rows in zip(calls, steps):
        if mode == "rollout":
            expected = ((a - a.mean()) / (a.std() + 1e-8))[rows]
        elif mode == "minibatch":
            expected = (a[rows] - a[rows].mean()) / (a[rows].std() + 1e-8)
        else:
            expected = a[rows]
        torch.testing.assert_close(call["advantages"], expected)


def test_the_value_loss_is_lamorels_clipped_squared_error_hand_computed():
    log_pi = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    mask = torch.ones(2, 2, dtype=torch.bool)
    common = dict(
        log_pi=log_pi,
        mask=mask,
        actions=torch.tensor([0, 1]),
        old_log_prob=torch.log(torch.tensor([0.5, 0.5])),
        advantages=torch.zeros(2),
        returns=torch.tensor([1.0, 0.0]),
        values=torch.tensor([0.6, 0.3]),
        clip=0.2,
        vf_coef=0.5,
        ent_coef=0.0,
        normalize_advantages=False,
    )
    unclipped = ppo_losses(**common)
    assert unclipped.value.item() == pytest.approx((0.4**2 + 0.3**2) / 2)
    # Old values 0.2 and 0.0: row 0's V may move to 0.4 at most (error 0.6 > 0.4: the clipped one
    # counts), row 1's to 0.2 (error 0.2 < 0.3: the unclipped one counts).
    clipped = ppo_losses(**common, old_values=torch.tensor([0.2, 0.0]))
    assert clipped.value.item() == pytest.approx((0.6**2 + 0.3**2) / 2)
    assert clipped.total.item() == pytest.approx(0.5 * clipped.value.item())


def test_the_value_target_is_the_discounted_reward_to_go_bootstrapped_where_a_segment_does_not_terminate():
    worker = RolloutWorker(EnvConfig.variant("simple"), 3, seed=3)  # terminated, truncated and cut segments
    segments = worker.collect(11, None, cut=True).episodes
    agent, gamma = value_agent(), 0.9
    targets = {}
    for target in ("reward_to_go", "gae"):
        cfg = PPOConfig(gamma=gamma, gae_lambda=0.95, value_target=target)
        rollout, _ = rollout_from_segments(agent, segments, cfg, np.random.default_rng(0))
        targets[target] = rollout
    expected = []
    for s in segments:
        with torch.no_grad():
            last = agent(agent.encode([with_goal(s.states[-1], s.goal)], [list(s.candidates[-1])]))
        bootstrap = 0.0 if s.terminated else float(last.value)
        to_go, out = bootstrap, []
        for r in reversed(s.rewards):
            to_go = r + gamma * to_go
            out.append(to_go)
        expected += out[::-1]
    torch.testing.assert_close(targets["reward_to_go"].returns, torch.tensor(expected), atol=1e-5, rtol=0)
    gae = targets["gae"]
    assert not torch.allclose(gae.returns, targets["reward_to_go"].returns)
    torch.testing.assert_close(targets["reward_to_go"].advantages, gae.advantages)  # only the target differs


def test_reusing_the_frozen_trunk_over_the_epochs_gives_the_same_update_with_one_trunk_pass(full_task_episodes):
    """With LoRA on the top block only, each minibatch's trunk output is kept from the old-policy
    pass for every epoch: the trunk runs once per minibatch, and the update equals recomputing it."""
    learners, trunk_passes = {}, {}
    for reuse in (True, False):
        agent = value_agent(lora_r=8, lora_layers=1)
        cfg = PPOConfig(epochs=3, minibatch_size=64, reuse_frozen_trunk=reuse)
        rollout, _ = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
        calls: list[int] = []  # runs of the frozen block during the update
        agent.base_model.get_decoder().layers[0].register_forward_hook(lambda *_, calls=calls: calls.append(1))
        learners[reuse] = (PPOLearner(agent, cfg, seed=0), rollout)
        metrics = learners[reuse][0].update(rollout)
        trunk_passes[reuse] = (len(calls), metrics)
    shares = -(-len(rollout.actions) // 64)
    assert trunk_passes[True][0] == shares and trunk_passes[False][0] == 4 * shares
    for key in ("loss/policy", "loss/value", "entropy", "ppo/clip_fraction"):
        assert trunk_passes[True][1][key] == pytest.approx(trunk_passes[False][1][key], rel=1e-5, abs=1e-7), key
    reused, recomputed = (learners[r][0].agent.trainable_state_dict() for r in (True, False))
    for name, value in recomputed.items():
        torch.testing.assert_close(reused[name], value, rtol=1e-5, atol=1e-6)
    assert not learners[True][0]._trunks  # nothing kept after the update


def test_relabeled_rows_keep_the_original_goals_old_policy_and_their_centre_comes_from_the_minibatch(
    monkeypatch, full_task_episodes
):
    """A relabeled row's old log-prob is the behaviour's for the original goal (another prompt: it
    is kept), while its clipping centre, pi(a|s, g') / pi_old(a|s, g), is taken with the
    minibatch's own forward, so centred clipping clips nothing at the first step either."""
    agent = value_agent()
    cfg = PPOConfig(epochs=1, minibatch_size=32, her=True, her_centered=True)
    rollout, added = rollout_from_segments(agent, full_task_episodes, cfg, np.random.default_rng(0))
    assert added > 0 and rollout.relabeled is not None and int(rollout.relabeled.sum()) == added
    learner = PPOLearner(agent, cfg, seed=0)
    shares = [share for _, share in PPOLearner(agent, cfg, seed=0).minibatches(len(rollout.actions))]
    old = learner.old_policy(rollout, shares)
    relabeled = rollout.relabeled
    assert torch.equal(old.log_prob[relabeled], rollout.old_log_prob[relabeled])
    assert torch.equal(old.behavior_log_pi[relabeled], rollout.behavior_log_pi[relabeled])
    for rows in shares:
        with torch.no_grad():
            out = agent(agent.encode([rollout.observations[i] for i in rows], [rollout.candidates[i] for i in rows]))
        taken = out.log_pi.gather(1, rollout.actions[rows][:, None]).squeeze(1)
        own = ~relabeled[rows]
        torch.testing.assert_close(old.log_prob[rows][own], taken[own], rtol=0, atol=1e-6)
        torch.testing.assert_close(
            old.clip_center[rows][~own], (taken[~own] - rollout.old_log_prob[rows][~own]).exp(), rtol=1e-6, atol=1e-6
        )
    metrics = PPOLearner(agent, cfg, seed=0).update(rollout)
    assert metrics["ppo/first_step_clip_fraction"] == 0.0 and metrics["ppo/first_step_log_ratio"] == 0.0


class ThreadAllReduce:
    """Data-parallel gradient averaging between learners running in threads of this process: the
    contract of `distributed.average_gradients` (every rank's finite flag first, then each
    gradient's mean over the ranks), with a barrier that times out instead of hanging."""

    def __init__(self, world: int):
        self.world, self.barrier = world, threading.Barrier(world, timeout=60)
        self.flags: list[bool] = [True] * world
        self.grads: list[list[torch.Tensor]] = [[] for _ in range(world)]
        self.steps: list[list[list[torch.Tensor]]] = [[] for _ in range(world)]  # averaged, per step
        self.metrics: list[dict[str, float]] = [{} for _ in range(world)]  # each rank's update metrics

    def for_rank(self, rank: int):
        def sync(params: list[torch.Tensor], finite: bool) -> bool:
            self.flags[rank] = finite
            self.barrier.wait()
            if not all(self.flags):
                return False
            self.grads[rank] = [p.grad.clone() for p in params]
            self.barrier.wait()
            mean = [sum(g[i] for g in self.grads) / self.world for i in range(len(params))]
            self.barrier.wait()
            for p, g in zip(params, mean):
                p.grad.copy_(g)
            self.steps[rank].append(mean)
            return True

        return sync


def data_parallel_update(rollout, cfg: PPOConfig, world: int) -> ThreadAllReduce:
    """`world` learners (identical agents, same seed) update on `rollout` in threads; returns the
    all-reduce, which holds each rank's averaged gradients step by step and its update metrics."""
    reduce = ThreadAllReduce(world)
    learners = []
    for rank in range(world):
        learner = PPOLearner(value_agent(lora_r=8), cfg, seed=0, rank=rank, world_size=world)
        learner.gradient_sync = reduce.for_rank(rank)
        learners.append(learner)
    errors: list[BaseException] = []

    def run(learner):
        try:
            reduce.metrics[learner.rank] = learner.update(rollout)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
            reduce.barrier.abort()

    threads = [threading.Thread(target=run, args=(learner,)) for learner in learners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return reduce


def minibatch_size_leaving(rows: int, remainder: int) -> int:
    return next(size for size in range(12, rows) if rows % size == remainder)


def test_data_parallel_ppo_shares_a_last_minibatch_smaller_than_the_learners_without_an_empty_share(
    full_task_episodes,
):
    """A rollout's row count is arbitrary (own plus relabeled rows): a last minibatch of one row
    left the second learner an empty share, which failed to encode while the first learner waited
    in the gradient all-reduce. Now that row joins the minibatch before it and both learners step."""
    rollout, _ = rollout_from_segments(value_agent(lora_r=8), full_task_episodes, PPOConfig(), np.random.default_rng(0))
    cfg = PPOConfig(epochs=1, minibatch_size=minibatch_size_leaving(len(rollout.actions), 1))
    shares = [
        [
            share
            for _, share in PPOLearner(value_agent(lora_r=8), cfg, seed=0, rank=r, world_size=2).minibatches(
                len(rollout.actions)
            )
        ]
        for r in (0, 1)
    ]
    assert all(len(share) > 0 for rank in shares for share in rank)
    every_row = torch.cat([share for rank in shares for share in rank]).sort().values
    assert torch.equal(every_row, torch.arange(len(rollout.actions)))  # each row in one share
    steps = data_parallel_update(rollout, cfg, world=2).steps
    assert len(steps[0]) == len(steps[1]) == len(rollout.actions) // cfg.minibatch_size


def test_data_parallel_ppo_steps_are_the_single_learners_when_shares_are_unequal(full_task_episodes):
    """A minibatch of 3 rows on 2 learners is shared 2 and 1: each learner's mean loss is weighted
    by its share, so the averaged gradient is the 3-row mean (a plain average of the two means
    would weigh the lone row twice)."""
    rollout, _ = rollout_from_segments(value_agent(lora_r=8), full_task_episodes, PPOConfig(), np.random.default_rng(0))
    cfg = PPOConfig(epochs=1, minibatch_size=minibatch_size_leaving(len(rollout.actions), 3))
    parallel = data_parallel_update(rollout, cfg, world=2)
    single = data_parallel_update(rollout, cfg, world=1)
    assert len(single.steps[0]) == len(parallel.steps[0]) == -(-len(rollout.actions) // cfg.minibatch_size)
    for step, (mine, reference) in enumerate(zip(parallel.steps[0], single.steps[0])):
        for a, b in zip(mine, reference):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=f"step {step}")
    # the driver logs the plain mean of the learners' metrics: weighted like the loss, it is the minibatch's
    for name in ("loss/policy", "loss/value", "entropy", "ppo/approx_kl", "grad_norm"):
        mean = sum(m[name] for m in parallel.metrics) / 2
        assert mean == pytest.approx(single.metrics[0][name], rel=1e-4, abs=1e-7), name
