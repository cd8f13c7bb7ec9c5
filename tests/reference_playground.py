"""An independent, deliberately naive implementation of the Playground-Text spec, for tests.

It imports nothing from `sacglam`: goals are generated from the spec's grammar with plain string
operations, the state is kept as object names, goal achievement is decided from the full event
log, and the social partner scans every goal at every step. Slow and obvious, so that the fast
implementation can be checked against it step by step.
"""

from __future__ import annotations

ANIMALS = "dog cat chameleon human fly parrot mouse lion pig cow".split()
PLANTS = "cactus carnivorous flower tree bush grass algae tea rose bonsai".split()
FURNITURE = "door chair desk lamp table cupboard sink window sofa carpet".split()
SUPPLIES = ["food", "water"]
COLORS = ["red", "blue", "green"]
CATEGORIES = {
    "animal": ANIMALS,
    "plant": PLANTS,
    "furniture": FURNITURE,
    "living_thing": ANIMALS + PLANTS,
    "supply": SUPPLIES,
}


def _singles(verb: str) -> list[str]:
    if verb == "Grasp":
        names = ANIMALS + PLANTS + FURNITURE + SUPPLIES + list(CATEGORIES)
    else:
        names = ANIMALS + PLANTS + ["animal", "plant", "living_thing"]
    goals = [f"{verb} {c} {n}" for c in COLORS for n in names]
    goals += [f"{verb} any {c} thing" for c in COLORS]
    goals += [f"{verb} any {n}" for n in names]
    return goals


def _is_test(goal: str) -> bool:
    markers = ["red tree", "green dog", "blue door", "flower"]
    for c in COLORS + ["any"]:
        markers += [f"Grasp {c} animal", f"Grasp {c} fly"]
        markers += [f"Grow {c} {p}" for p in PLANTS + ["plant", "living_thing"]]
    return any(m in goal for m in markers)


def reference_goal_sets() -> dict[str, set[str]]:
    singles = _singles("Grasp") + _singles("Grow")
    out = {}
    for split, test in (("train", False), ("test", True)):
        single = [g for g in singles if _is_test(g) == test]
        seq = [
            f"{a} then {b.lower()}"
            for a in single
            if a.startswith("Grow ")
            for b in single
            if a.split()[-2:] != b.split()[-2:]
        ]
        out[f"simple-{split}"] = set(single)
        out[split] = set(single) | set(seq)
    return out


def _category(type_: str) -> str:
    for cat in ("animal", "plant", "furniture", "supply"):
        if type_ in CATEGORIES[cat]:
            return cat
    raise KeyError(type_)


def suits(supply: str, target: str) -> bool:
    """Does holding/releasing object `supply` (a name) grow object `target`?"""
    s, t = supply.split()[1], target.split()[1]
    cat = _category(t)
    return (cat == "plant" and s == "water") or (cat == "animal" and s in ("food", "water"))


def part_matches(part: str, verb: str, obj: str) -> bool:
    """Does an event `verb` ('grasp'/'grow') on `obj` achieve the goal part `part`?"""
    words = part.split()
    if words[0].lower() != verb:
        return False
    color, type_ = obj.split()
    if words[1] == "any":
        want_color, name = (words[2], "thing") if words[-1] == "thing" and len(words) == 4 else (None, words[2])
    else:
        want_color, name = words[1], words[2]
    if want_color is not None and want_color != color:
        return False
    if name == "thing":
        allowed = ("animal", "plant") if verb == "grow" else ("animal", "plant", "furniture", "supply")
        return _category(type_) in allowed
    if name in CATEGORIES:
        return type_ in CATEGORIES[name]
    return name == type_


def achievement_step(goal: str, log: list[tuple[int, str, str]]) -> int | None:
    """First step at which `goal` is achieved given the event log [(step, verb, obj)]."""
    if " then " in goal:
        first, second = goal.split(" then ")
        first_steps = [t for t, v, o in log if part_matches(first, v, o)]
        if not first_steps:
            return None
        s = min(first_steps)
        later = [t for t, v, o in log if t > s and part_matches(second, v, o)]
        return min(later) if later else None
    steps = [t for t, v, o in log if part_matches(goal, v, o)]
    return min(steps) if steps else None


def partner_index(goals: set[str]) -> list[tuple[str, str]]:
    """`(goal, its last part)` for each goal, the form `ReferenceEpisode` takes."""
    return [(g, g.split(" then ")[-1]) for g in sorted(goals)]


class ReferenceEpisode:
    """One episode of the spec, in a given scene with a given goal."""

    def __init__(self, scene: list[str], goal: str, max_steps: int, partner_goals: list[tuple[str, str]]):
        """`partner_goals`: the goals the social partner may report, as `partner_index(goals)`."""
        self.scene, self.goal, self.max_steps = list(scene), goal, max_steps
        self.partner_goals = partner_goals
        self.on: str | None = None
        self.holding: str | None = None
        self.grown: set[str] = set()
        self.log: list[tuple[int, str, str]] = []
        self.t = 0
        self.reported: set[str] = set()

    def candidates(self) -> list[str]:
        return [f"Go to {o}" for o in self.scene if o != self.holding] + ["Grasp", "Release"]

    def observation(self) -> str:
        seen = [o for o in self.scene if o != self.holding]
        grown = [o for o in self.scene if o in self.grown]
        return "\n".join(
            [
                f"Goal: {self.goal}",
                "You see: " + (", ".join(seen) if seen else "nothing"),
                f"You are on: {self.on or 'nothing'}",
                f"You are holding: {self.holding or 'nothing'}",
                "You have grown: " + (", ".join(grown) if grown else "nothing"),
                "Action:",
            ]
        )

    def step(self, action: str) -> tuple[str, float, bool, bool, set[str]]:
        assert action in self.candidates(), (action, self.candidates())
        events: list[tuple[str, str]] = []
        if action.startswith("Go to "):
            target = action[len("Go to ") :]
            self.on = target
            if self.holding is not None and suits(self.holding, target):
                events.append(("grow", target))
        elif action == "Grasp":
            if self.on is not None and self.holding is None:
                self.holding, self.on = self.on, None
                events.append(("grasp", self.holding))
        elif action == "Release":
            if self.holding is not None:
                released, self.holding = self.holding, None
                if self.on is None:
                    self.on = released
                elif suits(released, self.on):
                    events.append(("grow", self.on))
        for verb, obj in events:
            self.log.append((self.t, verb, obj))
            if verb == "grow":
                self.grown.add(obj)
        # A goal can only be first achieved at a step whose event matches its last part.
        maybe = [g for g, last in self.partner_goals if any(part_matches(last, v, o) for v, o in events)]
        new = {g for g in maybe if g not in self.reported and achievement_step(g, self.log) == self.t}
        self.reported |= new
        done_at = achievement_step(self.goal, self.log)
        terminated = done_at == self.t
        self.t += 1
        truncated = not terminated and self.t >= self.max_steps
        return self.observation(), 1.0 if terminated else 0.0, terminated, truncated, new
