"""The text an agent reads in BabyAI-Text: what its partial view holds, in steps from where it stands.

Spec: `docs/reference/babyai-text.md`, "Observation". Input is minigrid's encoded egocentric view (the
`image` of its observation): a (V, V, 3) array of (object index, colour index, state), agent at
column V // 2 of the last row, facing towards row 0; cells it cannot see are `unseen`. Output:

    Goal: pick up the blue key
    You see: a wall 3 steps forward, a wall 2 steps left, a blue key 1 step left and 2 steps forward
    You carry: nothing
    Action:

Walls are reported as the nearest wall cell straight ahead, straight left and straight right (a
room's outline, not every wall tile); keys, balls, boxes and doors wherever they are visible,
nearest first (steps forward plus steps sideways, then forward, then left to right).
"""

from __future__ import annotations

import numpy as np

# minigrid.core.constants' indices, restated so this module needs no minigrid.
_UNSEEN, _EMPTY, _WALL, _DOOR = 0, 1, 2, 4
_OBJECT_NAMES = {4: "door", 5: "key", 6: "ball", 7: "box"}
_COLOR_NAMES = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")


def _steps(n: int, direction: str) -> str:
    return f"{n} step{'s' if n != 1 else ''} {direction}"


def _where(forward: int, right: int) -> str:
    parts = []
    if right < 0:
        parts.append(_steps(-right, "left"))
    elif right > 0:
        parts.append(_steps(right, "right"))
    if forward > 0:
        parts.append(_steps(forward, "forward"))
    return " and ".join(parts)


def _object_text(kind: int, color: int, state: int) -> str:
    name = f"{_COLOR_NAMES[color]} {_OBJECT_NAMES[kind]}"
    if kind == _DOOR:
        adjective = _DOOR_STATES[state]
        return f"an {adjective} {name}" if adjective == "open" else f"a {adjective} {name}"
    return f"a {name}"


def describe_view(image: np.ndarray) -> list[str]:
    """The "You see" items of an encoded egocentric view `image` (V, V, 3), in reading order."""
    size = image.shape[0]
    column, row = size // 2, size - 1  # the agent's cell
    kinds = image[:, :, 0]
    items = []
    for label, cells in (
        ("forward", [(column, row - k) for k in range(1, size)]),
        ("left", [(column - k, row) for k in range(1, column + 1)]),
        ("right", [(column + k, row) for k in range(1, column + 1)]),
    ):
        for distance, (i, j) in enumerate(cells, start=1):
            if kinds[i, j] == _WALL:
                items.append(f"a wall {_steps(distance, label)}")
                break
            if kinds[i, j] == _UNSEEN:
                break  # behind a wall or a closed door (minigrid's visibility), or out of view
    objects = []
    for i in range(size):
        for j in range(size):
            if (i, j) == (column, row) or int(kinds[i, j]) not in _OBJECT_NAMES:
                continue  # the agent's own cell shows what it carries
            forward, right = row - j, i - column
            objects.append(((forward + abs(right), forward, right), _object_text(*map(int, image[i, j]))))
    objects.sort(key=lambda item: item[0])
    items += [f"{text} {_where(forward, right)}" for (_, forward, right), text in objects]
    return items


def describe(goal: str, image: np.ndarray, carrying: tuple[str, str] | None) -> str:
    """The full observation text; `carrying` is (colour, type) of the held object, or None."""
    seen = describe_view(image)
    held = f"a {carrying[0]} {carrying[1]}" if carrying else "nothing"
    return f"Goal: {goal}\nYou see: {', '.join(seen) if seen else 'nothing'}\nYou carry: {held}\nAction:"
