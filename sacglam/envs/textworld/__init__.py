"""TextWorld games through sacglam's environment protocol (`docs/reference/textworld.md`).

`TextWorldEnv` plays a set of game files; `sacglam.envs.textworld.games` builds the games of a
TextWorld challenge family offline (or lists a folder of games); `sacglam.envs.textworld.goals` is
the goal grammar over the game's facts that hindsight relabeling reads. Importing this package
does not import `textworld` itself: that happens when a game is built or opened.
"""

from sacglam.envs.textworld.env import TextWorldEnv
from sacglam.envs.textworld.games import CHALLENGES, challenge_games, game_files

__all__ = ["CHALLENGES", "TextWorldEnv", "challenge_games", "game_files"]
