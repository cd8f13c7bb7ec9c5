"""The objects of Playground-Text: colors, types, categories, and which supply grows what.

Everything here is a constant fixed by the spec (`docs/reference/playground-text.md`, "Objects").
An object is a `(color, type)` pair and is written `"<color> <type>"`, e.g. `"green water"`.
"""

from __future__ import annotations

from typing import Final

SceneObject = tuple[str, str]
"""An object of a scene: `(color, type)`, e.g. `("green", "water")`."""

COLORS: Final = ("red", "blue", "green")

CATEGORY_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "furniture": ("door", "chair", "desk", "lamp", "table", "cupboard", "sink", "window", "sofa", "carpet"),
    "plant": ("cactus", "carnivorous", "flower", "tree", "bush", "grass", "algae", "tea", "rose", "bonsai"),
    "animal": ("dog", "cat", "chameleon", "human", "fly", "parrot", "mouse", "lion", "pig", "cow"),
    "supply": ("food", "water"),
}

TYPES: Final = tuple(t for types in CATEGORY_TYPES.values() for t in types)  # 32 types
TYPE_CATEGORY: Final = {t: cat for cat, types in CATEGORY_TYPES.items() for t in types}

# Category names usable in goals; `living_thing` = animals and plants.
GOAL_CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    "animal": CATEGORY_TYPES["animal"],
    "plant": CATEGORY_TYPES["plant"],
    "furniture": CATEGORY_TYPES["furniture"],
    "living_thing": CATEGORY_TYPES["animal"] + CATEGORY_TYPES["plant"],
    "supply": CATEGORY_TYPES["supply"],
}

NAMES: Final = TYPES + tuple(GOAL_CATEGORIES)  # the 37 name attributes
GROWABLE_NAMES: Final = CATEGORY_TYPES["animal"] + CATEGORY_TYPES["plant"] + ("animal", "plant", "living_thing")

# Categories a scene's filler objects are drawn from (uniformly), and the categories `thing`
# stands for in a goal part, per verb.
SCENE_CATEGORIES: Final = ("animal", "plant", "furniture", "supply")
THING_CATEGORIES: Final = {"grasp": SCENE_CATEGORIES, "grow": ("animal", "plant")}

SUPPLIES_FOR: Final[dict[str, tuple[str, ...]]] = {"plant": ("water",), "animal": ("food", "water")}
"""Which supply types make a living thing of each category grow."""


def object_name(obj: SceneObject) -> str:
    """`("green", "water")` -> `"green water"`."""
    return f"{obj[0]} {obj[1]}"


def can_grow(supply_type: str, target_type: str) -> bool:
    """True when holding/releasing an object of `supply_type` makes `target_type` grow."""
    return supply_type in SUPPLIES_FOR.get(TYPE_CATEGORY[target_type], ())


def parse_object(text: str) -> SceneObject:
    """`"green water"` -> `("green", "water")`; raises ValueError naming the bad part."""
    parts = text.split(" ")
    if len(parts) != 2:
        raise ValueError(f"object {text!r} is not of the form '<color> <type>', e.g. 'green water'")
    color, type_ = parts
    if color not in COLORS:
        raise ValueError(f"object {text!r}: unknown color {color!r}; colors are {', '.join(COLORS)}")
    if type_ not in TYPE_CATEGORY:
        raise ValueError(f"object {text!r}: unknown type {type_!r}; types are {', '.join(TYPES)}")
    return color, type_


# Words of Playground-Text's prompts and actions that are not colours, types or categories.
PROMPT_WORDS: Final = (
    "Goal",
    "You",
    "see",
    "are",
    "on",
    "holding",
    "have",
    "grown",
    "nothing",
    "Action",
    "Possible",
    "actions",
    "Go",
    "to",
    "Grasp",
    "Release",
    "Grow",
    "grasp",
    "grow",
    "then",
    "any",
    "thing",
    ":",
    ",",
)


def prompt_words() -> tuple[str, ...]:
    """Every word and punctuation mark of Playground-Text prompts and actions, in a fixed order
    (a word-level tokenizer's ids follow it)."""
    words = list(PROMPT_WORDS) + list(COLORS) + list(TYPES)
    words += [c for c in GOAL_CATEGORIES if c not in words]
    return tuple(dict.fromkeys(words))
