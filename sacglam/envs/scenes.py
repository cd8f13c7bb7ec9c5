"""Scene sampling: the goal's objects (so the goal is always feasible), then random fillers.

Spec: `docs/reference/playground-text.md`, "Scenes". For each part of the goal an object that
satisfies it is placed (an exact `<color> <type>` already placed serves both parts; otherwise a
matching object not yet placed is drawn), plus, for a Grow part, a suitable supply unless one is
already among the goal's objects. The rest are random distinct objects; the order is shuffled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from sacglam.envs.goals import GROW, THING, Goal, GoalPart
from sacglam.envs.vocabulary import (
    CATEGORY_TYPES,
    COLORS,
    GOAL_CATEGORIES,
    SCENE_CATEGORIES,
    SUPPLIES_FOR,
    THING_CATEGORIES,
    TYPE_CATEGORY,
    SceneObject,
    can_grow,
    parse_object,
)

MAX_GOAL_OBJECTS = 4
"""At most a Grow part's object and supply, twice."""


def _draw_matching(part: GoalPart, rng: random.Random) -> SceneObject:
    """One draw of the spec's procedure for an object satisfying `part`."""
    color = part.color if part.color is not None else rng.choice(COLORS)
    if part.name == THING:
        category = rng.choice(THING_CATEGORIES[part.verb])
        return color, rng.choice(CATEGORY_TYPES[category])
    if part.name in GOAL_CATEGORIES:
        return color, rng.choice(GOAL_CATEGORIES[part.name])
    return color, part.name


def _is_exact(part: GoalPart) -> bool:
    return part.color is not None and part.name in TYPE_CATEGORY


def _draw_random_object(rng: random.Random) -> SceneObject:
    category = rng.choice(SCENE_CATEGORIES)
    return rng.choice(COLORS), rng.choice(CATEGORY_TYPES[category])


def goal_objects(goal: Goal, rng: random.Random) -> list[SceneObject]:
    """The objects placed for the goal, in placement order (1 to 4 distinct objects)."""
    placed: list[SceneObject] = []
    for part in goal:
        if _is_exact(part):
            assert part.color is not None  # an exact part names its colour
            target = (part.color, part.name)
            if target not in placed:
                placed.append(target)
        else:
            # Rejection keeps the spec's draw distribution, conditioned on "not yet placed". It
            # terminates: a non-exact part matches at least two objects (`red supply`), and before
            # the second part only the first part's living target and one supply are placed.
            target = _draw_matching(part, rng)
            while target in placed:
                target = _draw_matching(part, rng)
            placed.append(target)
        if part.verb == GROW and not any(can_grow(obj[1], target[1]) for obj in placed):
            supply_type = rng.choice(SUPPLIES_FOR[TYPE_CATEGORY[target[1]]])
            # No object of this supply type is placed yet (it would be suitable), so no clash.
            placed.append((rng.choice(COLORS), supply_type))
    return placed


def sample_scene(goal: Goal, n_objects: int, rng: random.Random) -> list[SceneObject]:
    """A shuffled scene of `n_objects` distinct objects in which `goal` is feasible."""
    scene = goal_objects(goal, rng)
    if len(scene) > n_objects:
        raise ValueError(f"goal needs {len(scene)} objects but the scene holds {n_objects}: raise n_objects")
    present = set(scene)
    while len(scene) < n_objects:
        obj = _draw_random_object(rng)
        if obj not in present:
            present.add(obj)
            scene.append(obj)
    rng.shuffle(scene)
    return scene


def parse_scene(scene: Sequence[str], n_objects: int) -> list[SceneObject]:
    """Validate a scene given as `"<color> <type>"` strings; raises ValueError saying what is wrong."""
    if isinstance(scene, str) or not isinstance(scene, Sequence):
        raise TypeError(
            f"a scene must be a list of '<color> <type>' strings, e.g. ['red cat', 'blue water'], got {scene!r}"
        )
    if len(scene) != n_objects:
        raise ValueError(
            f"the scene has {len(scene)} objects but this environment has n_objects={n_objects}; "
            f"pass a scene of {n_objects} objects or build the environment with n_objects={len(scene)}"
        )
    objects = [parse_object(text) if isinstance(text, str) else _not_str(text) for text in scene]
    if len(set(objects)) != len(objects):
        duplicates = sorted({f"{c} {t}" for c, t in objects if objects.count((c, t)) > 1})
        raise ValueError(f"a scene's objects must be distinct; repeated: {', '.join(duplicates)}")
    return objects


def _not_str(value: object) -> SceneObject:
    raise TypeError(f"scene objects must be '<color> <type>' strings, got {value!r}")
