"""A scripted expert that achieves any Playground-Text goal in the fewest possible steps.

It reads only the observation text (which fully describes the state) and plans by breadth-first
search over `(on, holding, goal stage)` with the environment's own transition function, so its
plans are shortest by construction. Used to prove every goal is feasible and as the upper bound of
success-rate plots.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from sacglam.envs.dynamics import (
    ACTION_GRASP,
    ACTION_RELEASE,
    NOTHING,
    CompiledGoal,
    candidate_actions,
    grow_table,
    transition,
)
from sacglam.envs.goals import parse_goal
from sacglam.envs.observation import parse_observation
from sacglam.envs.playground_text import GO_TO_PREFIX, GRASP_ACTION, RELEASE_ACTION
from sacglam.envs.vocabulary import parse_object


def _planning_problem(observation: str):
    """(names, compiled goal, grow table, start state (on, holding, goal stage)) of an observation."""
    parsed = parse_observation(observation)
    names = list(parsed.visible) + ([parsed.holding] if parsed.holding is not None else [])
    objects = [parse_object(n) for n in names]
    index = {n: j for j, n in enumerate(names)}
    goal = CompiledGoal.compile(parse_goal(parsed.goal), objects)
    grows = grow_table(objects)
    # The first part of a sequential goal is a Grow part, so it was achieved iff a grown object
    # matches it; a goal is never fully achieved in an observation the agent acts on.
    stage = 1 if goal.n_parts == 2 and any(goal.matches[0][index[n]] for n in parsed.grown) else 0
    start = (
        index[parsed.on] if parsed.on is not None else NOTHING,
        index[parsed.holding] if parsed.holding is not None else NOTHING,
        stage,
    )
    return names, goal, grows, start


def _search(goal: CompiledGoal, grows, n_objects: int, start: tuple[int, int, int]) -> list[int] | None:
    """Breadth-first search: the shortest action-code sequence from `start` that achieves `goal`."""
    parents: dict[tuple[int, int, int], tuple[tuple[int, int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        on, holding, stage = state
        for action in candidate_actions(n_objects, holding):
            next_on, next_holding, event = transition(grows, on, holding, action)
            next_stage = goal.advance(stage, event)
            if next_stage == goal.n_parts:
                return _unwind(parents, state) + [action]
            child = (next_on, next_holding, next_stage)
            if child not in parents:
                parents[child] = (state, action)
                queue.append(child)
    return None


def shortest_plan(observation: str) -> list[str] | None:
    """The shortest action sequence that achieves the observation's goal from its state, or None
    when the goal cannot be achieved in this scene (possible only for a scene given by the caller).
    """
    names, goal, grows, start = _planning_problem(observation)
    plan = _search(goal, grows, len(names), start)
    return None if plan is None else _action_texts(plan, names)


def plan_length_after(observation: str, action: str) -> int | None:
    """Steps of the shortest plan for the observation's goal that starts with `action` (1: the
    action achieves the goal), or None when no plan through it exists. With reward 1 at the goal
    and discount gamma, the optimal Q of (state, action) is gamma ** (length - 1)."""
    names, goal, grows, (on, holding, stage) = _planning_problem(observation)
    codes = {
        text: code
        for code, text in zip(
            candidate_actions(len(names), holding), _action_texts(list(candidate_actions(len(names), holding)), names)
        )
    }
    if action not in codes:
        raise ValueError(f"{action!r} is not a candidate of this state ({sorted(codes)})")
    next_on, next_holding, event = transition(grows, on, holding, codes[action])
    next_stage = goal.advance(stage, event)
    if next_stage == goal.n_parts:
        return 1
    rest = _search(goal, grows, len(names), (next_on, next_holding, next_stage))
    return None if rest is None else 1 + len(rest)


def _unwind(parents: dict, state: tuple[int, int, int]) -> list[int]:
    actions = []
    link = parents[state]
    while link is not None:
        state, action = link
        actions.append(action)
        link = parents[state]
    return actions[::-1]


def _action_texts(actions: list[int], names: list[str]) -> list[str]:
    special = {ACTION_GRASP: GRASP_ACTION, ACTION_RELEASE: RELEASE_ACTION}
    return [special[a] if a < 0 else GO_TO_PREFIX + names[a] for a in actions]


class ExpertPolicy:
    """Policy interface (`act(observations, candidates) -> actions`) over `shortest_plan`.

    When the goal is unreachable (a caller-given scene), it returns the first candidate.
    """

    name = "expert"

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        actions = []
        for obs, cands in zip(observations, candidates, strict=True):
            plan = shortest_plan(obs)
            actions.append(plan[0] if plan else cands[0])
        return actions
