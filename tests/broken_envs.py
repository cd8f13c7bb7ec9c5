"""Environments that break the protocol (`docs/reference/environment-protocol.md`) in one way each, as an
environment written elsewhere might, for the tests of `ProtocolGuard` and of the command line.

`Dial` is a correct one: turn a dial to the goal's number; every turn reports the number it
reaches, and the goal's number ends the episode with reward 1. Each subclass changes one thing."""

from __future__ import annotations

import string
from typing import Any

import gymnasium
import numpy as np

NUMBERS = ("one", "two", "three")
DIAL_WORDS = tuple("Goal : Reach zero one two three The dial shows . Action Turn the to Wait".split())


class Dial(gymnasium.Env):
    observation_space = gymnasium.spaces.Text(max_length=200, charset=string.printable)
    action_space = gymnasium.spaces.Text(max_length=40, charset=string.printable)

    def __init__(self, max_steps: int = 4) -> None:
        self.max_steps, self.goal, self.t, self.at, self.reached = max_steps, "Reach three", 0, "zero", set()

    def _obs(self) -> str:
        return f"Goal: {self.goal}\nThe dial shows {self.at}.\nAction:"

    def _candidates(self) -> list[str]:
        return [f"Turn the dial to {n}" for n in NUMBERS if n != self.at] + ["Wait"]

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.goal = (options or {}).get("goal") or f"Reach {NUMBERS[int(self.np_random.integers(3))]}"
        self.t, self.at, self.reached = 0, "zero", set()
        return self._obs(), self._info([])

    def _outcome(self, action: str) -> tuple[list[str], float, bool, bool]:
        if action not in self._candidates():
            raise ValueError(f"{action!r} is not one of {self._candidates()}")
        self.t += 1
        achieved = []
        if action != "Wait":
            self.at = action.rsplit(" ", 1)[1]
            achieved = [f"Reach {self.at}"] if self.at not in self.reached else []
            self.reached.add(self.at)
        success = self.goal in achieved
        return achieved, float(success), success, self.t >= self.max_steps and not success

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated, truncated, self._info(achieved)


class StringFlags(Dial):
    """Flags as strings: `"False"` is a true value, so every step would end its episode."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, str(terminated), str(truncated), self._info(achieved)


class IntFlags(Dial):
    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, int(terminated), int(truncated), self._info(achieved)


class NumpyValues(Dial):
    """A correct environment whose reward and flags are numpy scalars."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), np.float32(reward), np.bool_(terminated), np.bool_(truncated), self._info(achieved)


class OldStepAPI(Dial):
    """gym's old step: (obs, reward, done, info)."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated or truncated, self._info(achieved)


class NumberCandidate(Dial):
    """A candidate list with a number among its texts."""

    def _candidates(self) -> list[Any]:
        return [*super()._candidates()[:1], 3, "Wait"]


class NoCandidatesAfterStep(Dial):
    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated, truncated, {"goal": self.goal, "achieved_goals": achieved}


class EmptyCandidates(Dial):
    """No candidates after "Wait" (the episode goes on), nor after the step that ends the episode."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        info = self._info(achieved)
        if action == "Wait" or terminated or truncated:
            info["candidates"] = []
        return self._obs(), reward, terminated, truncated, info


class TupleGoal(Dial):
    """The goal as a tuple of words after the first step."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated, truncated, self._info(achieved) | {"goal": tuple(self.goal.split())}


class RefusesOwnCandidate(Dial):
    """Offers `Wait` but fails on it."""

    def step(self, action):
        if action == "Wait":
            raise RuntimeError("the dial has no wait")
        return super().step(action)


class FalseOwnGoal(Dial):
    """Reports its own goal achieved on a step that neither pays nor ends the episode."""

    def step(self, action):
        achieved, _, _, truncated = self._outcome(action)
        return self._obs(), 0.0, False, truncated, self._info(achieved)


class RepeatsGoal(Dial):
    """Reports a number each time the dial reaches it, not only the first time."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated, truncated, self._info([f"Reach {self.at}"] if action != "Wait" else [])


class BrokenInit(Dial):
    def __init__(self) -> None:
        raise RuntimeError("the dial is not wired")


class NotAnEnv:
    """A class that is not a gymnasium.Env."""


def make_dial(max_steps: int = 4) -> Dial:
    """A factory function, as gymnasium's entry points allow."""
    return Dial(max_steps)


def make_nothing() -> None:
    return None


class NoReports(Dial):
    """A correct environment without hindsight: its info has no `achieved_goals`."""

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal}


class HeldOutDial(Dial):
    """Goals "Reach one" and "Reach two" train, "Reach three" is held out (`split="test"`). With
    `leaks`, the train split still reports "Reach three" when the dial reaches it: a held-out goal
    reported in training, which the protocol forbids and a run must say."""

    def __init__(self, max_steps: int = 4, split: str = "train", leaks: bool = True) -> None:
        super().__init__(max_steps)
        self.split, self.leaks = split, leaks

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        if not (options or {}).get("goal"):
            self.goal = "Reach three" if self.split == "test" else f"Reach {NUMBERS[int(self.np_random.integers(2))]}"
            obs, info = self._obs(), self._info([])
        return obs, info

    def _outcome(self, action: str) -> tuple[list[str], float, bool, bool]:
        achieved, reward, terminated, truncated = super()._outcome(action)
        if self.split == "train" and not self.leaks:
            achieved = [goal for goal in achieved if goal != "Reach three"]
        return achieved, reward, terminated, truncated


class HeldOutMaps(HeldOutDial):
    """As HeldOutDial with `leaks`, but it declares that its twin holds out something else than
    goals (maps, say), so "Reach three" in training is no leak."""

    holds_out_goals = False


class BreaksLater(Dial):
    """Correct for `break_at` episodes (per instance), then offers no candidate after a step: a
    bug that shows only mid-run. `broken` (a class switch) is how a test fixes it."""

    broken = True

    def __init__(self, max_steps: int = 4, break_at: int = 10) -> None:
        super().__init__(max_steps)
        self.break_at, self.episodes = break_at, 0

    def reset(self, *, seed=None, options=None):
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def _candidates(self) -> list[str]:
        late = BreaksLater.broken and self.episodes > self.break_at and self.t > 0
        return [] if late else super()._candidates()


class ShortVocabulary(Dial):
    """Lists its words but forgets the candidates' and the punctuation."""

    vocabulary = ("Goal", "Reach", "zero", "one", "two", "three", "The", "dial", "shows", "Action")


class Listed(Dial):
    """A correct environment that lists every word of its texts."""

    vocabulary = DIAL_WORDS


class PaysFive(Dial):
    """Pays 5 on success: a relabeled success is rewarded 1."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), 5.0 * reward, terminated, truncated, self._info(achieved)


class PaddedReport(Dial):
    """Reports "Reach one " for the goal "Reach one": another goal to exact comparison."""

    def step(self, action):
        achieved, reward, terminated, truncated = self._outcome(action)
        return self._obs(), reward, terminated, truncated, self._info([f"{goal} " for goal in achieved])


class Combination(gymnasium.Env):
    """A safe opened by its 4-digit code pressed in order, in 4 steps: random play opens it once in
    10,000 episodes, its `expert_action()` always. Reports "Open the safe" when it opens."""

    observation_space = gymnasium.spaces.Text(max_length=200, charset=string.printable)
    action_space = gymnasium.spaces.Text(max_length=20, charset=string.printable)
    CODE = "2718"
    success_reward = 1.0

    def _obs(self) -> str:
        return f"Goal: Open the safe\nPressed: {self.pressed or 'nothing'}\nAction:"

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": [f"Press {d}" for d in "0123456789"], "goal": "Open the safe", "achieved_goals": achieved}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pressed = ""
        return self._obs(), self._info([])

    def expert_action(self) -> str:
        return f"Press {self.CODE[len(self.pressed)]}"

    def step(self, action):
        if action not in self._info([])["candidates"]:
            raise ValueError(f"{action!r} is not a key of the safe")
        self.pressed += action[-1]
        opened = self.pressed == self.CODE
        achieved = ["Open the safe"] if opened else []
        truncated = len(self.pressed) >= len(self.CODE) and not opened
        return self._obs(), self.success_reward * opened, opened, truncated, self._info(achieved)


class CombinationPaysFive(Combination):
    success_reward = 5.0


class CombinationPaysFiveWithoutExpert(CombinationPaysFive):
    expert_action = None  # type: ignore[assignment]


class Accented(Dial):
    """A dial in a café: a text outside `string.printable`, the charset it declares."""

    def _obs(self) -> str:
        return f"Goal: {self.goal}\nThe café's dial shows {self.at}.\nAction:"


class CombinationFailsOnTheExpertsLastKey(Combination):
    def step(self, action):
        if self.pressed + action[-1] == self.CODE:
            raise RuntimeError("the safe's lock jams")
        return super().step(action)


class CombinationWithoutReports(CombinationPaysFiveWithoutExpert):
    """Reports no goals: no relabeling, so its reward scale is its own."""

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        info = super()._info(achieved)
        info.pop("achieved_goals")
        return info


class ExpertWrapper(gymnasium.Wrapper):
    """An expert that a wrapper adds (the environment inside has none)."""

    def expert_action(self) -> str:
        safe = self.env.unwrapped
        return f"Press {safe.CODE[len(safe.pressed)]}"
