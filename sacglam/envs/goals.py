"""The goal grammar of Playground-Text, its train/test split, and goal parsing and matching.

Spec: `docs/reference/playground-text.md`, section "Goals". Public constants (sorted tuples of str):

- `TRAIN_GOALS` (8,470): 182 single train goals + 8,288 sequential ones;
- `TEST_GOALS` (3,145): 64 single test goals + 3,081 sequential ones;
- `SIMPLE_TRAIN_GOALS` (182), `SIMPLE_TEST_GOALS` (64): single goals only.

A goal is one part (`Grasp red cat`) or two joined by `then` (`Grow red cat then grasp any
water`); only the first part of a sequential goal is a Grow part, and the second part is written
lower-cased. A part has three forms: `<Verb> <color> <name>`, `<Verb> any <color> thing`,
`<Verb> any <name>`, where a name is an object type or a category name.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Final, NamedTuple

from sacglam.envs.vocabulary import (
    CATEGORY_TYPES,
    COLORS,
    GOAL_CATEGORIES,
    GROWABLE_NAMES,
    NAMES,
    THING_CATEGORIES,
    TYPE_CATEGORY,
    SceneObject,
)

GRASP: Final = "grasp"
GROW: Final = "grow"
THING: Final = "thing"


class GoalPart(NamedTuple):
    """One part of a goal. `color` None means `any`; `name` is a type, a category, or `thing`."""

    verb: str  # GRASP or GROW
    color: str | None
    name: str

    def text(self, capitalized: bool = True) -> str:
        verb = self.verb.capitalize() if capitalized else self.verb
        if self.name == THING:
            return f"{verb} any {self.color} thing"
        if self.color is None:
            return f"{verb} any {self.name}"
        return f"{verb} {self.color} {self.name}"

    def matches(self, obj: SceneObject) -> bool:
        """True when an event of this part's verb on `obj` achieves this part."""
        color, type_ = obj
        if self.color is not None and self.color != color:
            return False
        if self.name == THING:
            return TYPE_CATEGORY[type_] in THING_CATEGORIES[self.verb]
        if self.name in GOAL_CATEGORIES:
            return type_ in GOAL_CATEGORIES[self.name]
        return self.name == type_

    @property
    def object_phrase(self) -> str:
        """The part's last two words (`red cat`, `any cat`, `red thing`): sequential goals whose
        two parts share it are not in the goal space."""
        return " ".join(self.text().split(" ")[-2:])


Goal = tuple[GoalPart, ...]
"""A parsed goal: one part, or two (first a Grow part, then the second part)."""

GOAL_TYPES: Final = ("grasp", "grow", "grow then grasp", "grow then grow")
"""Goal types, used to report success rates (the paper's figure 4 categories)."""


def _single_parts(verb: str) -> Iterator[GoalPart]:
    names = NAMES if verb == GRASP else GROWABLE_NAMES
    for color in COLORS:
        for name in names:
            yield GoalPart(verb, color, name)
    for color in COLORS:
        yield GoalPart(verb, color, THING)
    for name in names:
        yield GoalPart(verb, None, name)


def _test_substrings() -> tuple[str, ...]:
    """IMAGINE's held-out markers: a single goal containing any of them is a test goal."""
    any_colors = COLORS + ("any",)
    grown_plants = CATEGORY_TYPES["plant"] + ("plant", "living_thing")
    return (
        ("red tree", "green dog", "blue door", "flower")
        + tuple(f"Grasp {c} animal" for c in any_colors)
        + tuple(f"Grasp {c} fly" for c in any_colors)
        + tuple(f"Grow {c} {p}" for c in any_colors for p in grown_plants)
    )


_TEST_SUBSTRINGS: Final = _test_substrings()


def is_test_single_goal(text: str) -> bool:
    """True for a single goal of the held-out test split."""
    return any(marker in text for marker in _TEST_SUBSTRINGS)


def _split_singles(test: bool) -> tuple[GoalPart, ...]:
    parts = [p for verb in (GRASP, GROW) for p in _single_parts(verb)]
    return tuple(p for p in parts if is_test_single_goal(p.text()) == test)


def sequential_goal_text(first: GoalPart, second: GoalPart) -> str:
    return f"{first.text()} then {second.text(capitalized=False)}"


def _sequential(singles: tuple[GoalPart, ...]) -> Iterator[tuple[GoalPart, GoalPart]]:
    for first in singles:
        if first.verb != GROW:
            continue
        for second in singles:
            if first.object_phrase != second.object_phrase:
                yield first, second


TRAIN_SINGLE_PARTS: Final = _split_singles(test=False)
TEST_SINGLE_PARTS: Final = _split_singles(test=True)

# Every known goal text -> its parsed form (train and test; 11,615 entries).
_PARSED: Final[dict[str, Goal]] = {}
for _singles in (TRAIN_SINGLE_PARTS, TEST_SINGLE_PARTS):
    for _p in _singles:
        _PARSED[_p.text()] = (_p,)
    for _a, _b in _sequential(_singles):
        _PARSED[sequential_goal_text(_a, _b)] = (_a, _b)

SIMPLE_TRAIN_GOALS: Final = tuple(sorted(p.text() for p in TRAIN_SINGLE_PARTS))
SIMPLE_TEST_GOALS: Final = tuple(sorted(p.text() for p in TEST_SINGLE_PARTS))
TRAIN_GOALS: Final = tuple(
    sorted(SIMPLE_TRAIN_GOALS + tuple(sequential_goal_text(a, b) for a, b in _sequential(TRAIN_SINGLE_PARTS)))
)
TEST_GOALS: Final = tuple(
    sorted(SIMPLE_TEST_GOALS + tuple(sequential_goal_text(a, b) for a, b in _sequential(TEST_SINGLE_PARTS)))
)

GOAL_SETS: Final[dict[str, tuple[str, ...]]] = {
    "train": TRAIN_GOALS,
    "test": TEST_GOALS,
    "simple-train": SIMPLE_TRAIN_GOALS,
    "simple-test": SIMPLE_TEST_GOALS,
}
"""The goal sets an environment can draw from, by name."""

HELD_OUT_GOALS: Final = {"train": "test", "simple-train": "simple-test"}  # each goal set's held-out twin
SEQUENTIAL_GOAL_SETS: Final = frozenset({"train", "test"})


@cache
def goal_set_members(name: str) -> frozenset[str]:
    """The goal set `name` as a frozenset, for O(1) membership checks."""
    return frozenset(GOAL_SETS[name])


def parse_goal(text: str) -> Goal:
    """Parse a goal text of the train or test set into its parts.

    Raises ValueError with the reason when `text` is not a Playground-Text goal.
    """
    try:
        return _PARSED[text]
    except (KeyError, TypeError):
        pass
    if not isinstance(text, str):
        raise TypeError(f"a goal must be a str, got {type(text).__name__}: {text!r}")
    raise ValueError(
        f"{text!r} is not a Playground-Text goal. Goals look like 'Grasp red cat', 'Grow any plant', "
        "'Grow any red thing then grasp blue door' (see sacglam.envs.goals.TRAIN_GOALS / TEST_GOALS)."
    )


def goal_type(goal: str | Goal) -> str:
    """One of GOAL_TYPES: `grasp`, `grow`, `grow then grasp`, `grow then grow`."""
    parts = parse_goal(goal) if isinstance(goal, str) else goal
    if len(parts) == 1:
        return parts[0].verb
    return f"{parts[0].verb} then {parts[1].verb}"


@cache
def goal_type_shares(name: str) -> dict[str, float]:
    """The fraction of goal set `name` in each goal type (e.g. 98% sequential for `train`)."""
    goal_set = GOAL_SETS[name]
    counts = {t: 0 for t in GOAL_TYPES}
    for goal in goal_set:
        counts[goal_type(goal)] += 1
    return {t: c / len(goal_set) for t, c in counts.items()}


# ---------------------------------------------------------------- sub-goals (PPO with HER, appendix G)


def _all_objects() -> tuple[SceneObject, ...]:
    from sacglam.envs.vocabulary import TYPES

    return tuple((color, type_) for color in COLORS for type_ in TYPES)


def _covers(general: GoalPart, specific: GoalPart) -> bool:
    """Every event that achieves `specific` also achieves `general` (same verb, and every object
    matching `specific` matches `general`)."""
    return general.verb == specific.verb and all(general.matches(o) for o in _all_objects() if specific.matches(o))


def _needed_grasp(grasp: GoalPart, grow: GoalPart) -> bool:
    """Growing anything `grow` matches needs holding a supply; `grasp` is needed when it matches
    every supply that can grow one of those objects (water for plants; food or water for animals)."""
    from sacglam.envs.vocabulary import can_grow

    targets = [o for o in _all_objects() if grow.matches(o)]
    supplies = [o for o in _all_objects() if any(can_grow(o[1], t[1]) for t in targets)]
    return grasp.verb == GRASP and bool(supplies) and all(grasp.matches(s) for s in supplies)


@cache
def is_subgoal(candidate: str, goal: str) -> bool:
    """True when every way of achieving `goal` achieves `candidate` on the way (or at the end):
    the "aligned" relabels of the paper's appendix G. For `Grasp red lion`: `Grasp any animal`
    (a generalization); for `Grow red lion`: `Grow any animal` and `Grasp any supply` (growing an
    animal needs holding food or water); for `A then B`: the sub-goals of A and of B, and `A' then
    B'` with A' covering A and B' covering B. The goal itself counts."""
    c, g = parse_goal(candidate), parse_goal(goal)
    if len(c) == 2:
        return len(g) == 2 and _covers(c[0], g[0]) and _covers(c[1], g[1])
    return any(_covers(c[0], part) or (part.verb == GROW and _needed_grasp(c[0], part)) for part in g)
