"""`BabyAIText`: BabyAI's local tasks as a text environment (GLAM's benchmark, our own text).

Spec: `docs/reference/babyai-text.md`. One episode: a room with a few objects and a mission
("go to the red ball", "pick up the blue key"); the agent reads a text description of its partial
view and chooses one of six action texts. Reward 1.0 on the step that completes the mission (as
BabyAI's verifier decides), which terminates the episode; 0 otherwise; truncated at `max_steps`.

`info` (reset and step): `candidates` (the six action texts), `goal` (the mission), `goal_type`
(its task), `achieved_goals` (the partner's report for the step just taken; [] at reset), and on
steps `success`. The partner reports, once per episode each, the train missions of the level's
tasks that the step achieved: "go to the X" when X is in the cell in front of the agent after the
step, "pick up the X" when the step picked X up. Held-out missions are never reported.
"""

from __future__ import annotations

import string
from typing import Any, cast

import gymnasium
from gymnasium import spaces

from sacglam.envs.babyai.describe import describe
from sacglam.envs.babyai.level import LocalMissionLevel
from sacglam.envs.babyai.missions import TASKS, Mission, Split, is_held_out, parse_mission
from sacglam.envs.protocol import InvalidActionError

ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")  # minigrid's 0-5
_CHARSET = frozenset(string.ascii_letters + string.digits + " ,:\n")  # what the texts are made of
LEVELS = {"GoToLocal": ("go to",), "PickupLocal": ("pick up",), "MixedLocal": TASKS}


class InvalidBabyAIActionError(InvalidActionError):
    """An action text that is not one of BabyAI-Text's six."""


class BabyAIText(gymnasium.Env):
    """BabyAI-Text on one of `LEVELS`, missions from `split` (train, test or all)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        level: str = "MixedLocal",
        split: str = "train",
        n_objects: int = 4,
        room_size: int = 8,
        max_steps: int = 40,
    ):
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
        if level not in LEVELS:
            raise ValueError(f"unknown BabyAI-Text level {level!r}; choose one of {sorted(LEVELS)}")
        if not 1 <= n_objects <= 12:
            raise ValueError(f"n_objects must be between 1 and 12, got {n_objects}")
        if not 5 <= room_size <= 12:
            raise ValueError(f"room_size must be between 5 and 12 (walls included), got {room_size}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.level, self.split, self.tasks = level, split, LEVELS[level]
        self.level_env = LocalMissionLevel(self.tasks, cast(Split, split), n_objects, room_size, max_steps)
        self.observation_space = spaces.Text(max_length=120 + 60 * (n_objects + 3), charset=_CHARSET)
        self.action_space = spaces.Text(max_length=16, charset=_CHARSET)
        self._reported: set[str] = set()
        self._goal = ""
        self._bot: Any = None  # the BabyAI bot of the current episode, made on first use
        self._last_action: int | None = None

    # ------------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        goal = (options or {}).get("goal")
        if goal is not None:
            mission = parse_mission(goal)
            if mission.task not in self.tasks:
                raise ValueError(f"goal {goal!r} is not a task of level {self.level} (tasks: {self.tasks})")
            self.level_env.set_next_mission(mission)
        obs, _ = self.level_env.reset(seed=seed)
        self._goal = self.level_env.mission_tuple.text
        self._reported = set()
        self._bot, self._last_action = None, None
        return self._text(obs), self._info([])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action not in ACTIONS:
            raise InvalidBabyAIActionError(f"{action!r} is not a BabyAI-Text action; the actions are {ACTIONS}")
        env = self.level_env
        carried_before = env.carrying
        self._last_action = ACTIONS.index(action)
        obs, reward, terminated, truncated, _ = env.step(ACTIONS.index(action))
        success = bool(terminated and reward > 0)
        achieved = self._partner(action, carried_before)
        info = self._info(achieved)
        info["success"] = success
        return self._text(obs), float(success), bool(terminated), bool(truncated and not terminated), info

    # ------------------------------------------------------------------ helpers

    def _partner(self, action: str, carried_before: Any) -> list[str]:
        env = self.level_env
        events = []
        front = env.grid.get(*env.front_pos)
        if front is not None and front.type in ("key", "ball", "box"):
            events.append(Mission("go to", front.color, front.type))
        if action == "pick up" and carried_before is None and env.carrying is not None:
            events.append(Mission("pick up", env.carrying.color, env.carrying.type))
        achieved = []
        for mission in events:
            text = mission.text
            if mission.task in self.tasks and not is_held_out(mission) and text not in self._reported:
                self._reported.add(text)
                achieved.append(text)
        return achieved

    def _text(self, obs: dict[str, Any]) -> str:
        carrying = self.level_env.carrying
        return describe(self._goal, obs["image"], (carrying.color, carrying.type) if carrying else None)

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {
            "candidates": list(ACTIONS),
            "goal": self._goal,
            "goal_type": self.level_env.mission_tuple.task,
            "achieved_goals": achieved,
        }

    def expert_action(self) -> str:
        """The BabyAI bot's next action for the current state (the expert of `sacglam evaluate`).

        One bot per episode, told the action actually taken at each step (its advising mode), so
        it may be asked at any step, whoever acted before."""
        from minigrid.utils.baby_ai_bot import BabyAIBot

        if self._bot is None:
            self._bot, taken = BabyAIBot(self.level_env), None
        else:
            taken = self._last_action
        action = int(self._bot.replan(taken))
        return ACTIONS[action] if action < len(ACTIONS) else "toggle"  # 6 is `done`: a no-op here
