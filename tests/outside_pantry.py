"""A pantry written from README.md and docs/guides/own-environment.md alone (plain gymnasium, no sacglam
import) by a second outside check of a newcomer's first run (2026-11-28), kept as written so that
the figures quoted in docs/results/sanity.md can be re-run: `--config` with
`env: {name: "tests.outside_pantry:Pantry", held_out_kwargs: {split: test}}`. Four of five objects
on the table, three containers, 6 steps; 12 train goals and 3 held out; random play 0.166."""

from __future__ import annotations

import gymnasium as gym

OBJECTS = ("apple", "bread", "cheese", "jar", "milk")
CONTAINERS = ("fridge", "cupboard", "basket")
# Held out: one pair per container, every object and container still seen in training.
HELD_OUT = (
    "Put the apple in the basket",
    "Put the cheese in the fridge",
    "Put the milk in the cupboard",
)
ALL_GOALS = tuple(f"Put the {o} in the {c}" for o in OBJECTS for c in CONTAINERS)


class Pantry(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        split: str = "train",
        n_objects: int = 4,
        n_containers: int = 3,
        max_steps: int = 6,
        **unused,
    ) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        self.unused_kwargs = dict(unused)  # to see what sacglam passes, if anything
        self.split = split
        self.n_objects = n_objects
        self.n_containers = n_containers
        self.max_steps = max_steps
        containers = CONTAINERS[:n_containers]
        goals = [f"Put the {o} in the {c}" for o in OBJECTS for c in containers]
        if split == "train":
            self.goals = [g for g in goals if g not in HELD_OUT]
        else:
            self.goals = [g for g in goals if g in HELD_OUT]
        self.containers = containers
        self.vocabulary = sorted(
            set(
                "Goal : On the table , nothing . In You hold Action Take Put in Wait".split()
                + list(OBJECTS)
                + list(CONTAINERS)
            )
        )
        self.observation_space = gym.spaces.Text(max_length=1000)
        self.action_space = gym.spaces.Text(max_length=100)
        self._goal = ""
        self._table: list[str] = []
        self._inside: dict[str, list[str]] = {}
        self._held: str | None = None
        self._t = 0
        self._reported: set[str] = set()
        self._candidates: list[str] = []

    # -- helpers ----------------------------------------------------------------------------
    def _parse_goal(self, goal: str) -> tuple[str, str]:
        words = goal.split()
        # "Put the <object> in the <container>"
        return words[2], words[5]

    def _make_candidates(self) -> list[str]:
        if self._held is None:
            cands = [f"Take the {o}" for o in self._table]
        else:
            cands = [f"Put the {self._held} in the {c}" for c in self.containers]
        return cands + ["Wait"]

    def _observation(self) -> str:
        table = ", ".join(self._table) if self._table else "nothing"
        lines = [f"Goal: {self._goal}", f"On the table: {table}."]
        for c in self.containers:
            inside = ", ".join(self._inside[c]) if self._inside[c] else "nothing"
            lines.append(f"In the {c}: {inside}.")
        lines.append(f"You hold: {self._held or 'nothing'}.")
        lines.append("Action:")
        return "\n".join(lines)

    def _info(self, achieved: list[str]) -> dict:
        self._candidates = self._make_candidates()
        return {
            "candidates": list(self._candidates),
            "goal": self._goal,
            "achieved_goals": list(achieved),
        }

    # -- gymnasium --------------------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = self.np_random
        if options and options.get("goal"):
            goal = options["goal"]
            if goal not in ALL_GOALS:
                raise ValueError(f"unknown goal {goal!r}")
        else:
            goal = self.goals[int(rng.integers(len(self.goals)))]
        self._goal = goal
        goal_obj, _ = self._parse_goal(goal)
        others = [o for o in OBJECTS if o != goal_obj]
        picked = list(rng.choice(others, size=self.n_objects - 1, replace=False))
        table = [goal_obj] + [str(o) for o in picked]
        rng.shuffle(table)
        self._table = table
        self._inside = {c: [] for c in self.containers}
        self._held = None
        self._t = 0
        self._reported = set()
        return self._observation(), self._info([])

    def step(self, action: str):
        if action not in self._candidates:
            raise ValueError(f"{action!r} is not one of the candidates {self._candidates}")
        self._t += 1
        achieved: list[str] = []
        reward = 0.0
        terminated = False
        if action.startswith("Take the "):
            obj = action[len("Take the ") :]
            self._table.remove(obj)
            self._held = obj
        elif action.startswith("Put the "):
            obj, container = self._parse_goal(action)
            self._inside[container].append(obj)
            self._held = None
            # the social partner reports the put (never a goal held out of this split)
            if action in self.goals and action not in self._reported:
                self._reported.add(action)
                achieved.append(action)
            if action == self._goal:
                reward = 1.0
                terminated = True
        truncated = (not terminated) and self._t >= self.max_steps
        return self._observation(), reward, terminated, truncated, self._info(achieved)

    def expert_action(self) -> str:
        goal_obj, goal_c = self._parse_goal(self._goal)
        if self._held == goal_obj:
            return f"Put the {goal_obj} in the {goal_c}"
        if self._held is not None:
            # put it away somewhere that is not the goal's container... any container will do
            return f"Put the {self._held} in the {self.containers[0]}"
        if goal_obj in self._table:
            return f"Take the {goal_obj}"
        return "Wait"
