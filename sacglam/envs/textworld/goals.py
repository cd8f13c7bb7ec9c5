"""The goal grammar over TextWorld's facts: which goals a game state achieves, as text.

Spec: `docs/reference/textworld.md`, "Goals". A fact is TextWorld's logic proposition reduced to names,
`(predicate, (argument, ...))`, e.g. `("in", ("coin", "I"))` (the coin is in the inventory) or
`("at", ("P", "kitchen"))` (the player is in the kitchen). Three predicates have a clause:

    in(o, I)   -> "take the <o>"
    at(P, r)   -> "go to the <r>"
    open(c)    -> "open the <c>"     (a container or a door)

A goal is a set of such facts; its text is its clauses in a fixed order (go, open, take, then by
name) joined by " and ", and it holds in a state whose facts include all of them. A quest whose
winning facts all have a clause becomes a goal (the treasure hunter's `at(P, r) and in(o, I)` is
"go to the <r> and take the <o>"); any other quest keeps its own objective text.

Hindsight: after each step, the goals achieved are every one-clause goal that holds and, when the
game's quest (or the episode's goal) has several clauses, every goal of that shape (one fact per
clause kind) that holds: so relabeled goals look like the goals the agent is asked for. Each is reported the
first time it holds in an episode, which is the step an episode on that goal would have ended
with success.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence

Fact = tuple[str, tuple[str, ...]]

SEPARATOR = " and "
_ORDER = {"go": 0, "open": 1, "take": 2}
_PARSE = (
    ("go", re.compile(r"^go to the (.+)$")),
    ("open", re.compile(r"^open the (.+)$")),
    ("take", re.compile(r"^take the (.+)$")),
)
MAX_SHAPED_GOALS = 256  # combinations of one shape listed per step, at most (a bound on work, not a knob)


def clause_kind(fact: Fact) -> str | None:
    """The clause kind of `fact` (go, open, take), or None when the grammar has no clause for it."""
    name, args = fact
    if name == "in" and len(args) == 2 and args[1] == "I":
        return "take"
    if name == "at" and len(args) == 2 and args[0] == "P":
        return "go"
    if name == "open" and len(args) == 1:
        return "open"
    return None


def _entity(fact: Fact) -> str:
    name, args = fact
    return args[1] if name == "at" else args[0]


def clause(fact: Fact) -> str:
    """The clause of a fact that has one (`clause_kind` is not None)."""
    kind = clause_kind(fact)
    if kind is None:
        raise ValueError(f"the goal grammar has no clause for fact {fact!r}")
    return f"go to the {_entity(fact)}" if kind == "go" else f"{kind} the {_entity(fact)}"


def goal_text(facts: Iterable[Fact]) -> str | None:
    """The text of the goal made of `facts`, or None when one of them has no clause (or an entity
    name would make the text ambiguous)."""
    facts = list(dict.fromkeys(facts))
    if not facts or any(clause_kind(f) is None for f in facts):
        return None
    if any(SEPARATOR.strip() in _entity(f).split() for f in facts):
        return None  # "and" inside a name: the text could not be read back
    ordered = sorted(facts, key=lambda f: (_ORDER[clause_kind(f) or ""], _entity(f)))
    return SEPARATOR.join(clause(f) for f in ordered)


def parse_goal(text: str) -> frozenset[Fact]:
    """The facts of a goal text (`goal_text`'s inverse). Raises ValueError for text outside the grammar."""
    facts = set()
    for part in text.split(SEPARATOR):
        for kind, pattern in _PARSE:
            match = pattern.match(part)
            if match:
                name = match.group(1)
                facts.add(
                    ("at", ("P", name))
                    if kind == "go"
                    else ("in", (name, "I"))
                    if kind == "take"
                    else ("open", (name,))
                )
                break
        else:
            raise ValueError(
                f"{part!r} in goal {text!r} is not a clause of the TextWorld goal grammar "
                "('take the <object>', 'go to the <room>', 'open the <container or door>', joined by ' and ')"
            )
    return frozenset(facts)


def holds(goal: frozenset[Fact], facts: frozenset[Fact]) -> bool:
    return goal <= facts


def quest_shape(goal: frozenset[Fact] | None) -> tuple[str, ...]:
    """The clause kinds of a goal, sorted (`("go", "take")` for a treasure hunter's quest); ()
    for a goal outside the grammar."""
    if not goal or any(clause_kind(f) is None for f in goal):
        return ()
    return tuple(sorted(clause_kind(f) or "" for f in goal))


def achieved_goals(facts: frozenset[Fact], shapes: Iterable[Sequence[str]]) -> tuple[list[str], list[tuple[str, ...]]]:
    """Every goal that holds in a state with `facts`: each one-clause goal, and each goal of every
    several-clause shape in `shapes`; and the shapes left out because they would give more than
    `MAX_SHAPED_GOALS` goals (never a part of them: a caller that reports goals when they first
    hold must not list a goal at one step and leave it out at another)."""
    by_kind: dict[str, list[Fact]] = {}
    for fact in sorted(facts):
        kind = clause_kind(fact)
        if kind is not None:
            by_kind.setdefault(kind, []).append(fact)
    goals = [goal_text([f]) for kind in sorted(by_kind, key=_ORDER.__getitem__) for f in by_kind[kind]]
    too_many: list[tuple[str, ...]] = []
    for shape in dict.fromkeys(tuple(s) for s in shapes):
        if len(shape) < 2:
            continue
        pools = [by_kind.get(kind, []) for kind in shape]
        if math.prod(len(pool) for pool in pools) > MAX_SHAPED_GOALS:
            too_many.append(shape)
            continue
        for combination in itertools.product(*pools):
            if len(set(combination)) == len(shape):  # one fact per clause: a goal of exactly that shape
                goals.append(goal_text(combination))
    return [g for g in dict.fromkeys(goals) if g is not None], too_many
