"""The environment protocol checker (`sacglam.envs.protocol`): both environments pass with the
features they have; a malformed environment is refused with a message naming what is wrong."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium
import pytest

from sacglam.envs import PlaygroundText
from sacglam.envs.babyai import BabyAIText
from sacglam.envs.protocol import (
    EnvironmentProtocolError,
    InvalidActionError,
    check_environment,
    split_goal,
    with_goal,
)


class Corridor(gymnasium.Env):
    """A toy goal-conditioned text environment: walk right to cell `goal` of a 5-cell corridor.
    Keyword arguments break one part of the protocol each."""

    observation_space = gymnasium.spaces.Text(
        max_length=200, charset=frozenset("abcdefghijklmnopqrstuvwxyzGYA 0123456789.:\n")
    )
    action_space = gymnasium.spaces.Text(max_length=5)
    vocabulary = (
        "Goal",
        "reach",
        "cell",
        "You",
        "are",
        "at",
        "Action",
        ":",
        ".",
        "0",
        "1",
        "2",
        "3",
        "4",
        "left",
        "right",
    )

    def __init__(self, **breakage: Any):
        self.breakage = breakage
        self.position, self.goal, self.t = 0, 3, 0
        self.reported: set[str] = set()
        self.shared: list[str] = []

    def _obs(self) -> str:
        text = f"You are at cell {self.position}.\nAction:"
        if self.breakage.get("no_goal_line"):
            return text
        goal = "reach cell 4" if self.breakage.get("wrong_goal_line") else f"reach cell {self.goal}"
        return with_goal(text, goal)

    def _candidates(self) -> list[str]:
        if self.breakage.get("shared_candidates"):  # one list, rewritten in place at every step
            self.shared[:] = ["left", "right"] if self.t % 2 else ["right", "left"]
            return self.shared
        if self.breakage.get("stale_candidates"):  # step() checks against the next step's list
            return ["left", "right", f"wait {self.t}"]
        return ["left", "right"]

    def _info(self, achieved: list[str] | None) -> dict[str, Any]:
        info: dict[str, Any] = {"candidates": self._candidates(), "goal": f"reach cell {self.goal}"}
        if self.breakage.get("no_candidates"):
            del info["candidates"]
        if self.breakage.get("empty_candidates"):
            info["candidates"] = []
        if achieved is not None:
            info["achieved_goals"] = achieved
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.t, self.reported = 0, 0, set()
        self.goal = (
            int(options["goal"].split()[-1]) if options and "goal" in options else int(self.np_random.integers(1, 5))
        )
        return self._obs(), self._info([])

    def step(self, action):
        self.t += 1
        if action not in self._candidates() and not self.breakage.get("takes_anything"):
            raise InvalidActionError(f"{action!r} is not one of {self._candidates()}")
        self.position = max(0, min(4, self.position + (1 if action == "right" else -1)))
        success = self.position == self.goal
        achieved = [f"reach cell {self.position}"] if f"reach cell {self.position}" not in self.reported else []
        if self.breakage.get("repeats_reports"):
            achieved = [f"reach cell {self.position}"]
        self.reported.update(achieved)
        if self.breakage.get("lying_partner"):
            success = False
        reward: Any = float(success)
        if self.breakage.get("string_flags"):  # "False" is a true value: read as a flag, it would end every episode
            return self._obs(), reward, str(success), "False", self._info(achieved)
        return self._obs(), reward, success, self.t >= 10 and not success, self._info(achieved)


def test_playground_text_and_babyai_text_pass_with_hindsight_and_goal_resets():
    # 20 episodes: random play reaches a success, whose reward the checker then sees (with 5 it warns)
    playground = check_environment(PlaygroundText(n_objects=3, goals="simple-train", max_steps=8), episodes=20)
    assert playground == {"goal": True, "hindsight": True, "goal_type": False, "goal_reset": True}
    babyai = check_environment(BabyAIText("MixedLocal"))
    assert babyai == {"goal": True, "hindsight": True, "goal_type": True, "goal_reset": True}


def test_a_toy_environment_passes_and_its_features_are_found():
    assert check_environment(Corridor()) == {"goal": True, "hindsight": True, "goal_type": False, "goal_reset": True}


@pytest.mark.parametrize(
    "breakage, message",
    [
        ({"no_candidates": True}, "info has no 'candidates'"),
        ({"empty_candidates": True}, "must be a non-empty list of non-empty strings"),
        ({"no_goal_line": True}, "must start with a 'Goal: <goal>' line"),
        ({"wrong_goal_line": True}, "the observation's goal line says 'reach cell 4' but info\\['goal'\\] is"),
        ({"lying_partner": True}, "was reported achieved but the step was not a success"),
        ({"string_flags": True}, "terminated and truncated must be bools"),
        ({"no_spaces": True}, "has no observation_space"),
        ({"repeats_reports": True}, "goal 'reach cell \\d' was reported achieved again \\(first at step \\d+\\)"),
        ({"stale_candidates": True}, "step\\('wait \\d+'\\) failed .* although info\\['candidates'\\] listed it"),
    ],
)
def test_a_malformed_environment_is_refused_naming_what_is_wrong(breakage, message):
    env = Corridor(**breakage)
    if breakage.get("no_spaces"):
        env.observation_space = None  # type: ignore[assignment]
    with pytest.raises(
        EnvironmentProtocolError, match=f"Corridor does not follow the environment protocol: .*{message}"
    ):
        check_environment(env)


def test_an_environment_that_rewrites_its_candidate_list_in_place_is_reported_and_recorded_right():
    with pytest.warns(UserWarning, match="was changed in place by step\\(\\)"):
        assert check_environment(Corridor(shared_candidates=True))["hindsight"]
    from sacglam.envs.text_vector import TextVectorEnv

    envs = TextVectorEnv([Corridor(shared_candidates=True)])
    _, infos = envs.reset(seed=0)
    offered = infos["candidates"][0]
    kept = list(offered)
    envs.step([offered[0]])
    assert offered == kept  # the vector's copy, not the environment's list


def test_an_environment_that_takes_an_action_it_did_not_offer_is_reported():
    with pytest.warns(UserWarning, match="was accepted although it is not among info\\['candidates'\\]"):
        assert check_environment(Corridor(takes_anything=True))["hindsight"]


def test_goal_lines_split_and_join_back():
    assert split_goal("Goal: go to the red ball\nYou see: nothing\nAction:") == (
        "go to the red ball",
        "You see: nothing\nAction:",
    )
    assert with_goal("x\ny", "g") == "Goal: g\nx\ny"
    with pytest.raises(EnvironmentProtocolError, match="must start with a 'Goal: <goal>' line"):
        split_goal("You see: nothing")


class CorridorWithTimeLimitFlags(Corridor):
    """Corridor whose success on its last allowed step also reports truncated, as gymnasium's
    TimeLimit does."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, terminated or truncated, info


def test_an_environment_that_sets_terminated_and_truncated_together_is_reported_not_refused():
    with pytest.warns(UserWarning, match="terminated and truncated are both set .* counts such a step as terminated"):
        features = check_environment(CorridorWithTimeLimitFlags())
    assert features["goal"] and features["hindsight"]


def test_a_success_on_the_last_allowed_step_under_gymnasiums_time_limit_is_recorded_as_terminated():
    """gymnasium's TimeLimit reports terminated and truncated together when the episode succeeds
    on its last allowed step; the recorder keeps it as a success that must not be bootstrapped
    (it used to pass both flags on and `Episode` refused them in the rollout worker)."""
    from gymnasium.wrappers import TimeLimit

    from sacglam.envs.text_vector import TextVectorEnv
    from sacglam.rollout_workers.recorder import EpisodeRecorder

    envs = TextVectorEnv([TimeLimit(Corridor(), max_episode_steps=3) for _ in range(2)])
    recorder = EpisodeRecorder(2)
    observations, infos = envs.reset(seed=0, options={"goal": ["reach cell 3"] * 2})
    recorder.start(observations, infos)
    finished = []
    for _ in range(3):  # three steps right reach cell 3 exactly at the limit
        observations, rewards, terminated, truncated, infos = envs.step(["right", "right"])
        finished += recorder.record(["right", "right"], observations, rewards, terminated, truncated, infos)
    assert terminated.all() and truncated.all()  # what TimeLimit reports
    assert len(finished) == 2
    for episode in finished:
        assert episode.terminated and not episode.truncated and episode.rewards == (0.0, 0.0, 1.0)


def test_environments_an_outside_check_wrote_from_the_docs_alone_follow_the_protocol():
    from tests.outside_envs import Keypad, Shelves

    for env in (Shelves(), Keypad()):
        # declared as the docs once said, `Text(max_length=...)`: gymnasium's default charset has no space
        with pytest.warns(UserWarning, match="is not in its observation_space .characters outside its charset: '.n"):
            assert check_environment(env) == {"goal": True, "hindsight": True, "goal_type": False, "goal_reset": True}


def test_texts_inside_the_declared_spaces_and_rewards_of_0_and_1_give_no_warning():
    from tests.broken_envs import Dial

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_environment(Dial(), episodes=20)


def test_a_success_random_play_never_reaches_is_played_by_the_expert_to_check_its_reward():
    """Random play rarely succeeds on a hard environment, so its reward scale would go unchecked:
    the expert's episode shows it, and without an expert the checker says it was not checked."""
    from tests.broken_envs import Combination, CombinationPaysFive, CombinationPaysFiveWithoutExpert

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_environment(Combination())  # the expert's success pays 1: nothing to say
    with pytest.warns(UserWarning, match="CombinationPaysFive, the expert's episode, step 4: reward 5, where an"):
        check_environment(CombinationPaysFive())
    with pytest.warns(UserWarning, match="no step was rewarded in the random episodes, so the reward of a success"):
        check_environment(CombinationPaysFiveWithoutExpert())


def test_the_experts_episode_finds_an_expert_on_any_wrapper_and_reports_a_failing_step_in_one_line():
    import gymnasium

    from tests.broken_envs import (
        CombinationFailsOnTheExpertsLastKey,
        CombinationPaysFiveWithoutExpert,
        CombinationWithoutReports,
        ExpertWrapper,
    )

    wrapped = gymnasium.Wrapper(ExpertWrapper(CombinationPaysFiveWithoutExpert()))  # the expert on the middle one
    with pytest.warns(UserWarning, match="the expert's episode, step 4: reward 5, where an"):
        check_environment(wrapped)
    with pytest.raises(EnvironmentProtocolError, match="the expert's episode, step 4: step\\('Press 8'\\) failed"):
        check_environment(CombinationFailsOnTheExpertsLastKey())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no goals reported, no relabeling: its reward scale is its own
        assert not check_environment(CombinationWithoutReports())["hindsight"]


def test_a_text_beyond_string_printable_is_warned_of_with_a_charset_that_holds_it():
    from tests.broken_envs import Accented

    with pytest.warns(UserWarning, match=r"is not in its observation_space .* charset=string.printable \+ 'é', with"):
        check_environment(Accented())
