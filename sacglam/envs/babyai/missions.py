"""BabyAI-Text missions: the tasks, their text, and the train / held-out split.

Spec: `docs/reference/babyai-text.md`, "Missions". A mission is one task applied to one object of the
room, named by colour and type; every object of a BabyAI-Text room is unique in (colour, type),
so a mission's text always says "the":

    go to the red ball        pick up the blue key

Held-out missions (the generalisation test): a (task, colour, type) triple is held out when
`(colour index + type index + task index) % 3 == 0`. A third of the objects are held out per task,
a different third for each task, so every held-out mission's object is trained under the other
task: the test asks for a task and an object the agent has seen, never together.
"""

from __future__ import annotations

from functools import cache
from typing import Literal, NamedTuple

# minigrid's own orders (`minigrid.core.constants`), restated so this module needs no minigrid.
COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
OBJECT_TYPES = ("key", "ball", "box")  # what the rooms hold (doors are walls' business)
TASKS = ("go to", "pick up")
Split = Literal["train", "test", "all"]


class Mission(NamedTuple):
    task: str  # one of TASKS
    color: str
    type: str

    @property
    def text(self) -> str:
        return f"{self.task} the {self.color} {self.type}"


def is_held_out(mission: Mission) -> bool:
    """Whether the mission belongs to the held-out (test) split."""
    index = COLORS.index(mission.color) + OBJECT_TYPES.index(mission.type) + TASKS.index(mission.task)
    return index % 3 == 0


def parse_mission(text: str) -> Mission:
    """`"pick up the blue key"` -> Mission("pick up", "blue", "key"); ValueError on anything else."""
    for task in TASKS:
        prefix = f"{task} the "
        if text.startswith(prefix):
            words = text[len(prefix) :].split(" ")
            if len(words) == 2 and words[0] in COLORS and words[1] in OBJECT_TYPES:
                return Mission(task, words[0], words[1])
    raise ValueError(
        f"not a BabyAI-Text mission: {text!r} (expected '<task> the <colour> <type>' with task in {TASKS}, "
        f"colour in {COLORS}, type in {OBJECT_TYPES})"
    )


@cache
def missions(tasks: tuple[str, ...], split: Split) -> tuple[Mission, ...]:
    """Every mission of `tasks` in `split`, in a fixed order."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"tasks must be a non-empty subset of {TASKS}, got {tasks!r}")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    every = [Mission(t, c, o) for t in tasks for c in COLORS for o in OBJECT_TYPES]
    if split == "all":
        return tuple(every)
    return tuple(m for m in every if is_held_out(m) == (split == "test"))


def goal_type(goal: str) -> str:
    """A mission's category for per-type evaluation: its task."""
    return parse_mission(goal).task
