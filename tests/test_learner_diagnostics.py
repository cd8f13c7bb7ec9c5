"""The learner's health figures measure what they say: entropy per goal type and the relabeled
rows' goal-type mix on a hand-built batch, per-loss gradient norms on a known pair of losses and
against separate backward passes of a real update, and the evaluation's probability of the
critic's argmax."""

import copy
import dataclasses
import math

import pytest
import torch

from sacglam.config import AgentConfig, EnvConfig, SACConfig
from sacglam.evaluation import OVERALL, EpisodeSpec, run_episodes, summarize_evaluation
from sacglam.learner.diagnostics import gradient_split, mean_by_type, share_by_type
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from sacglam.models.policy import LLMPolicy
from tests.helpers import random_play_buffer


def test_mean_by_type_averages_each_types_rows():
    values = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0])
    types = ["grasp", "grow", "grasp", "grow", "grow"]
    assert mean_by_type(values, types, "entropy") == {"entropy/grasp": 2.5, "entropy/grow": pytest.approx(26 / 3)}
    assert mean_by_type(values, [], "entropy") == {}
    with pytest.raises(ValueError, match="2 goal types for 5 rows"):
        mean_by_type(values, types[:2], "entropy")


def test_share_by_type_counts_the_selected_rows_only():
    types = ["grasp", "grasp", "grow", "grasp", "grow", "grow"]
    relabeled = torch.tensor([True, True, True, True, False, False])
    assert share_by_type(types, relabeled, "batch/relabeled_share") == {
        "batch/relabeled_share/grasp": 0.75,
        "batch/relabeled_share/grow": 0.25,
    }
    assert share_by_type(types, torch.zeros(6, dtype=torch.bool), "x") == {}


def test_gradient_split_of_a_known_pair_of_losses():
    """w is shared, h only the critic's, u only the policy's: critic = (w.x + h)^2, policy = w.y + u^2."""
    w, h, u = torch.tensor([1.0, 2.0]), torch.tensor(0.5), torch.tensor(3.0)
    x, y = torch.tensor([1.0, -1.0]), torch.tensor([2.0, 1.0])
    critic_w = 2 * (w @ x + h) * x  # (-1, 1)
    critic_h = 2 * (w @ x + h)  # -1
    policy_w, policy_u = y, 2 * u  # (2, 1), 6
    split = gradient_split([critic_w, critic_h, None], [policy_w, None, policy_u])
    assert split["grad_norm/critic"] == pytest.approx(math.sqrt(1 + 1 + 1))
    assert split["grad_norm/policy"] == pytest.approx(math.sqrt(4 + 1 + 36))
    assert split["grad_norm/critic_shared"] == pytest.approx(math.sqrt(2))
    assert split["grad_norm/policy_shared"] == pytest.approx(math.sqrt(5))
    assert split["grad_cosine/shared"] == pytest.approx(-1 / math.sqrt(10))


def test_gradient_split_without_shared_weights_reports_zero_there():
    a, b = torch.ones(3), torch.ones(2)
    split = gradient_split([a * 2, None], iter([None, b]))
    assert split["grad_norm/critic_shared"] == split["grad_cosine/shared"] == 0.0
    assert split["grad_norm/critic"] == pytest.approx(2 * math.sqrt(3))


@pytest.fixture(scope="module")
def terminal_batch():
    batch = random_play_buffer(40).sample(24, n_step=3, mode="ratio")
    # every row terminal: the target is the reward alone, so a reference needs no target critic
    return dataclasses.replace(batch, terminal=torch.ones(24, dtype=torch.bool))


def reference_gradient_norms(agent: GLAMAgent, batch, alpha: float) -> dict[str, float]:
    """Each loss's gradient from its own backward pass, written out without the learner's helpers."""
    out = agent(agent.encode(batch.observations, batch.candidates))
    q_taken = out.q_critics[0].gather(1, batch.actions[:, None]).squeeze(1)
    critic = 0.5 * ((q_taken - batch.reward) ** 2).mean()
    probs = out.log_pi.exp()
    clean_log_pi = torch.where(out.mask, out.log_pi, torch.zeros(()))
    policy = (probs * (alpha * clean_log_pi - out.q.detach())).sum(-1).mean()
    llm = [p for n, p in agent.named_parameters() if p.requires_grad and not n.startswith("critic.")]
    head = [p for n, p in agent.named_parameters() if n.startswith("critic.")]
    critic_llm = torch.autograd.grad(critic, llm, retain_graph=True)
    critic_head = torch.autograd.grad(critic, head, retain_graph=True)
    policy_llm = torch.autograd.grad(policy, llm)

    def norm(grads):
        return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))

    dot = sum(float((a.double() * b.double()).sum()) for a, b in zip(critic_llm, policy_llm))
    return {
        "grad_norm/critic": math.hypot(norm(critic_llm), norm(critic_head)),
        "grad_norm/policy": norm(policy_llm),
        "grad_norm/critic_shared": norm(critic_llm),
        "grad_norm/policy_shared": norm(policy_llm),
        "grad_cosine/shared": dot / (norm(critic_llm) * norm(policy_llm)),
    }


def test_an_updates_gradient_norms_are_those_of_each_loss_alone(terminal_batch):
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)).eval()
    expected = reference_gradient_norms(copy.deepcopy(agent), terminal_batch, alpha=0.05)
    sac = SACLearner(agent, SACConfig(gamma=0.9, batch_size=24, alpha_init=0.05, grad_diagnostics_every=1))
    metrics = sac.update(terminal_batch)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-7), name
    assert 0 < metrics["grad_norm/policy_shared"] and 0 < metrics["grad_norm/critic_shared"]


def test_gradient_norms_come_every_k_updates_and_warmup_has_no_policy_norm(terminal_batch):
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)).eval()
    sac = SACLearner(agent, SACConfig(gamma=0.9, batch_size=24, grad_diagnostics_every=3, critic_warmup_updates=1))
    measured = ["grad_norm/critic" in sac.update(terminal_batch) for _ in range(7)]
    assert measured == [True, False, False, True, False, False, True]
    sac = SACLearner(agent, SACConfig(gamma=0.9, batch_size=24, grad_diagnostics_every=1, critic_warmup_updates=1))
    first = sac.update(terminal_batch)
    assert "grad_norm/critic" in first and "grad_norm/policy" not in first


@pytest.mark.parametrize("critic_weights", ["shared", "own"])
def test_diagnostics_leave_the_update_itself_unchanged(critic_weights):
    """Weights, Adam's moments, the target critic and alpha after three updates on batches that
    bootstrap (no terminal row forced) are bit for bit those of updates without diagnostics."""
    batches = [random_play_buffer(40).sample(24, n_step=3, mode="ratio") for _ in range(3)]
    states = []
    for every in (0, 1):
        torch.manual_seed(0)
        agent = GLAMAgent(
            AgentConfig(model="tiny-causal", lora_r=0, critic_width=32, n_critics=2, critic_weights=critic_weights)
        ).eval()
        sac = SACLearner(agent, SACConfig(gamma=0.9, batch_size=24, grad_diagnostics_every=every))
        for batch in batches:
            sac.update(batch)
        states.append(sac.state_dict())
    first, second = states
    for part in ("agent", "target"):
        assert all(torch.equal(first[part][k], second[part][k]) for k in first[part]), part
    assert torch.equal(first["log_alpha"], second["log_alpha"])
    moments = [
        (a, b)
        for sa, sb in zip(first["optimizer"]["state"].values(), second["optimizer"]["state"].values())
        for a, b in zip(sa.values(), sb.values())
    ]
    assert moments and all(torch.equal(a, b) for a, b in moments)


def test_learner_metrics_are_averaged_over_the_learners_that_report_them():
    from sacglam.pipeline.driver import mean_over_learners

    two = [{"loss/critic": 1.0, "entropy/grow": 0.5}, {"loss/critic": 3.0, "entropy/grasp": 0.25}]
    assert mean_over_learners(two) == {"loss/critic": 2.0, "entropy/grow": 0.5, "entropy/grasp": 0.25}


def test_an_update_reports_entropy_and_relabeled_mix_per_goal_type(terminal_batch):
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)).eval()
    with torch.no_grad():
        out = agent(agent.encode(terminal_batch.observations, terminal_batch.candidates), with_critic=False)
    rows = {}
    for i, name in enumerate(terminal_batch.goal_types):
        rows.setdefault(name, []).append(i)
    probs = out.log_pi.exp()
    per_row = -(probs * torch.where(out.mask, out.log_pi, torch.zeros(()))).sum(-1)
    metrics = SACLearner(agent, SACConfig(gamma=0.9, batch_size=24)).update(terminal_batch)
    for name, index in rows.items():
        assert metrics[f"entropy/{name}"] == pytest.approx(float(per_row[index].mean()), rel=1e-5)
    relabeled = [t for t, r in zip(terminal_batch.goal_types, terminal_batch.relabeled.tolist()) if r]
    for name in set(relabeled):
        assert metrics[f"batch/relabeled_share/{name}"] == relabeled.count(name) / len(relabeled)


class ConstantMeasure:
    """Acts with the first candidate and measures 0.25 on even steps, 0.75 on odd ones."""

    name = "constant"

    def __init__(self):
        self.calls = 0

    def act_measured(self, observations, candidates):
        self.calls += 1
        return [c[0] for c in candidates], [0.25 if self.calls % 2 else 0.75] * len(observations)

    def act(self, observations, candidates):
        return self.act_measured(observations, candidates)[0]


def test_an_episodes_measure_is_the_mean_over_its_steps():
    env = EnvConfig.variant("simple")
    specs = [EpisodeSpec(goal="Grasp blue dog", seed=s) for s in range(3)]
    results = run_episodes(ConstantMeasure(), env, specs, num_envs=3)
    for r in results:  # every episode acts at every call: steps alternate 0.25, 0.75, ...
        expected = [0.25 if k % 2 == 0 else 0.75 for k in range(r.steps)]
        assert r.measure == pytest.approx(sum(expected) / len(expected))


def test_the_policy_measures_pi_of_the_critics_argmax():
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)).eval()
    env = EnvConfig.variant("simple").spec().make()
    observation, info = env.reset(seed=3)
    observations, candidates = [observation] * 2, [info["candidates"], info["candidates"][:2]]
    actions, measures = LLMPolicy(agent, greedy=True, measure_critic=True).act_measured(observations, candidates)
    with torch.no_grad():
        for i, (obs, cands) in enumerate(zip(observations, candidates)):
            out = agent(agent.encode([obs], [cands]))
            best = int(out.q[0].argmax())
            assert measures[i] == pytest.approx(float(out.log_pi[0, best].exp()), rel=1e-5)
            assert actions[i] == cands[int(out.log_pi[0].argmax())]
    assert LLMPolicy(agent, greedy=True).act_measured(observations, candidates)[1] is None  # not asked for


def test_evaluation_reports_the_measure_per_goal_type_weighted_like_success():
    from sacglam.evaluation import EpisodeResult, EvaluationPart

    env = EnvConfig.variant("simple")
    part = EvaluationPart(env, "greedy", (), 0, 1)
    results = [
        EpisodeResult("Grasp red cat", "grasp", 0, True, 2, measure=0.2),
        EpisodeResult("Grasp blue dog", "grasp", 1, False, 8, measure=0.4),
        EpisodeResult("Grow any animal", "grow", 2, False, 8, measure=0.9),
    ]
    figures = summarize_evaluation([part], [results])
    share = env.spec().type_shares()
    assert figures["eval_pi_q_argmax/simple-train/greedy/grasp"] == pytest.approx(0.3)
    assert figures["eval_pi_q_argmax/simple-train/greedy/grow"] == pytest.approx(0.9)
    assert figures[f"eval_pi_q_argmax/simple-train/greedy/{OVERALL}"] == pytest.approx(
        0.3 * share["grasp"] + 0.9 * share["grow"]
    )
