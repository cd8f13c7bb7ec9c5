"""PPO-GLAM: GAE against a naive per-episode computation, the clipped losses, the learner, and a
smoke run of the trainer."""

import json
import math

import pytest
import torch

from sacglam.config import AgentConfig, PipelineConfig, PPOConfig, TrainConfig
from sacglam.learner.ppo_losses import generalized_advantages, ppo_losses


def naive_gae(rewards, values, terminated, truncated, final_values, last_values, gamma, lam):
    """Per environment, with Python floats: delta_t and the discounted sum of later deltas within
    the same episode."""
    T, N = len(rewards), len(rewards[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        for t in range(T):
            total, discount = 0.0, 1.0
            for u in range(t, T):
                if terminated[u][n]:
                    next_v = 0.0
                elif truncated[u][n]:
                    next_v = final_values[u][n]
                else:
                    next_v = last_values[n] if u == T - 1 else values[u + 1][n]
                total += discount * (rewards[u][n] + gamma * next_v - values[u][n])
                if terminated[u][n] or truncated[u][n]:
                    break
                discount *= gamma * lam
            adv[t][n] = total
    return adv


def test_gae_hand_computed_terminal_episode():
    rewards, values = torch.tensor([[0.0], [0.0], [1.0]]), torch.tensor([[0.5], [0.6], [0.7]])
    terminated = torch.tensor([[False], [False], [True]])
    adv, ret = generalized_advantages(
        rewards, values, terminated, torch.zeros_like(terminated), torch.zeros(3, 1), torch.tensor([9.0]), 0.9, 0.95
    )
    d2 = 1.0 - 0.7  # terminal: no bootstrap (the 9.0 of the next episode is ignored)
    d1 = 0.9 * 0.7 - 0.6
    d0 = 0.9 * 0.6 - 0.5
    expected = [d0 + 0.855 * (d1 + 0.855 * d2), d1 + 0.855 * d2, d2]
    assert adv[:, 0].tolist() == pytest.approx(expected)
    assert ret[:, 0].tolist() == pytest.approx([e + v for e, v in zip(expected, [0.5, 0.6, 0.7])])


@pytest.mark.parametrize("seed", range(4))
def test_gae_matches_a_naive_per_episode_computation(seed):
    g = torch.Generator().manual_seed(seed)
    T, N = 7, 3
    rewards, values, final_values = (
        torch.rand(T, N, generator=g),
        torch.rand(T, N, generator=g),
        torch.rand(T, N, generator=g),
    )
    ends = torch.rand(T, N, generator=g)
    terminated, truncated = ends < 0.2, (ends >= 0.2) & (ends < 0.35)
    last = torch.rand(N, generator=g)
    adv, _ = generalized_advantages(rewards, values, terminated, truncated, final_values, last, 0.9, 0.8)
    expected = naive_gae(
        rewards.tolist(),
        values.tolist(),
        terminated.tolist(),
        truncated.tolist(),
        final_values.tolist(),
        last.tolist(),
        0.9,
        0.8,
    )
    assert adv.tolist() == [pytest.approx(row) for row in expected]


def test_ppo_policy_loss_clips_the_ratio():
    log_pi = torch.log(torch.tensor([[0.9, 0.1]])).requires_grad_(True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    old = torch.log(torch.tensor([0.5]))  # ratio 1.8 > 1.2 on action 0
    losses = ppo_losses(
        log_pi,
        mask,
        torch.tensor([0]),
        old,
        torch.tensor([1.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        clip=0.2,
        vf_coef=0.5,
        ent_coef=0.0,
        normalize_advantages=False,
    )
    assert losses.policy.item() == pytest.approx(-1.2)
    losses.policy.backward()
    assert (log_pi.grad == 0).all()  # clipped: no incentive to push further
    assert losses.clip_fraction.item() == 1.0


def test_ppo_losses_at_ratio_one_hand_computed():
    probs = torch.tensor([[0.25, 0.75, 0.0]])
    mask = torch.tensor([[True, True, False]])
    log_pi = torch.log(probs).masked_fill(~mask, float("-inf"))
    losses = ppo_losses(
        log_pi,
        mask,
        torch.tensor([1]),
        torch.log(torch.tensor([0.75])),
        torch.tensor([2.0]),
        torch.tensor([1.0]),
        torch.tensor([0.5]),
        clip=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        normalize_advantages=False,
    )
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert losses.policy.item() == pytest.approx(-2.0)
    assert losses.value.item() == pytest.approx(0.25)  # (0.5 - 1)^2: lamorel's value loss, no 1/2
    assert losses.entropy.item() == pytest.approx(h, abs=1e-6)
    assert losses.total.item() == pytest.approx(-2.0 + 0.5 * 0.25 - 0.01 * h, abs=1e-6)


def test_ppo_runs_through_the_pipeline_and_writes_metrics(tmp_path):
    from sacglam.pipeline.run import run_pipeline

    cfg = TrainConfig(
        algo="ppo",
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic="value", critic_width=32),
        ppo=PPOConfig(rollout_steps=64, epochs=2, minibatch_size=32),
        num_envs=8,
        total_env_steps=128,
        eval_every=128,
        eval_episodes=4,
        warm_start_steps=2,
        output_dir=tmp_path / "ppo",
        progress=False,
        pipeline=PipelineConfig(rollout_workers=2),
    )
    final = run_pipeline(cfg)
    assert 0.0 <= final["eval/simple-test/greedy/all"] <= 1.0
    records = [json.loads(line) for line in (tmp_path / "ppo" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "loss/policy" in r]
    assert trained and trained[-1]["env_steps"] == 128 and trained[-1]["learner/gradient_steps"] == 8
    assert max(r["inference/policy_lag_max"] for r in records if "inference/policy_lag_max" in r) == 0  # on-policy
    assert (tmp_path / "ppo" / "checkpoints" / "latest").exists()
    assert_cumulative_episode_counts(trained)


def assert_cumulative_episode_counts(records):
    """Training records carry cumulative episode and success counts (figure 2's window success)."""
    episodes, successes = [r["train/episodes"] for r in records], [r["train/successes"] for r in records]
    assert episodes == sorted(episodes) and successes == sorted(successes) and episodes[-1] > 0
    assert all(0 <= s <= e for s, e in zip(successes, episodes))


def test_ppo_config_needs_a_value_head_and_whole_rollouts():
    with pytest.raises(ValueError, match="value head"):
        TrainConfig(algo="ppo")
    with pytest.raises(ValueError, match="multiple of num_envs"):
        TrainConfig(algo="ppo", agent=AgentConfig(critic="value"), ppo=PPOConfig(rollout_steps=100), num_envs=32)
