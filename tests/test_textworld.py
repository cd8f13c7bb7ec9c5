"""TextWorld through the protocol (`sacglam.envs.textworld`, docs/reference/textworld.md): the goal grammar,
games built offline and split into train and held-out, the environment against the protocol
checker, hindsight goals checked by replaying each one as the episode's goal, and checkpoints."""

import json
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sacglam.envs.protocol import InvalidActionError, check_environment
from sacglam.envs.textworld.goals import achieved_goals, goal_text, parse_goal, quest_shape

pytest.importorskip("textworld")

from sacglam.config import EnvConfig  # noqa: E402
from sacglam.envs.textworld import TextWorldEnv, challenge_games, game_files  # noqa: E402
from sacglam.envs.textworld.games import HELD_OUT_FIRST_SEED, fingerprint  # noqa: E402

# ---------------------------------------------------------------------- the goal grammar (no games)

NAMES = (
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz -", min_size=1, max_size=12)
    .map(str.strip)
    .filter(lambda n: n and "  " not in n and "and" not in n.split())
)
FACTS = st.one_of(
    NAMES.map(lambda n: ("in", (n, "I"))),
    NAMES.map(lambda n: ("at", ("P", n))),
    NAMES.map(lambda n: ("open", (n,))),
)


@settings(max_examples=200, deadline=None)
@given(st.frozensets(FACTS, min_size=1, max_size=4))
def test_a_goal_text_reads_back_as_its_facts(facts):
    assert parse_goal(goal_text(facts)) == facts


def test_goal_texts_of_the_grammar():
    assert goal_text([("in", ("coin", "I"))]) == "take the coin"
    quest = [("in", ("passkey", "I")), ("at", ("P", "cookery"))]
    assert goal_text(quest) == "go to the cookery and take the passkey"  # clause order is fixed
    assert goal_text([("on", ("key", "bench"))]) is None  # no clause: the quest keeps its objective text
    assert goal_text([("in", ("salt and pepper", "I"))]) is None  # would not read back
    with pytest.raises(ValueError, match="not a clause"):
        parse_goal("find the coin")


def test_achieved_goals_are_the_one_clause_goals_and_the_quests_shape():
    facts = frozenset(
        {("at", ("P", "attic")), ("in", ("key", "I")), ("in", ("map", "I")), ("north_of", ("attic", "hall"))}
    )
    shape = quest_shape(parse_goal("go to the hall and take the key"))
    assert shape == ("go", "take")
    assert achieved_goals(facts, [shape]) == (
        [
            "go to the attic",
            "take the key",
            "take the map",
            "go to the attic and take the key",
            "go to the attic and take the map",
        ],
        [],
    )
    assert achieved_goals(facts, [("take",)]) == (["go to the attic", "take the key", "take the map"], [])


def test_a_shape_with_too_many_goals_is_left_out_whole():
    """Listing only some of a shape's goals could report one later than the step it first held."""
    many = frozenset({("at", ("P", "attic"))} | {("in", (f"coin {i}", "I")) for i in range(300)})
    goals, too_many = achieved_goals(many, [("go", "take")])
    assert too_many == [("go", "take")] and not any(" and " in g for g in goals) and len(goals) == 301


# ---------------------------------------------------------------------- games

LEVELS = (4,)  # treasure hunter level 4: quests of two commands, 5 rooms (about 1 s to build a game)


@pytest.fixture(scope="module")
def games():
    return challenge_games("treasure_hunter", LEVELS, 3), challenge_games("treasure_hunter", LEVELS, 3, held_out=True)


def test_held_out_games_are_other_games_than_the_train_games(games):
    train, held_out = games
    assert len(train) == len(held_out) == 3
    assert not {fingerprint(g) for g in train} & {fingerprint(g) for g in held_out}
    assert challenge_games("treasure_hunter", LEVELS, 3) == train  # built once, found again


def test_a_held_out_seed_that_makes_a_train_game_is_skipped(games, monkeypatch):
    """Two seeds can generate the same game; the held-out set must then take the next seed."""
    from sacglam.envs.textworld import games as games_module

    build = games_module.build_game
    duplicate = {HELD_OUT_FIRST_SEED: 0}  # the first held-out seed gives train game 0
    monkeypatch.setattr(games_module, "build_game", lambda c, level, seed: build(c, level, duplicate.get(seed, seed)))
    games_module._challenge_games.cache_clear()  # lists made before the patch would hide it
    held_out = challenge_games("treasure_hunter", LEVELS, 2, held_out=True)
    games_module._challenge_games.cache_clear()  # nor may the patched list outlive the test
    assert held_out == tuple(build("treasure_hunter", LEVELS[0], HELD_OUT_FIRST_SEED + i) for i in (1, 2))


def test_a_config_builds_no_game_and_a_run_prepares_the_train_and_held_out_ones(games, monkeypatch):
    """Reading a config checks the family and levels only (a flag may replace its levels before
    the run); `prepare`, when a run starts, builds the train and held-out games."""
    from sacglam.envs.textworld import games as games_module

    build, built = games_module.build_game, []

    def refuse(*args):
        raise AssertionError(f"a game was built while a config was read: {args}")

    monkeypatch.setattr(games_module, "build_game", refuse)
    games_module._challenge_games.cache_clear()
    spec = EnvConfig(name="textworld", tw_challenge="treasure_hunter", tw_levels=LEVELS, tw_games=2).spec()
    with pytest.raises(ValueError, match="levels must be between 1 and 30"):
        EnvConfig(name="textworld", tw_challenge="treasure_hunter", tw_levels=(31,)).spec()
    monkeypatch.setattr(games_module, "build_game", lambda *args: built.append(args) or build(*args))
    spec.prepare()
    games_module._challenge_games.cache_clear()  # nor may the patched lists outlive the test
    seeds = {seed for _, _, seed in built}
    assert {0, 1} <= seeds and {HELD_OUT_FIRST_SEED, HELD_OUT_FIRST_SEED + 1} <= seeds, built


def test_bad_game_settings_get_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown TextWorld challenge 'cooking'"):
        challenge_games("cooking", (1,), 1)
    with pytest.raises(ValueError, match="levels must be between 1 and 30"):
        challenge_games("treasure_hunter", (31,), 1)
    with pytest.raises(ValueError, match="does not exist"):
        game_files(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="no TextWorld game"):
        game_files(str(tmp_path))
    with pytest.raises(ValueError, match="no held-out twin"):
        EnvConfig(name="textworld", tw_game_path=str(tmp_path), goals="test")
    (tmp_path / "story.z5").write_bytes(b"")
    with pytest.raises(ValueError, match="no TextWorld game"):
        game_files(str(tmp_path))  # Z-machine games other than tw-make's .z8 are not TextWorld games
    (tmp_path / "lone.z8").write_bytes(b"")
    with pytest.raises(ValueError, match="has no lone.json beside it"):
        TextWorldEnv([tmp_path / "lone.z8"]).reset(seed=0)


def test_a_folder_of_games_is_read_recursively(games, tmp_path):
    train, _ = games
    for i, game in enumerate(train):
        folder = tmp_path / f"game{i}"
        folder.mkdir()
        (folder / "game.z8").write_bytes(game.read_bytes())
        (folder / "game.json").write_bytes(game.with_suffix(".json").read_bytes())  # the facts TextWorld reads
    found = game_files(str(tmp_path))
    assert [p.parent.name for p in found] == ["game0", "game1", "game2"]
    env = TextWorldEnv(found, max_steps=10)
    assert check_environment(env, episodes=3)["hindsight"]


# ---------------------------------------------------------------------- the environment


def test_textworld_follows_the_protocol_with_hindsight_and_goal_resets(games):
    env = TextWorldEnv(games[0], max_steps=10)
    assert check_environment(env, episodes=8) == {
        "goal": True,
        "hindsight": True,
        "goal_type": False,
        "goal_reset": True,
    }


def test_coin_collector_games_follow_the_protocol_too():
    env = TextWorldEnv(challenge_games("coin_collector", (2,), 1), max_steps=10)
    assert check_environment(env, episodes=4)["hindsight"]
    _, info = env.reset(seed=0)
    assert info["goal"] == "take the coin"


def test_the_walkthrough_wins_the_game_and_the_episode_together(games):
    env = TextWorldEnv(games[0] + games[1], max_steps=10)
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        assert obs.startswith(f"Goal: {info['goal']}\n") and " and take the " in info["goal"]
        for _ in range(10):
            obs, reward, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                break
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert env._state["won"]  # TextWorld agrees: its quest is won on the same step
        assert info["goal"] in info["achieved_goals"]


def test_every_hindsight_goal_is_a_success_when_replayed_as_the_episodes_goal(games):
    """The protocol's promise for relabeling: a goal reported at step t is one whose episode would
    have ended with success at step t. Replay each random episode's commands in a fresh episode of
    the same game (an environment of that one game) whose goal is the reported one."""
    env, rng, checked = TextWorldEnv(games[0], max_steps=10), random.Random(0), 0
    for seed in range(12):
        _, info = env.reset(seed=seed)
        game, commands, reports = env.games[env._index], [], []
        for t in range(1, 11):
            commands.append(rng.choice(info["candidates"]))
            _, _, terminated, truncated, info = env.step(commands[-1])
            reports += [(goal, t) for goal in info["achieved_goals"]]
            if terminated or truncated:
                break
        replay = TextWorldEnv([game], max_steps=10)
        for goal, t in reports:
            replay.reset(seed=seed, options={"goal": goal})
            outcomes = []
            for command in commands[:t]:
                _, reward, terminated, _, _ = replay.step(command)
                outcomes.append((reward, terminated))
                if terminated:
                    break
            assert outcomes == [(0.0, False)] * (t - 1) + [(1.0, True)], (goal, t, commands)
            checked += 1
        replay.close()
    assert checked >= 20  # rooms entered, objects taken and quest-shaped goals


def test_a_goal_at_reset_picks_a_game_that_has_its_entities(games):
    env = TextWorldEnv(games[0], max_steps=10)
    quests = [env.game(i).quest_text for i in range(len(env.games))]
    for quest in quests:
        _, info = env.reset(seed=0, options={"goal": quest})
        assert info["goal"] == quest
    with pytest.raises(ValueError, match="no game of this TextWorldEnv has goal 'take the unicorn'"):
        env.reset(options={"goal": "take the unicorn"})


def test_an_action_not_offered_is_refused(games):
    env = TextWorldEnv(games[0], max_steps=10)
    _, info = env.reset(seed=0)
    assert "dance" not in info["candidates"]
    with pytest.raises(InvalidActionError, match="'dance' is not one of this step's candidates"):
        env.step("dance")


def test_a_pickled_environment_continues_its_episode_exactly(games):
    """Checkpoints pickle rollout workers' environments mid-episode."""
    env, rng = TextWorldEnv(games[0], max_steps=10), random.Random(3)
    _, info = env.reset(seed=5)
    for _ in range(2):
        _, _, _, _, info = env.step(rng.choice(info["candidates"]))
    copy = pickle.loads(pickle.dumps(env))
    for _ in range(3):
        command = rng.choice(info["candidates"])
        a, b = env.step(command), copy.step(command)
        assert a == b
        info = a[4]
        if a[2] or a[3]:
            break


@pytest.mark.slow
def test_textworld_trains_through_sacglam_train_with_hindsight(tmp_path):
    """The shipped config, on two games of one level: collection, relabeling from the goal
    grammar, updates, evaluation on the train and held-out games, the final checkpoint (which
    pickles the environments)."""
    from sacglam.cli import main

    main(["train", "--config", "tune_configs/runs/textworld_sac_her.yaml", "--env.tw-levels", "4",
          "--env.tw-games", "2", "--total-env-steps", "256", "--num-envs", "8", "--eval-every", "256",
          "--eval-episodes", "8", "--eval-modes", "greedy", "--sac.batch-size", "16",
          "--sac.critic-warmup-updates", "4", "--warm-start-steps", "0", "--output-dir", str(tmp_path / "run"), "--no-progress"])  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = {k: v for r in records for k, v in r.items()}
    assert last["env_steps"] >= 256 and last["learner/updates"] > 0
    # rooms entered and objects taken relabel episodes (0.11 here, without the warm start's
    # near-uniform exploration; 0.0 would mean no hindsight goals reached the replay buffer)
    assert last["buffer/relabeled_fraction"] > 0.05
    assert 0.0 <= last["eval/test/greedy/all"] <= 1.0
    assert (tmp_path / "run" / "checkpoints" / "latest").exists()
