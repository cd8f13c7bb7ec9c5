"""PPO with HER (paper appendix G): sub-goals, relabeled segments, the KL and centred-clip losses."""

import pytest
import torch

from sacglam.config import AgentConfig, PPOConfig
from sacglam.envs.goals import SIMPLE_TRAIN_GOALS, is_subgoal, parse_goal
from sacglam.learner.ppo_losses import ppo_losses
from sacglam.models.agent import GLAMAgent
from sacglam.training.ppo_her import StepRecord, choose_segments, relabel_candidates, relabeled_transitions


@pytest.mark.parametrize("candidate, goal, expected", [
    ("Grasp red lion", "Grasp red lion", True),
    ("Grasp any animal", "Grasp red lion", True),  # a generalization is achieved by the same event
    ("Grasp any red thing", "Grasp red lion", True),
    ("Grasp blue tree", "Grasp red lion", False),  # the paper's example of a goal to filter out
    ("Grasp red lion", "Grasp any animal", False),  # a specialization is not needed
    ("Grow any animal", "Grow red lion", True),
    ("Grasp any supply", "Grow red lion", True),  # an animal grows from food or water: a supply is needed
    ("Grasp any water", "Grow red lion", False),  # food would do
    ("Grasp any water", "Grow red tree", True),  # a plant grows from water only
    ("Grow red lion", "Grow red lion then grasp blue sofa", True),
    ("Grasp blue sofa", "Grow red lion then grasp blue sofa", True),
    ("Grow any animal then grasp any furniture", "Grow red lion then grasp blue sofa", True),
    ("Grow blue cat then grasp blue sofa", "Grow red lion then grasp blue sofa", False),
])
def test_sub_goals_are_what_every_way_to_the_goal_achieves(candidate, goal, expected):
    assert is_subgoal(candidate, goal) is expected


def test_a_single_sub_goal_of_the_same_verb_is_achieved_by_every_object_that_achieves_the_goal():
    from sacglam.envs.vocabulary import COLORS, TYPES

    objects = [(c, t) for c in COLORS for t in TYPES]
    for goal in SIMPLE_TRAIN_GOALS[::7]:
        assert is_subgoal(goal, goal)
        (g,) = parse_goal(goal)
        for candidate in SIMPLE_TRAIN_GOALS[::3]:
            (c,) = parse_goal(candidate)
            if c.verb == g.verb:
                covered = all(c.matches(o) for o in objects if g.matches(o))
                assert is_subgoal(candidate, goal) is covered, (candidate, goal)


def _records(reported, ended, goal="Grasp red lion"):
    T = len(reported)
    return [StepRecord(states=["s"], goals=[goal], candidates=[["Grasp", "Release"]], actions=[0],
                       old_log_prob=torch.tensor([-0.5]), behavior_log_pi=torch.log(torch.tensor([[0.6, 0.4]])),
                       reported=[tuple(reported[t])], ended=[ended[t]]) for t in range(T)]


def test_a_reported_goal_relabels_its_segment_up_to_the_report_and_never_crosses_an_episode_end():
    records = _records(reported=[["Grasp any animal"], [], [], ["Grasp blue tree"], []], ended=[False, True, False, False, True])
    segments = relabel_candidates(records, aligned=False)
    assert [(s.start, s.end, s.goal) for s in segments] == [(0, 0, "Grasp any animal"), (2, 3, "Grasp blue tree")]
    aligned = relabel_candidates(records, aligned=True)
    assert [(s.start, s.end, s.goal) for s in aligned] == [(0, 0, "Grasp any animal")]
    own = relabel_candidates(_records([["Grasp red lion"]], [True]), aligned=False)
    assert own == []  # the episode's own goal is not a relabel


def test_the_budget_keeps_whole_segments():
    records = _records(reported=[[], ["Grasp any animal"], [], ["Grasp blue tree"]], ended=[False] * 4)
    segments = relabel_candidates(records, aligned=False)  # lengths 2 and 4
    chosen = choose_segments(segments, budget=3, generator=torch.Generator().manual_seed(0))
    assert [(s.start, s.end) for s in chosen] == [(0, 1)]


def test_relabeled_transitions_pay_one_at_the_report_and_keep_the_behaviour_probabilities():
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic="value", critic_width=16)).eval()
    from sacglam.config import EnvConfig

    env = EnvConfig.variant("simple").make()
    obs, info = env.reset(seed=0)
    from sacglam.envs.observation import split_goal

    goal, state = split_goal(obs)
    record = StepRecord(states=[state, state], goals=[goal, goal], candidates=[info["candidates"]] * 2, actions=[1, 0],
                        old_log_prob=torch.tensor([-1.0, -2.0]),
                        behavior_log_pi=torch.log_softmax(torch.randn(2, len(info["candidates"])), -1),
                        reported=[(), ()], ended=[False, False])
    from sacglam.training.ppo_her import RelabeledSegment

    other = next(g for g in SIMPLE_TRAIN_GOALS if g != goal)
    out = relabeled_transitions(agent, [record, record], [RelabeledSegment(0, 0, 1, other)], gamma=0.9, lam=0.95, centered=True)
    assert out["observations"][0].startswith(f"Goal: {other}") or other in out["observations"][0]
    assert torch.allclose(out["returns"][-1], torch.tensor(1.0))  # terminal at the report, reward 1
    assert torch.equal(out["old_log_prob"], torch.tensor([-1.0, -1.0]))  # the behaviour's, for the original goal
    assert out["clip_center"].shape == (2,) and not torch.allclose(out["clip_center"], torch.ones(2))


def _loss_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.log_softmax(torch.randn(6, 4, generator=g), -1).requires_grad_(True)
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[0, 3] = False
    actions = torch.tensor([0, 1, 2, 3, 0, 1])
    return dict(log_pi=log_pi, mask=mask, actions=actions, old_log_prob=log_pi.detach().gather(1, actions[:, None]).squeeze(1) - 0.1,
                advantages=torch.randn(6, generator=g), returns=torch.randn(6, generator=g), values=torch.randn(6, generator=g),
                clip=0.2, vf_coef=0.5, ent_coef=0.01)


def test_clipping_around_one_is_the_default_and_a_centre_moves_the_range():
    inputs = _loss_inputs()
    default = ppo_losses(**inputs)
    centred_at_one = ppo_losses(**inputs, clip_center=torch.ones(6))
    assert torch.allclose(default.total, centred_at_one.total)
    moved = ppo_losses(**inputs, clip_center=torch.full((6,), 3.0))
    assert moved.clip_fraction == 1.0 and not torch.allclose(moved.policy, default.policy)


def test_the_kl_loss_is_the_unclipped_surrogate_plus_beta_kl_and_zero_kl_at_the_behaviour_policy():
    inputs = _loss_inputs()
    behaviour = inputs["log_pi"].detach().masked_fill(~inputs["mask"], float("-inf"))
    at_behaviour = ppo_losses(**inputs, loss="kl", kl_coef=0.5, behavior_log_pi=behaviour)
    no_kl = ppo_losses(**inputs, loss="kl", kl_coef=0.0, behavior_log_pi=behaviour)
    assert torch.allclose(at_behaviour.policy, no_kl.policy)  # KL(pi || pi) = 0, even with padding
    other = torch.log_softmax(torch.randn(6, 4), -1).masked_fill(~inputs["mask"], float("-inf"))
    penalised = ppo_losses(**inputs, loss="kl", kl_coef=0.5, behavior_log_pi=other)
    assert penalised.policy > no_kl.policy
    penalised.total.backward()
    assert torch.isfinite(inputs["log_pi"].grad).all()
    with pytest.raises(ValueError, match="behavior_log_pi"):
        ppo_losses(**_loss_inputs(), loss="kl")


def test_ppo_her_options_are_validated():
    with pytest.raises(ValueError, match="her=True"):
        PPOConfig(her_aligned=True)
    with pytest.raises(ValueError, match="loss='clip'"):
        PPOConfig(her=True, her_centered=True, loss="kl")
