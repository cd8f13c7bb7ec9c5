"""Playground-Text, the environment of the SAC-GLAM paper (no LLM, learning or Ray in here).

Importing this package registers `PlaygroundText-v0` (6 objects, the 8,470 train goals, 30 steps)
and `PlaygroundTextSimple-v0` (3 objects, the 182 single train goals, 8 steps) with gymnasium;
`gymnasium.make("sacglam.envs:PlaygroundText-v0")` imports it for you. Both also have a vector
entry point: `gymnasium.make_vec("sacglam.envs:PlaygroundText-v0", num_envs=32)`.
"""

import gymnasium

from sacglam.envs import goals
from sacglam.envs.expert import ExpertPolicy, shortest_plan
from sacglam.envs.goals import GOAL_TYPES, goal_type, parse_goal
from sacglam.envs.observation import ParsedObservation, parse_observation
from sacglam.envs.playground_text import PlaygroundState, PlaygroundText
from sacglam.envs.protocol import InvalidActionError
from sacglam.envs.vector import PlaygroundTextVector

FULL_KWARGS = {"n_objects": 6, "goals": "train", "max_steps": 30}
SIMPLE_KWARGS = {"n_objects": 3, "goals": "simple-train", "max_steps": 8}

for _env_id, _kwargs in (("PlaygroundText-v0", FULL_KWARGS), ("PlaygroundTextSimple-v0", SIMPLE_KWARGS)):
    if _env_id not in gymnasium.registry:
        gymnasium.register(
            id=_env_id,
            entry_point="sacglam.envs.playground_text:PlaygroundText",
            vector_entry_point="sacglam.envs.vector:PlaygroundTextVector",
            kwargs=dict(_kwargs),
        )

__all__ = [
    "ExpertPolicy",
    "FULL_KWARGS",
    "GOAL_TYPES",
    "InvalidActionError",
    "ParsedObservation",
    "PlaygroundState",
    "PlaygroundText",
    "PlaygroundTextVector",
    "SIMPLE_KWARGS",
    "goal_type",
    "goals",
    "parse_goal",
    "parse_observation",
    "shortest_plan",
]
