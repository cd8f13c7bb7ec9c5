"""Environments written the way a user outside this project writes them: plain gymnasium, no sacglam
import, no `vocabulary`, no expert. They follow the protocol (`docs/reference/environment-protocol.md`) only by what
they put in `info` and on the observation's first line, and they are built to be hard on the
defaults a new environment meets (a random tiny model's short-action bias, the warm start):

- `Pantry`: goals `Put the <object> in the <container>`; candidates `Take the <object>` for each
  object on the table (3 words), `Put the <object> in the <container>` while holding one (6
  words, sharing the prefix `Put the <object> in the`), and `Wait` (1 word); 4-5 candidates,
  6 steps, a goal reported for every put.
- `Lamps`: four lamps, goals such as `Turn on the red lamp then the blue lamp`, actions `Toggle
  the <colour> lamp` (4 words, all ending in `lamp`) and `Wait` (1 word), 6 steps.
- `Workbench`: candidates of 1 to 6 words that share prefixes (`Look`, `Look at the bench`,
  `Paint the <part>`, `Paint the <part> with <colour> paint`); 10 candidates, 3 steps; the goal
  names a part and a colour (`Make the <part> <colour>`); `Paint the <part>` alone makes it grey.

Used by `tests/test_exploration.py`, `tests/test_env_defaults.py` and `benchmarks/studies/critic_input.py`.
"""

from __future__ import annotations

import itertools
import random
import string
from typing import Any

import gymnasium

OBJECTS = ("apple", "pear", "mug", "key", "book", "sock")
CONTAINERS = ("box", "basket", "drawer")
PARTS = ("door", "lid")
COLOURS = ("red", "blue", "green")


class Pantry(gymnasium.Env):
    """Three of `OBJECTS` lie on the table, `CONTAINERS` stand by; put the goal's object in the
    goal's container within 6 steps. Every put achieves (and reports) that put's goal."""

    observation_space = gymnasium.spaces.Text(max_length=400, charset=string.printable)
    action_space = gymnasium.spaces.Text(max_length=60, charset=string.printable)
    goals = tuple(f"Put the {o} in the {c}" for o in OBJECTS for c in CONTAINERS)

    def __init__(self, max_steps: int = 6) -> None:
        self.max_steps = max_steps
        self.table: list[str] = []
        self.held: str | None = None
        self.inside: dict[str, list[str]] = {}
        self.goal, self.t, self.reported = self.goals[0], 0, set[str]()

    def _candidates(self) -> list[str]:
        if self.held is None:
            return [f"Take the {o}" for o in self.table] + ["Wait"]
        return [f"Put the {self.held} in the {c}" for c in CONTAINERS] + ["Wait"]

    def _obs(self) -> str:
        table = ", ".join(self.table) if self.table else "nothing"
        inside = "; ".join(f"the {c} holds {', '.join(self.inside[c]) or 'nothing'}" for c in CONTAINERS)
        held = f"You hold the {self.held}." if self.held else "Your hands are empty."
        return f"Goal: {self.goal}\nOn the table: {table}. {inside}. {held}\nAction:"

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = random.Random(int(self.np_random.integers(2**31)))
        self.goal = (options or {}).get("goal") or rng.choice(self.goals)
        wanted = self.goal.split(" ")[2]
        others = [o for o in OBJECTS if o != wanted]
        self.table = rng.sample([wanted, *rng.sample(others, 2)], 3)
        self.held, self.inside, self.t, self.reported = None, {c: [] for c in CONTAINERS}, 0, set()
        return self._obs(), self._info([])

    def step(self, action):
        if action not in self._candidates():
            raise ValueError(f"{action!r} is not one of {self._candidates()}")
        self.t += 1
        achieved = []
        if action.startswith("Take the "):
            self.held = action.removeprefix("Take the ")
            self.table.remove(self.held)
        elif action.startswith("Put the "):
            container = action.rsplit(" ", 1)[1]
            self.inside[container].append(self.held)
            achieved = [action] if action not in self.reported else []
            self.held = None
        self.reported.update(achieved)
        success = self.goal in achieved
        return self._obs(), float(success), success, self.t >= self.max_steps and not success, self._info(achieved)


class Workbench(gymnasium.Env):
    """Paint the goal's part the goal's colour within 3 steps. `Paint the <part> with <colour> paint`
    makes it that colour (and achieves `Make the <part> <colour>`); `Paint the <part>` makes it
    grey; `Look` and `Look at the bench` do nothing."""

    observation_space = gymnasium.spaces.Text(max_length=400, charset=string.printable)
    action_space = gymnasium.spaces.Text(max_length=60, charset=string.printable)
    goals = tuple(f"Make the {p} {c}" for p in PARTS for c in COLOURS)

    def __init__(self, max_steps: int = 3) -> None:
        self.max_steps = max_steps
        self.colour: dict[str, str] = {}
        self.goal, self.t, self.reported = self.goals[0], 0, set[str]()

    def _candidates(self) -> list[str]:
        painted = [f"Paint the {p}" for p in PARTS]
        brushed = [f"Paint the {p} with {c} paint" for p in PARTS for c in COLOURS]
        return ["Look", "Look at the bench", *painted, *brushed]

    def _obs(self) -> str:
        parts = ", ".join(f"the {p} is {self.colour[p]}" for p in PARTS)
        return f"Goal: {self.goal}\nOn the bench: {parts}.\nAction:"

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = random.Random(int(self.np_random.integers(2**31)))
        self.goal = (options or {}).get("goal") or rng.choice(self.goals)
        self.colour, self.t, self.reported = {p: "grey" for p in PARTS}, 0, set()
        return self._obs(), self._info([])

    def step(self, action):
        if action not in self._candidates():
            raise ValueError(f"{action!r} is not one of {self._candidates()}")
        self.t += 1
        achieved = []
        words = action.split(" ")
        if words[0] == "Paint":
            part = words[2]
            colour = words[4] if len(words) == 6 else "grey"
            self.colour[part] = colour
            goal = f"Make the {part} {colour}"
            achieved = [goal] if colour != "grey" and goal not in self.reported else []
        self.reported.update(achieved)
        success = self.goal in achieved
        return self._obs(), float(success), success, self.t >= self.max_steps and not success, self._info(achieved)


LAMP_COLOURS = ("red", "blue", "green", "yellow")


class Lamps(gymnasium.Env):
    """Turn lamps on in the goal's order within 6 steps; a goal is achieved when its last lamp is
    switched on after the ones before it."""

    observation_space = gymnasium.spaces.Text(max_length=300, charset=string.printable)
    action_space = gymnasium.spaces.Text(max_length=30, charset=string.printable)
    goals = tuple(f"Turn on the {c} lamp" for c in LAMP_COLOURS) + tuple(
        f"Turn on the {a} lamp then the {b} lamp" for a, b in itertools.permutations(LAMP_COLOURS, 2)
    )

    def __init__(self) -> None:
        self.on: set[str] = set()
        self.order: list[str] = []
        self.goal, self.t, self.reported = self.goals[0], 0, set[str]()

    def _obs(self) -> str:
        lamps = ", ".join(f"{c} lamp {'on' if c in self.on else 'off'}" for c in LAMP_COLOURS)
        return f"Goal: {self.goal}\nLamps: {lamps}.\nAction:"

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": [*(f"Toggle the {c} lamp" for c in LAMP_COLOURS), "Wait"], "goal": self.goal,
                "achieved_goals": achieved}  # fmt: skip

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.goal = (options or {}).get("goal") or self.goals[int(self.np_random.integers(len(self.goals)))]
        self.on, self.order, self.t, self.reported = set(), [], 0, set()
        return self._obs(), self._info([])

    def step(self, action):
        if action not in self._info([])["candidates"]:
            raise ValueError(f"{action!r} is not an action of Lamps")
        self.t += 1
        achieved = []
        if action != "Wait":
            colour = action.split(" ")[2]
            self.on ^= {colour}
            if colour in self.on:
                achieved = [f"Turn on the {colour} lamp"]
                achieved += [f"Turn on the {a} lamp then the {colour} lamp" for a in self.order if a in self.on]
                self.order.append(colour)
        achieved = [
            g for g in dict.fromkeys(achieved) if g not in self.reported
        ]  # `order` lists a lamp at each switch-on: a goal can come twice
        self.reported.update(achieved)
        success = self.goal in achieved
        return self._obs(), float(success), success, self.t >= 6 and not success, self._info(achieved)
