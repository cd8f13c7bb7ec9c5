"""Playground-Text's transition rules and goal progress, as pure functions on small integers.

Spec: `docs/reference/playground-text.md`, "State, actions, dynamics" and "Goal achievement, reward, episode end".
The environment, the scripted expert's planner and the tests all step through these functions,
so there is one statement of the rules.

Encoding (all ints, `n` = number of objects in the scene):
- `on`, `holding`: an object index in `[0, n)`, or `NOTHING` (-1);
- an action: `j >= 0` is `Go to <object j>`; `ACTION_GRASP`, `ACTION_RELEASE` are negative;
- an event: `(verb, object index)` with verb `"grow"` or `"grasp"`, or `None`. A step produces at
  most one event (a Grasp picks up one object; Go to and Release grow at most one).
- goal progress: the number of goal parts achieved in order (0, 1 or 2); the goal is achieved when
  the stage equals the number of parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from sacglam.envs.goals import GRASP, GROW, Goal
from sacglam.envs.vocabulary import SceneObject, can_grow

NOTHING: Final = -1
ACTION_GRASP: Final = -1
ACTION_RELEASE: Final = -2

Event = tuple[str, int] | None
"""`(verb, object index)` of what happened in a step, or None."""


def grow_table(objects: Sequence[SceneObject]) -> tuple[tuple[bool, ...], ...]:
    """`table[h][j]` is True when holding object h makes object j grow (water for a plant, food
    or water for an animal)."""
    return tuple(tuple(can_grow(held[1], target[1]) for target in objects) for held in objects)


def transition(grows: tuple[tuple[bool, ...], ...], on: int, holding: int, action: int) -> tuple[int, int, Event]:
    """Apply one action. Returns `(on, holding, event)`.

    The caller guarantees the action is a candidate (never `Go to` the held object).
    """
    if action >= 0:  # Go to object `action`; grows it when holding a suitable supply.
        event = (GROW, action) if holding != NOTHING and grows[holding][action] else None
        return action, holding, event
    if action == ACTION_GRASP:
        if on != NOTHING and holding == NOTHING:
            return NOTHING, on, (GRASP, on)
        return on, holding, None
    # Release: put the held object down where the agent is.
    if holding == NOTHING:
        return on, holding, None
    if on == NOTHING:  # on nothing: the agent is now on the released object
        return holding, NOTHING, None
    return on, NOTHING, ((GROW, on) if grows[holding][on] else None)


def candidate_actions(n_objects: int, holding: int) -> list[int]:
    """The candidate actions in the spec's order: Go to each object not held, Grasp, Release."""
    return [j for j in range(n_objects) if j != holding] + [ACTION_GRASP, ACTION_RELEASE]


class CompiledGoal(NamedTuple):
    """A goal bound to a scene: per part, its verb and which objects match it."""

    verbs: tuple[str, ...]  # one per part
    matches: tuple[tuple[bool, ...], ...]  # matches[part][object]

    @classmethod
    def compile(cls, goal: Goal, objects: Sequence[SceneObject]) -> CompiledGoal:
        return cls(tuple(p.verb for p in goal), tuple(tuple(p.matches(o) for o in objects) for p in goal))

    @property
    def n_parts(self) -> int:
        return len(self.verbs)

    def advance(self, stage: int, event: Event) -> int:
        """Goal progress after a step with `event`.

        A part is achieved by an event of its verb on a matching object, and only once the parts
        before it were achieved at an earlier step: one event never completes two parts.
        """
        if event is None or stage >= len(self.verbs):
            return stage
        verb, obj = event
        if self.verbs[stage] == verb and self.matches[stage][obj]:
            return stage + 1
        return stage
