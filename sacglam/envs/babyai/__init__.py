"""BabyAI-Text: BabyAI's local tasks (on `minigrid`) described in text (`docs/reference/babyai-text.md`).

Importing this package registers `BabyAIText-GoToLocal-v0`, `BabyAIText-PickupLocal-v0` and
`BabyAIText-MixedLocal-v0` (train missions) with gymnasium, and `-Test-v0` forms of each on the
held-out missions; `gymnasium.make("sacglam.envs.babyai:BabyAIText-MixedLocal-v0")` imports it.
"""

import gymnasium

from sacglam.envs.babyai.env import ACTIONS, LEVELS, BabyAIText, InvalidBabyAIActionError
from sacglam.envs.babyai.missions import COLORS, OBJECT_TYPES, TASKS, Mission, goal_type, missions, parse_mission

for _level in LEVELS:
    for _suffix, _split in (("", "train"), ("-Test", "test")):
        _env_id = f"BabyAIText-{_level}{_suffix}-v0"
        if _env_id not in gymnasium.registry:
            gymnasium.register(
                id=_env_id, entry_point="sacglam.envs.babyai.env:BabyAIText", kwargs={"level": _level, "split": _split}
            )

__all__ = [
    "ACTIONS",
    "BabyAIText",
    "COLORS",
    "InvalidBabyAIActionError",
    "LEVELS",
    "Mission",
    "OBJECT_TYPES",
    "TASKS",
    "goal_type",
    "missions",
    "parse_mission",
]
