"""PPO's rollouts and PPO with HER (paper appendix G): GAE per segment, sub-goals, relabeled
segments, the KL and centred-clip losses."""

import numpy as np
import pytest
import torch

from sacglam.config import AgentConfig, EnvConfig, PPOConfig
from sacglam.envs.goals import SIMPLE_TRAIN_GOALS, is_subgoal, parse_goal
from sacglam.envs.observation import with_goal
from sacglam.learner.ppo_losses import ppo_losses
from sacglam.learner.ppo_rollout import choose_relabels, rollout_from_segments
from sacglam.models.agent import GLAMAgent
from sacglam.rollout_workers.worker import RolloutWorker
from sacglam.types import Episode, Relabel


@pytest.mark.parametrize(
    "candidate, goal, expected",
    [
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
    ],
)
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


def _segment(goal, reported, cut, state="You see: red lion\nAction:"):
    """A segment of len(reported) steps (Grasp each time) with the partner's reports per step."""
    T = len(reported)
    return Episode(
        goal=goal,
        scene=("red lion",),
        states=(state,) * (T + 1),
        candidates=(("Grasp", "Release"),) * (T + 1),
        actions=(0,) * T,
        rewards=(0.0,) * T,
        terminated=False,
        truncated=not cut,
        cut=cut,
        achieved_goals=tuple(tuple(r) for r in reported),
    )


def _agent():
    torch.manual_seed(0)
    return GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic="value", critic_width=16)).eval()


def test_a_reported_goal_relabels_its_segment_up_to_the_report_and_never_crosses_a_segment_end():
    first = _segment("Grasp red lion", [["Grasp any animal"], []], cut=False)  # an episode that ended
    second = _segment("Grasp red lion", [[], ["Grasp blue tree"]], cut=True)  # the rollout's end cut it
    rollout, added = rollout_from_segments(
        _agent(), [first, second], PPOConfig(her=True, her_ratio=10.0), np.random.default_rng(0)
    )
    assert added == 1 + 2  # step 0 of the first segment, steps 0..1 of the second
    relabeled = rollout.observations[4:]
    assert ["Grasp any animal" in o for o in relabeled] == [True, False, False]
    assert all("Grasp blue tree" in o for o in relabeled[1:])
    aligned, added = rollout_from_segments(
        _agent(), [first, second], PPOConfig(her=True, her_aligned=True, her_ratio=10.0), np.random.default_rng(0)
    )
    assert added == 1 and "Grasp any animal" in aligned.observations[-1]  # "Grasp blue tree" is not a sub-goal
    own = rollout_from_segments(
        _agent(),
        [_segment("Grasp red lion", [["Grasp red lion"]], cut=False)],
        PPOConfig(her=True),
        np.random.default_rng(0),
    )
    assert own[1] == 0  # the segment's own goal is not a relabel


def test_the_budget_keeps_whole_relabels():
    offers = [(0, Relabel("Grasp any animal", 2)), (1, Relabel("Grasp blue tree", 4))]
    kept = {tuple(choose_relabels(offers, budget=3, rng=np.random.default_rng(seed))) for seed in range(20)}
    assert kept == {((0, Relabel("Grasp any animal", 2)),)}
    assert choose_relabels(offers, budget=6, rng=np.random.default_rng(0)) == offers


def test_relabeled_transitions_pay_one_at_the_report_and_keep_the_behaviour_probabilities():
    other = "Grasp any animal"
    segment = _segment("Grasp red lion", [[], [other]], cut=True)
    rollout, added = rollout_from_segments(
        _agent(), [segment], PPOConfig(her=True, her_centered=True, her_ratio=10.0), np.random.default_rng(0)
    )
    assert added == 2 and all(o.startswith(f"Goal: {other}") for o in rollout.observations[2:])
    assert torch.allclose(rollout.returns[-1], torch.tensor(1.0))  # terminal at the report, reward 1
    assert torch.equal(rollout.old_log_prob[2:], rollout.old_log_prob[:2])  # the behaviour's, for the original goal
    assert torch.equal(rollout.behavior_log_pi[2:], rollout.behavior_log_pi[:2])
    assert not torch.allclose(rollout.clip_center[2:], torch.ones(2)) and torch.equal(
        rollout.clip_center[:2], torch.ones(2)
    )


def test_segment_advantages_equal_a_naive_gae_with_the_agents_own_values():
    """Terminated segments bootstrap from 0, truncated and cut ones from V(s_T); the chain of
    advantages never crosses a segment end."""
    worker = RolloutWorker(EnvConfig.variant("simple"), 3, seed=3)  # a seed whose rollout has all three kinds of end
    segments = worker.collect(11, None, cut=True).episodes
    assert all(any(getattr(s, end) for s in segments) for end in ("terminated", "truncated", "cut"))
    agent, gamma, lam = _agent(), 0.9, 0.95
    rollout, _ = rollout_from_segments(
        agent, segments, PPOConfig(gamma=gamma, gae_lambda=lam), np.random.default_rng(0)
    )
    expected = []
    for s in segments:
        prompts = [with_goal(state, s.goal) for state in s.states]
        with torch.no_grad():
            values = [float(agent(agent.encode([p], [list(c)])).value) for p, c in zip(prompts, s.candidates)]
        advantage, out = 0.0, []
        for t in reversed(range(s.length)):
            last = t == s.length - 1
            next_value = 0.0 if (last and s.terminated) else values[t + 1]
            delta = s.rewards[t] + gamma * next_value - values[t]
            advantage = delta + (0.0 if last else gamma * lam * advantage)
            out.append(advantage)
        expected += out[::-1]
    torch.testing.assert_close(rollout.advantages, torch.tensor(expected), atol=1e-5, rtol=0)
    assert len(rollout.actions) == sum(s.length for s in segments) == 33


def _loss_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.log_softmax(torch.randn(6, 4, generator=g), -1).requires_grad_(True)
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[0, 3] = False
    actions = torch.tensor([0, 1, 2, 3, 0, 1])
    return dict(
        log_pi=log_pi,
        mask=mask,
        actions=actions,
        old_log_prob=log_pi.detach().gather(1, actions[:, None]).squeeze(1) - 0.1,
        advantages=torch.randn(6, generator=g),
        returns=torch.randn(6, generator=g),
        values=torch.randn(6, generator=g),
        clip=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
    )


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
