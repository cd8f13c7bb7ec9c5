"""The replay buffer and HER: n-step targets, relabel semantics checked against the environment,
sampling modes, capacity, and save/load."""

import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from sacglam.envs import PlaygroundText, PlaygroundTextVector, goal_type
from sacglam.envs.goals import GOAL_TYPES, TRAIN_GOALS
from sacglam.envs.observation import split_goal
from sacglam.her import hindsight_relabels
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder
from sacglam.types import Episode

GAMMA = 0.9


def handmade(rewards, terminated, goal="Grasp red cat", achieved=None):
    T = len(rewards)
    return Episode(
        goal=goal,
        scene=("red cat", "blue dog", "green door", "red water", "blue sofa", "red tree"),
        states=tuple(f"state {t}" for t in range(T + 1)),
        candidates=tuple(("Grasp", "Release") for _ in range(T + 1)),
        actions=tuple(t % 2 for t in range(T)),
        rewards=tuple(rewards),
        terminated=terminated,
        truncated=not terminated,
        achieved_goals=tuple(achieved or [()] * T),
    )


def transitions_by_step(buffer, n_step, draws=400):
    """Sample until every step of a one-episode buffer was seen; key by the step of s_t."""
    batch = buffer.sample(draws, n_step=n_step)
    seen = {}
    for i, obs in enumerate(batch.observations):
        t = int(split_goal(obs)[1].split()[-1])
        seen[t] = (
            batch.reward[i].item(),
            batch.discount[i].item(),
            batch.terminal[i].item(),
            int(split_goal(batch.next_observations[i])[1].split()[-1]),
            batch.actions[i].item(),
        )
    return seen


def test_n_step_targets_cut_at_termination():
    buffer = ReplayBuffer(gamma=GAMMA, her=False)
    buffer.add(handmade([0.0, 0.0, 1.0], terminated=True))
    seen = transitions_by_step(buffer, n_step=3)
    assert seen[0] == pytest.approx((GAMMA**2, GAMMA**3, True, 3, 0))
    assert seen[1] == pytest.approx((GAMMA, GAMMA**2, True, 3, 1))
    assert seen[2] == pytest.approx((1.0, GAMMA, True, 3, 0))


def test_n_step_targets_bootstrap_at_truncation():
    buffer = ReplayBuffer(gamma=GAMMA, her=False)
    buffer.add(handmade([0.0] * 5, terminated=False))
    seen = transitions_by_step(buffer, n_step=3)
    assert seen[0] == pytest.approx((0.0, GAMMA**3, False, 3, 0))
    assert seen[3] == pytest.approx((0.0, GAMMA**2, False, 5, 1))  # stops at the final state s_5
    assert seen[4] == pytest.approx((0.0, GAMMA, False, 5, 0))
    one_step = transitions_by_step(buffer, n_step=1)
    assert all(one_step[t][3] == t + 1 and one_step[t][1] == pytest.approx(GAMMA) for t in range(5))


def test_relabeled_transitions_end_with_reward_and_termination_at_the_reported_step():
    episode = handmade([0.0] * 4, terminated=False, achieved=[(), ("Grasp any cat",), (), ()])
    buffer = ReplayBuffer(gamma=GAMMA)
    assert buffer.add(episode)[0].length == 2
    batch = buffer.sample(300, n_step=3, mode="ratio")
    relabeled = {
        split_goal(o)[1]: (r.item(), d.item(), term.item())
        for o, r, d, term, rel in zip(batch.observations, batch.reward, batch.discount, batch.terminal, batch.relabeled)
        if rel
    }
    assert set(relabeled) == {"state 0", "state 1"}
    assert relabeled["state 0"] == pytest.approx((GAMMA, GAMMA**2, True))
    assert relabeled["state 1"] == pytest.approx((1.0, GAMMA, True))
    assert all(g == "Grasp any cat" for g, rel in zip(batch.goals, batch.relabeled) if rel)


def recorded_episodes(n_envs=8, steps=300, seed=0, **env):
    vec = PlaygroundTextVector(n_envs, **env)
    obs, info = vec.reset(seed=seed)
    recorder, rng, episodes = EpisodeRecorder(n_envs), random.Random(seed), []
    recorder.start(obs, info)
    for _ in range(steps):
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, rewards, terminated, truncated, info = vec.step(actions)
        episodes += recorder.record(actions, obs, rewards, terminated, truncated, info)
    return episodes


def test_recorded_episodes_replay_to_the_same_states_in_the_environment():
    env = PlaygroundText()
    for episode in recorded_episodes(steps=60)[:10]:
        obs, info = env.reset(options={"goal": episode.goal, "scene": list(episode.scene)})
        assert split_goal(obs)[1] == episode.states[0]
        for t, a in enumerate(episode.actions):
            obs, reward, terminated, truncated, info = env.step(episode.candidates[t][a])
            assert split_goal(obs)[1] == episode.states[t + 1] and reward == episode.rewards[t]
            assert info["achieved_goals"] == list(episode.achieved_goals[t])
        assert (terminated, truncated) == (episode.terminated, episode.truncated)


def test_relabeled_reward_matches_environment():
    env = PlaygroundText()
    checked = 0
    for episode in recorded_episodes(steps=120):
        for relabel in hindsight_relabels(episode):
            env.reset(options={"goal": relabel.goal, "scene": list(episode.scene)})
            for t in range(relabel.length):
                _, reward, terminated, _, _ = env.step(episode.candidates[t][episode.actions[t]])
                assert (reward == 1.0) == terminated == (t == relabel.length - 1)
            checked += 1
    assert checked > 100


def test_her_skips_the_episodes_own_goal_and_caps_with_a_seeded_choice():
    episode = handmade(
        [0.0, 1.0], terminated=True, achieved=[("Grasp any cat", "Grasp any red thing"), ("Grasp red cat",)]
    )
    assert [r.goal for r in hindsight_relabels(episode)] == ["Grasp any cat", "Grasp any red thing"]
    capped = hindsight_relabels(episode, max_goals=1, rng=np.random.default_rng(0))
    assert len(capped) == 1 and capped == hindsight_relabels(episode, max_goals=1, rng=np.random.default_rng(0))
    kept = hindsight_relabels(episode, goal_filter=lambda goal, relabel: "red" in relabel)
    assert [r.goal for r in kept] == ["Grasp any red thing"]


def test_a_goal_reported_twice_relabels_only_up_to_its_first_report():
    """A later report of the same goal would pay reward 1 at a step after it was already achieved
    (and store the goal's transitions twice); environments outside the protocol guard can send it."""
    achieved = [(), ("Grasp any cat",), ("Grasp any red thing",), ("Grasp any cat",), ("Grasp red cat",)]
    episode = handmade([0.0, 0.0, 0.0, 0.0, 0.0], terminated=False, achieved=achieved)
    relabels = [(r.goal, r.length) for r in hindsight_relabels(episode)]
    assert relabels == [("Grasp any cat", 2), ("Grasp any red thing", 3)]


def test_ratio_mode_batches_are_half_relabeled():
    buffer = ReplayBuffer(capacity=50_000, seed=1)
    for episode in recorded_episodes(steps=150):
        buffer.add(episode)
    assert buffer.relabeled_transitions > 3 * buffer.env_transitions  # HER floods the buffer
    for _ in range(5):
        batch = buffer.sample(128, mode="ratio")
        assert int(batch.relabeled.sum()) == 64
    assert 0.7 < buffer.sample(2000, mode="uniform").relabeled.float().mean() < 1.0
    # a batch whose share is not whole (a learner's part of it): each batch rounds up or down,
    # and on average the fraction asked for holds (rounding to nearest gave 0 of 1, 2 of 3)
    for size, fraction in ((1, 0.5), (3, 0.5), (7, 0.3)):
        counts = [
            int(buffer.sample(size, mode="ratio", relabeled_fraction=fraction).relabeled.sum()) for _ in range(2000)
        ]
        low = int(size * fraction)
        assert set(counts) == {low, low + 1}
        assert abs(sum(counts) / 2000 - size * fraction) < 0.05  # sd of the mean about 0.011
    # a whole share, even one float arithmetic misses (90 * 0.7 = 62.99999999999999), draws nothing
    state = buffer.rng.bit_generator.state
    assert buffer._relabeled_count(90 * 0.7) == 63 and buffer.rng.bit_generator.state == state


def test_ratio_mode_without_relabels_uses_environment_transitions():
    buffer = ReplayBuffer(her=False)
    buffer.add(handmade([0.0, 0.0], terminated=False))
    assert not buffer.sample(16, mode="ratio").relabeled.any()


def test_prior_mode_follows_the_goal_type_distribution():
    buffer = ReplayBuffer(capacity=200_000, seed=2)
    for episode in recorded_episodes(n_envs=16, steps=400):
        buffer.add(episode)
    batch = buffer.sample(4000, mode="prior")
    observed = Counter(goal_type(g) for g in batch.goals)
    expected = Counter(goal_type(g) for g in TRAIN_GOALS)
    for t in GOAL_TYPES:
        assert abs(observed[t] / 4000 - expected[t] / len(TRAIN_GOALS)) < 0.03, t
    # the goal set's type shares are read once, not at every draw (a spec may count its whole set)
    buffer.env = SimpleNamespace(type_shares=lambda: pytest.fail("type shares read again"))
    assert len(buffer.sample(64, mode="prior").goals) == 64


def test_capacity_evicts_the_oldest_episodes_first():
    buffer = ReplayBuffer(capacity=10, her=False)
    for i in range(6):
        buffer.add(handmade([0.0] * 3, terminated=False, goal=["Grasp red cat", "Grasp blue dog"][i % 2]))
    assert len(buffer) == 9 and buffer.episodes == 3 and buffer.added_episodes == 6
    assert {b for b in buffer.sample(100).goals} == {"Grasp red cat", "Grasp blue dog"}
    buffer.add(handmade([0.0] * 3, terminated=False, goal="Grasp green door"))
    assert buffer.episodes == 3 and "Grasp green door" in set(buffer.sample(200).goals)


def test_save_then_load_gives_identical_samples(tmp_path):
    buffer = ReplayBuffer(capacity=20_000, her_max_goals=16, seed=3)
    for episode in recorded_episodes(steps=100):
        buffer.add(episode)
    buffer.sample(32)
    buffer.save(tmp_path / "replay")
    loaded = ReplayBuffer.load(tmp_path / "replay")
    assert (len(loaded), loaded.episodes, loaded.added_relabels) == (
        len(buffer),
        buffer.episodes,
        buffer.added_relabels,
    )
    for mode in ("uniform", "ratio", "prior"):
        a, b = buffer.sample(64, mode=mode), loaded.sample(64, mode=mode)
        assert a.observations == b.observations and a.next_candidates == b.next_candidates and a.goals == b.goals
        assert all(
            (getattr(a, f) == getattr(b, f)).all() for f in ("actions", "reward", "discount", "terminal", "relabeled")
        )
    buffer.save(tmp_path / "replay")  # overwriting a snapshot works too
    assert len(ReplayBuffer.load(tmp_path / "replay")) == len(buffer)


def test_sampling_an_empty_buffer_or_a_bad_mode_fails_clearly():
    buffer = ReplayBuffer()
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    buffer.add(handmade([0.0], terminated=False))
    with pytest.raises(ValueError, match="unknown sampling mode"):
        buffer.sample(4, mode="balanced")


def test_inconsistent_episodes_are_rejected():
    with pytest.raises(ValueError, match="inconsistent episode"):
        Episode(
            goal="Grasp red cat",
            scene=(),
            states=("a",),
            candidates=(("Grasp",),),
            actions=(0,),
            rewards=(0.0,),
            terminated=False,
            truncated=True,
            achieved_goals=((),),
        )


def test_capacity_counts_environment_transitions_and_relabels_go_with_their_episode():
    buffer = ReplayBuffer(capacity=6)
    for goal in ("Grasp red cat", "Grasp blue dog", "Grasp green door"):
        buffer.add(handmade([0.0] * 3, terminated=False, goal=goal, achieved=[("Grasp any cat",), (), ()]))
    assert buffer.env_transitions == 6 and buffer.episodes == 2
    assert buffer.relabeled_transitions == 2 and len(buffer) == 8
    assert "Grasp red cat" not in set(buffer.sample(200).goals)


def test_a_resumed_replay_actor_follows_the_runs_settings_not_the_saved_ones(tmp_path):
    """A resume that changes gamma, the capacity or the relabel cap: the restored buffer's targets
    are discounted as the learner is told (the same samples as a buffer built with the new gamma),
    and a smaller capacity holds from the first sample on."""
    from sacglam.config import EnvConfig, SACConfig
    from sacglam.replay_actor.service import SNAPSHOT, ReplayService
    from sacglam.runtime.checkpoint import CheckpointStore

    episodes = recorded_episodes(steps=100)
    saved = ReplayService(SACConfig(gamma=0.99, buffer_capacity=20_000), EnvConfig(), seed=3)
    for episode in episodes:
        saved.add_episodes([episode])
    store = CheckpointStore(tmp_path / "checkpoints")
    tmp = store.begin(800)
    saved.save(tmp)
    store.commit(tmp, 800)

    resumed = ReplayService(SACConfig(gamma=0.5, buffer_capacity=20_000), EnvConfig(), seed=3, checkpoints=store.root)
    built_so = ReplayService(SACConfig(gamma=0.5, buffer_capacity=20_000), EnvConfig(), seed=3)
    for episode in episodes:
        built_so.add_episodes([episode])
    a, b = resumed.sample(128), built_so.sample(128)
    assert a.observations == b.observations and a.goals == b.goals
    assert (a.discount == b.discount).all() and (a.reward == b.reward).all()
    assert set(np.unique(a.discount.numpy()).round(6)) <= {0.5, 0.25, 0.125}  # 0.5**k, k <= n_step

    small = ReplayService(SACConfig(buffer_capacity=200, batch_size=64), EnvConfig(), seed=3, checkpoints=store.root)
    assert 0 < small.buffer.env_transitions <= 200 < saved.buffer.env_transitions
    capped = ReplayService(SACConfig.with_her(her_max_goals=1), EnvConfig(), seed=3, checkpoints=store.root)
    plain = ReplayService(SACConfig(her=False, sampling="uniform"), EnvConfig(), seed=3, checkpoints=store.root)
    reporting = next(e for e in episodes if len(ReplayBuffer().add(e)) >= 2)  # two relabels without a cap
    assert capped.add_episodes([reporting]) == 1 and plain.add_episodes([reporting]) == 0
    assert SNAPSHOT in {path.name for path in store.latest().children()}


# ------------------------------------------------------------------ relabel mix and goal types


def flooded_buffer(seed=0, episodes=40):
    """A buffer whose partner reports 9 Grasp goals for every Grow goal, while the episodes' own
    goals are 3 Grasp for 1 Grow: the shape of the simplified task's random play."""
    buffer = ReplayBuffer(gamma=GAMMA, her=True, seed=seed)
    for i in range(episodes):
        own = "Grow red cat" if i % 4 == 0 else "Grasp red cat"
        reports = [("Grasp any animal",), ("Grasp blue dog",), ("Grasp any blue thing",)]
        reports += [("Grasp green door",), ("Grasp any furniture",), ("Grasp red water",)]
        reports += [("Grasp any supply",), ("Grasp any red thing",), ("Grasp blue sofa",)]
        reports += [("Grow blue dog",)]
        buffer.add(handmade([0.0] * 10, terminated=False, goal=own, achieved=reports))
    return buffer


def relabeled_types(batch):
    return Counter(t for t, r in zip(batch.goal_types, batch.relabeled.tolist()) if r)


def test_batch_goal_types_are_the_goals_types():
    batch = flooded_buffer().sample(256, mode="ratio")
    assert len(batch.goal_types) == 256
    assert batch.goal_types == [goal_type(g) for g in batch.goals]


def test_partner_mix_draws_relabels_as_reported():
    buffer = flooded_buffer()
    shares = buffer.relabeled_type_shares()
    # each episode: nine Grasp relabels of lengths 1..9 (45 transitions), one Grow of length 10
    assert shares["grasp"] == pytest.approx(45 / 55)
    assert shares["grow"] == pytest.approx(10 / 55)
    counts = relabeled_types(buffer.sample(20_000, mode="ratio"))
    assert counts["grasp"] / sum(counts.values()) == pytest.approx(45 / 55, abs=0.01)


def test_balanced_mix_draws_goal_types_equally():
    counts = relabeled_types(flooded_buffer().sample(20_000, mode="ratio", relabel_mix="balanced"))
    assert counts["grow"] / sum(counts.values()) == pytest.approx(0.5, abs=0.01)


def test_own_mix_follows_the_goals_the_episodes_were_given():
    counts = relabeled_types(flooded_buffer().sample(20_000, mode="ratio", relabel_mix="own"))
    assert counts["grow"] / sum(counts.values()) == pytest.approx(0.25, abs=0.01)


def test_relabel_mix_leaves_the_environment_share_alone():
    batch = flooded_buffer().sample(1_000, mode="ratio", relabeled_fraction=0.3, relabel_mix="balanced")
    assert batch.relabeled.float().mean().item() == pytest.approx(0.3)
    own_goals = Counter(g for g, r in zip(batch.goals, batch.relabeled.tolist()) if not r)
    assert set(own_goals) == {"Grasp red cat", "Grow red cat"}


def test_partner_mix_draws_what_the_buffer_drew_before_relabel_mixes_existed():
    """Recorded from the code before the per-type pools and relabel mixes (commit a05a821): the
    paper's mode, the default, draws the same transitions from the same generator state."""
    batch = flooded_buffer(seed=3).sample(12, mode="ratio")
    assert (
        batch.goals
        == ["Grasp any supply"] * 2
        + ["Grasp green door", "Grasp any supply", "Grasp any furniture"]
        + ["Grasp blue dog"]
        + ["Grasp red cat"] * 6
    )
    assert [int(o.rsplit(" ", 1)[1]) for o in batch.observations] == [4, 2, 3, 4, 4, 1, 7, 2, 5, 7, 2, 3]
    assert batch.actions.tolist() == [0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1]
    assert batch.reward.tolist() == pytest.approx([0.81, 0.0, 1.0, 0.81, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_own_mix_without_reports_of_the_own_types_falls_back_to_the_reports():
    buffer = ReplayBuffer(gamma=GAMMA, her=True)
    buffer.add(handmade([0.0, 0.0], terminated=False, goal="Grow red cat", achieved=[("Grasp blue dog",), ()]))
    batch = buffer.sample(10, mode="ratio", relabel_mix="own")  # no Grow relabel: Grasp ones, not an error
    assert relabeled_types(batch) == Counter({"grasp": 5})


def test_relabel_mix_needs_ratio_sampling():
    from sacglam.config import SACConfig

    with pytest.raises(ValueError, match="relabel_mix='own' re-weights the relabeled share"):
        SACConfig(her=True, sampling="prior", relabel_mix="own")
