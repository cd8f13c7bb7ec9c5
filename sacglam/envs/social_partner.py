"""The social partner: after each step, every train goal achieved for the first time at that step.

Spec: `docs/reference/playground-text.md`, "Social partner". The description is composed from the
step's event (never by scanning the 8,470 goals):
- the single train goals the event matches, not reported before in the episode;
- `A then B` for every train Grow goal A first achieved at an earlier step and every single train
  goal B the event matches, when `A then B` is a train goal not reported before.
Test goals are never reported. The list's order carries no meaning.

In the simplified variant (single goals only) the partner reports single train goals only, so every
reported goal is a goal of the environment's own train set and a relabeled episode can be replayed
in the same environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from sacglam.envs.dynamics import Event
from sacglam.envs.goals import GROW, TRAIN_GOALS, TRAIN_SINGLE_PARTS, GoalPart, parse_goal
from sacglam.envs.vocabulary import SceneObject


@cache
def train_parts_matched(verb: str, obj: SceneObject) -> tuple[GoalPart, ...]:
    """The single train goals that an event `(verb, obj)` achieves."""
    return tuple(p for p in TRAIN_SINGLE_PARTS if p.verb == verb and p.matches(obj))


def _sequential_train_texts() -> dict[tuple[GoalPart, GoalPart], str]:
    table = {}
    for text in TRAIN_GOALS:
        parts = parse_goal(text)
        if len(parts) == 2:
            table[parts] = text
    return table


_SEQUENTIAL_TRAIN = _sequential_train_texts()


class SocialPartner:
    """Per-episode hindsight describer. Call `reset(objects)` at the start of each episode, then
    `describe(event)` once per step, in order."""

    __slots__ = ("sequential", "_objects", "_reported_singles", "_reported_sequential", "_grown_firsts")

    def __init__(self, sequential: bool = True) -> None:
        self.sequential = sequential  # also report `A then B` goals (False in the simplified variant)
        self.reset(())

    def reset(self, objects: Sequence[SceneObject]) -> None:
        self._objects = tuple(objects)
        self._reported_singles: set[GoalPart] = set()
        self._reported_sequential: set[str] = set()
        self._grown_firsts: list[GoalPart] = []  # train Grow goals achieved at earlier steps
        # (stays empty when not `sequential`, which turns the sequential loop below off)

    def describe(self, event: Event) -> list[str]:
        """The train goals first achieved by this step's event (a new list)."""
        if event is None:
            return []
        verb, index = event
        matched = train_parts_matched(verb, self._objects[index])
        achieved = []
        for part in matched:
            if part not in self._reported_singles:
                achieved.append(part.text())
        for first in self._grown_firsts:
            for part in matched:
                text = _SEQUENTIAL_TRAIN.get((first, part))
                if text is not None and text not in self._reported_sequential:
                    self._reported_sequential.add(text)
                    achieved.append(text)
        # Only now: a Grow goal first achieved at this step can't start a sequence ending here.
        for part in matched:
            if part not in self._reported_singles:
                self._reported_singles.add(part)
                if verb == GROW and self.sequential:
                    self._grown_firsts.append(part)
        return achieved
