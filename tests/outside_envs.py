"""Two small text environments written from docs/guides/own-environment.md only (no sacglam import), by an
outside check of a newcomer's first run (2026-11-28), kept as written so that the figures quoted
in docs/guides/own-environment.md and docs/results/sanity.md can be re-run: `--env.name tests.outside_envs:Shelves`
from the repository's root. Their observations do not end with an `Action:` line.

Shelves: "Move the <item> to the <shelf> shelf" -- pick an item up from the counter, place it.
Keypad:  "Enter the code <d1> <d2>" -- press digits; success when the last two presses match.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ITEMS = ("cup", "plate", "bowl", "jar")
SHELVES = ("top", "middle", "bottom")


class Shelves(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 8):
        self.max_steps = max_steps
        self.observation_space = spaces.Text(max_length=512)
        self.action_space = spaces.Text(max_length=64)
        self.goals = [f"Move the {i} to the {s} shelf" for i in ITEMS for s in SHELVES]
        self._goal_parts = {f"Move the {i} to the {s} shelf": (i, s) for i in ITEMS for s in SHELVES}

    # --- helpers ---------------------------------------------------------
    def _candidates(self) -> list[str]:
        if self.holding is None:
            acts = [f"Pick up the {i}" for i in self.counter]
        else:
            acts = [f"Place the {self.holding} on the {s} shelf" for s in SHELVES]
            acts.append(f"Put down the {self.holding}")
        acts += ["Look around", "Do nothing"]
        return acts

    def _state_text(self) -> str:
        counter = ", ".join(self.counter) if self.counter else "nothing"
        lines = [f"On the counter: {counter}."]
        for s in SHELVES:
            on = [i for i, where in self.placed.items() if where == s]
            lines.append(f"On the {s} shelf: {', '.join(on) if on else 'nothing'}.")
        lines.append(f"You are holding {'the ' + self.holding if self.holding else 'nothing'}.")
        return "\n".join(lines)

    def _obs(self) -> str:
        return f"Goal: {self.goal}\n{self._state_text()}"

    def _info(self, achieved: list[str] | None = None) -> dict:
        info = {"candidates": self._candidates(), "goal": self.goal}
        if achieved is not None:
            info["achieved_goals"] = achieved
        return info

    # --- gym API -----------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        if "goal" in options:
            self.goal = options["goal"]
            if self.goal not in self._goal_parts:
                raise ValueError(f"unknown goal {self.goal!r}")
        else:
            self.goal = self.goals[int(self.np_random.integers(len(self.goals)))]
        order = list(ITEMS)
        self.np_random.shuffle(order)
        self.counter = order  # all four items start on the counter, in random order
        self.placed: dict[str, str] = {}
        self.holding: str | None = None
        self.t = 0
        return self._obs(), self._info([])

    def step(self, action: str):
        cands = self._candidates()
        if action not in cands:
            raise ValueError(f"invalid action {action!r}; candidates: {cands}")
        self.t += 1
        achieved: list[str] = []
        reward, terminated = 0.0, False
        if action.startswith("Pick up the "):
            item = action[len("Pick up the ") :]
            self.counter = [i for i in self.counter if i != item]
            self.holding = item
        elif action.startswith("Place the "):
            item = self.holding
            shelf = action.split(" on the ")[1][: -len(" shelf")]
            self.placed[item] = shelf
            self.holding = None
            move = f"Move the {item} to the {shelf} shelf"
            achieved.append(move)  # an item on a shelf never leaves it: each move once
            if move == self.goal:
                reward, terminated = 1.0, True
        elif action.startswith("Put down the "):
            self.counter = self.counter + [self.holding]
            self.holding = None
        # "Look around" and "Do nothing" change nothing
        truncated = (not terminated) and self.t >= self.max_steps
        return self._obs(), reward, terminated, truncated, self._info(achieved)

    def expert_action(self) -> str:
        item, shelf = self._goal_parts[self.goal]
        if self.holding == item:
            return f"Place the {item} on the {shelf} shelf"
        if self.holding is not None:
            return f"Put down the {self.holding}"
        return f"Pick up the {item}"


class Keypad(gym.Env):
    metadata = {"render_modes": []}
    DIGITS = ("1", "2", "3", "4")

    def __init__(self, max_steps: int = 4):
        self.max_steps = max_steps
        self.observation_space = spaces.Text(max_length=256)
        self.action_space = spaces.Text(max_length=32)
        self.goals = [f"Enter the code {a} {b}" for a in self.DIGITS for b in self.DIGITS]

    def _candidates(self) -> list[str]:
        return [f"Press {d}" for d in self.DIGITS] + ["Press clear", "Wait"]

    def _obs(self) -> str:
        shown = " ".join(self.display) if self.display else "nothing"
        return f"Goal: {self.goal}\nThe keypad display shows: {shown}."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        if "goal" in options:
            if options["goal"] not in self.goals:
                raise ValueError(f"unknown goal {options['goal']!r}")
            self.goal = options["goal"]
        else:
            self.goal = self.goals[int(self.np_random.integers(len(self.goals)))]
        self.display: list[str] = []
        self.reported: set[str] = set()
        self.t = 0
        return self._obs(), {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": []}

    def step(self, action: str):
        if action not in self._candidates():
            raise ValueError(f"invalid action {action!r}")
        self.t += 1
        achieved: list[str] = []
        reward, terminated = 0.0, False
        if action == "Press clear":
            self.display = []
        elif action.startswith("Press "):
            self.display.append(action.split()[1])
            if len(self.display) >= 2:
                code = f"Enter the code {self.display[-2]} {self.display[-1]}"
                if code not in self.reported:  # each goal once per episode (docs)
                    self.reported.add(code)
                    achieved.append(code)
                if code == self.goal:
                    reward, terminated = 1.0, True
        truncated = (not terminated) and self.t >= self.max_steps
        info = {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}
        return self._obs(), reward, terminated, truncated, info


def random_success(env_cls, episodes: int = 1000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    env = env_cls()
    wins = 0
    for ep in range(episodes):
        obs, info = env.reset(seed=seed * 100_000 + ep)
        done = False
        while not done:
            a = info["candidates"][int(rng.integers(len(info["candidates"])))]
            obs, r, term, trunc, info = env.step(a)
            done = term or trunc
            wins += int(term and r > 0)
    return wins / episodes


if __name__ == "__main__":
    for cls in (Shelves, Keypad):
        rates = [random_success(cls, 1000, s) for s in range(3)]
        print(cls.__name__, "uniform-random success over 3 x 1000 episodes:", rates, "mean", np.mean(rates))
