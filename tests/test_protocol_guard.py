"""`ProtocolGuard` (`sacglam/envs/guard.py`): an environment written elsewhere is checked at every
reset and step a run makes, and each breach of the protocol is one line naming the environment,
the step and the rule; what the protocol allows passes unchanged (rewards as float, flags as bool).
The environments are in `tests/broken_envs.py`, each breaking one rule."""

import warnings

import numpy as np
import pytest

from sacglam.cli import main
from sacglam.envs import guard
from sacglam.envs.protocol import EnvironmentProtocolError, check_environment
from sacglam.envs.spec import EnvironmentNameError, GymnasiumSpec
from tests import broken_envs


def guarded(name: str):
    return GymnasiumSpec(f"tests.broken_envs:{name}").make()


def play(env, actions: list[str], goal: str = "Reach three"):
    env.reset(seed=0, options={"goal": goal})
    return [env.step(action) for action in actions]


BREACHES = {
    "StringFlags": (
        ["Turn the dial to one"],
        "terminated and truncated must be bools, got 'False', 'False' (str, str)",
    ),
    "OldStepAPI": (
        ["Turn the dial to one"],
        "episode 0, step 1: step() returned 4 values, gym's old (obs, reward, done, info)",
    ),
    "NoCandidatesAfterStep": (["Wait"], "episode 0, step 1: info has no 'candidates'"),
    "TupleGoal": (
        ["Wait"],
        "episode 0, step 1: info['goal'] must be the episode's goal text (a str) in every info of an environment "
        "whose reset info has a 'goal'; got ('Reach', 'three') (a tuple)",
    ),
    "RefusesOwnCandidate": (
        ["Turn the dial to one", "Wait"],
        "episode 0, step 2: step('Wait') raised RuntimeError: the dial has no wait (at broken_envs.py:",
    ),
    "PaddedReport": (
        ["Turn the dial to one"],
        "episode 0, step 1: goal 'Reach one ' (in info['goal'] or info['achieved_goals']) has whitespace around it",
    ),
    "FalseOwnGoal": (
        ["Turn the dial to one", "Turn the dial to three"],
        "episode 0, step 2: the episode's own goal 'Reach three' was reported achieved but the step was not a success",
    ),
}


@pytest.mark.parametrize("name", list(BREACHES))
def test_a_breach_of_the_protocol_during_play_is_one_line_naming_the_step_and_the_rule(name):
    actions, expected = BREACHES[name]
    env = guarded(name)
    with pytest.raises(EnvironmentProtocolError) as breach:
        play(env, actions)
    message = breach.value.one_line()
    assert expected in message and message.startswith(name), message
    # the checker an author runs finds the same breach (the run and the checker agree)
    if name != "FalseOwnGoal":  # random play needs luck to reach it
        with pytest.raises(EnvironmentProtocolError):
            check_environment(getattr(broken_envs, name)())


@pytest.mark.parametrize("name", ["NumpyValues", "IntFlags"])
def test_what_the_protocol_allows_passes_unchanged_with_python_types(name):
    raw, env = getattr(broken_envs, name)(), guarded(name)
    assert check_environment(raw)["hindsight"]  # numpy scalars and 0/1 flags are allowed by the checker too
    steps = play(env, ["Turn the dial to one", "Turn the dial to three"])
    expected = play(broken_envs.Dial(), ["Turn the dial to one", "Turn the dial to three"])
    for (obs, reward, terminated, truncated, info), want in zip(steps, expected):
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        assert (obs, reward, terminated, truncated, info) == want
    assert steps[-1][1:3] == (1.0, True)


def test_an_action_never_offered_is_refused_as_the_environment_refuses_it():
    env = guarded("Dial")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="is not one of") as refused:
        env.step("Turn the dial to zero")
    assert not isinstance(refused.value, EnvironmentProtocolError)  # the caller's mistake, not the environment's


def test_a_goal_reported_again_is_kept_once_with_one_warning_per_process(monkeypatch):
    monkeypatch.setattr(guard, "_WARNED_OF_REPEATS", set())
    env = guarded("RepeatsGoal")
    actions = ["Turn the dial to one", "Turn the dial to two", "Turn the dial to one", "Turn the dial to two"]
    with pytest.warns(UserWarning, match="goal 'Reach one' was reported achieved again in the same episode"):
        steps = play(env, actions)
    assert [info["achieved_goals"] for *_, info in steps] == [["Reach one"], ["Reach two"], [], []]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second environment of the class: no second warning
        play(guarded("RepeatsGoal"), actions)


def test_a_reward_other_than_0_or_1_from_an_environment_that_reports_goals_is_warned_of_once(monkeypatch):
    """Relabeled transitions are rewarded 1 at the goal's report and 0 elsewhere: an environment
    paying 5 on success would teach the critic two scales."""
    monkeypatch.setattr(guard, "_WARNED_OF_REWARDS", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0 and 1 only: no warning
        play(guarded("Dial"), ["Turn the dial to one", "Turn the dial to three"])
    with pytest.warns(UserWarning, match="PaysFive, episode 0, step 2: reward 5, where an environment that reports"):
        steps = play(guarded("PaysFive"), ["Turn the dial to one", "Turn the dial to three"])
    assert steps[-1][1] == 5.0  # warned of, not changed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        play(guarded("PaysFive"), ["Turn the dial to three"])


def test_the_vector_a_run_steps_refuses_string_flags_rather_than_ending_every_episode():
    vector = GymnasiumSpec("tests.broken_envs:StringFlags").make_vector(2)
    vector.reset(seed=0)
    with pytest.raises(EnvironmentProtocolError, match="must be bools"):
        vector.step(["Wait", "Wait"])
    numpy_vector = GymnasiumSpec("tests.broken_envs:NumpyValues").make_vector(2)
    numpy_vector.reset(seed=0)
    _, rewards, terminated, truncated, _ = numpy_vector.step(["Wait", "Wait"])
    assert not terminated.any() and not truncated.any() and rewards.dtype == np.float32


def test_a_factory_function_is_an_entry_and_what_is_no_environment_is_named():
    assert type(GymnasiumSpec("tests.broken_envs:make_dial", {"max_steps": 2}).make().unwrapped).__name__ == "Dial"
    with pytest.raises(EnvironmentNameError, match="NotAnEnv is a class but not a gymnasium.Env subclass"):
        GymnasiumSpec("tests.broken_envs:NotAnEnv")
    with pytest.raises(EnvironmentNameError, match="returned a NoneType, not a gymnasium.Env"):
        GymnasiumSpec("tests.broken_envs:make_nothing")


def test_the_guard_is_invisible_to_code_that_reads_the_environments_attributes():
    import pickle

    env = guarded("Listed")
    assert env.vocabulary == broken_envs.DIAL_WORDS and env.max_steps == 4  # forwarded, as on the environment
    assert pickle.loads(pickle.dumps(env)).vocabulary == broken_envs.DIAL_WORDS  # Ray ships environments
    with pytest.raises(AttributeError):
        assert env.no_such_attribute is None  # never reached: the read raises


def test_a_warning_met_while_collecting_words_says_so_and_the_command_line_shows_it_on_one_line(monkeypatch):
    """The first steps a run takes in a tiny-model run are the random play that collects the
    environment's words: a warning from them says that is where its episode and step are. The
    command line prints sacglam's warnings as `warning: <message>`, without the file, line and
    source of sacglam's code that Python's format adds; other warnings keep Python's format."""
    from sacglam.envs.words import collect_words
    from sacglam.errors import SacglamWarning, one_line_warnings

    monkeypatch.setattr(guard, "_WARNED_OF_REWARDS", set())
    with pytest.warns(SacglamWarning) as seen:
        collect_words(lambda: guarded("PaysFive"), steps=200)
    [message] = [str(w.message) for w in seen if "reward 5" in str(w.message)]
    assert message.startswith("in the random play that collects the environment's words: PaysFive, episode ")

    def plain(message, category, filename, lineno, line=None):
        return f"{filename}:{lineno}: {category.__name__}: {message}\n"

    monkeypatch.setattr(warnings, "formatwarning", plain)  # Python's own is put back after the test
    one_line_warnings()
    installed = warnings.formatwarning
    one_line_warnings()  # twice: the same formatter, not one wrapped in another
    assert warnings.formatwarning is installed is not plain
    assert warnings.formatwarning(message + "\n  more", SacglamWarning, "sacglam/envs/guard.py", 132) == (
        f"warning: {message} more\n"
    )
    assert warnings.formatwarning("a\nb", UserWarning, "x.py", 3) == "x.py:3: UserWarning: a\nb\n"
    # the command line puts back the formatter it found when it returns
    monkeypatch.setattr(warnings, "formatwarning", plain)
    with pytest.raises(SystemExit):
        main(["evaluate", "--no-such-flag"])
    assert warnings.formatwarning is plain


def test_an_empty_candidate_list_is_pointed_to_the_final_state_only_when_the_episode_ended():
    with pytest.raises(EnvironmentProtocolError) as mid_episode:
        play(guarded("EmptyCandidates"), ["Wait"])
    line = mid_episode.value.one_line()
    assert "step 1: info['candidates'] must be a non-empty list of non-empty strings, got []" in line
    assert "last step" not in line
    with pytest.raises(EnvironmentProtocolError) as at_the_end:
        play(guarded("EmptyCandidates"), ["Turn the dial to three"])  # the goal reached: the episode ends
    assert "(after an episode's last step too: return the final state's candidates" in at_the_end.value.one_line()
