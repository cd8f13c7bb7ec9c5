"""Reading an observation text back into its fields.

The observation fully describes the state (paper appendix A), so a policy that sees only the text,
such as the scripted expert, can recover everything it needs from it.
"""

from __future__ import annotations

from typing import NamedTuple

_PREFIXES = ("Goal: ", "You see: ", "You are on: ", "You are holding: ", "You have grown: ")
_NOTHING = "nothing"


class ParsedObservation(NamedTuple):
    goal: str
    visible: tuple[str, ...]  # objects not held, in scene order
    on: str | None
    holding: str | None
    grown: tuple[str, ...]  # scene order


def _split_list(text: str) -> tuple[str, ...]:
    return () if text == _NOTHING else tuple(text.split(", "))


def parse_observation(text: str) -> ParsedObservation:
    """Parse a Playground-Text observation; raises ValueError when the text is not one."""
    lines = text.split("\n")
    if (
        len(lines) != 6
        or lines[5] != "Action:"
        or not all(line.startswith(prefix) for line, prefix in zip(lines, _PREFIXES))
    ):
        raise ValueError(
            "not a Playground-Text observation (expected the lines 'Goal:', 'You see:', 'You are on:', "
            f"'You are holding:', 'You have grown:', 'Action:'): {text!r}"
        )
    goal, seen, on, holding, grown = (line[len(prefix) :] for line, prefix in zip(lines, _PREFIXES))
    return ParsedObservation(
        goal=goal,
        visible=_split_list(seen),
        on=None if on == _NOTHING else on,
        holding=None if holding == _NOTHING else holding,
        grown=_split_list(grown),
    )


GOAL_PREFIX = _PREFIXES[0]


def split_goal(observation: str) -> tuple[str, str]:
    """`"Goal: g\n<state>"` -> `(g, "<state>")`: the goal and the goal-free state text."""
    head, sep, state = observation.partition("\n")
    if not head.startswith(GOAL_PREFIX) or not sep:
        raise ValueError(f"not a Playground-Text observation (no 'Goal:' line first): {observation!r}")
    return head[len(GOAL_PREFIX) :], state


def with_goal(state: str, goal: str) -> str:
    """The observation of a goal-free state text under `goal` (inverse of `split_goal`)."""
    return f"{GOAL_PREFIX}{goal}\n{state}"
