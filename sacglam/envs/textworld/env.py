"""`TextWorldEnv`: TextWorld games through sacglam's environment protocol.

Spec: `docs/reference/textworld.md`. Each episode plays one game of the set (drawn with the episode's seed,
or one where the goal given at reset can be met). The protocol's fields come from TextWorld's own
state:
- observation: `Goal: <goal>` then the room's description, the inventory and the game's reply
  to the step (left out at reset, TextWorld's banner, and after a move, where the reply is the
  room's description);
- `candidates`: the game's admissible commands (an action outside them is refused);
- `goal`: the quest in the goal grammar (`sacglam.envs.textworld.goals`), or the game's own
  objective text when its quest has no grammar form;
- `achieved_goals`: the grammar's goals that hold for the first time in the episode after a step
  (games whose backend reports no facts report none: no hindsight there).
An episode succeeds (reward 1, terminated) on the first step after which its goal holds: for a
grammar goal, when the state's facts include the goal's; otherwise when TextWorld says the game is
won. It also terminates, unrewarded, when the game ends another way (lost, or won on a quest that
is not the episode's goal), and is truncated after `max_steps` steps.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium import spaces

from sacglam.envs.protocol import ExpertUnavailableError, InvalidActionError, with_goal
from sacglam.envs.textworld.goals import Fact, achieved_goals, goal_text, parse_goal, quest_shape

_GAME_OVER = re.compile(r"^\s*\*\*\* .* \*\*\*\s*$", re.MULTILINE)  # Inform7's end-of-game banner
_TEXT_CHARSET = frozenset(chr(c) for c in range(32, 127)) | {"\n"}


def _clean(text: str | None) -> str:
    """Game text with blank lines and runs of spaces collapsed, without the interpreter's prompt
    line (`> -= Kitchen =-0/2`) and the end-of-game boilerplate from `*** The End ***` or
    `*** You lost! ***` on."""
    text = _GAME_OVER.split(text or "", maxsplit=1)[0]
    lines = (re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith(">"))


@dataclass(frozen=True)
class GameInfo:
    """What a game's first state says about it (kept per process: reading it opens the game)."""

    quest: frozenset[Fact] | None  # the quest's winning facts when the grammar can say them
    quest_text: str  # the quest as a goal: its grammar text, else the game's objective
    entities: frozenset[str]


def _facts(state: Any) -> frozenset[Fact] | None:
    raw = state.get("facts")
    if raw is None:
        return None
    return frozenset((str(p.name), tuple(str(a.name) for a in p.arguments)) for p in raw)


def _task_line(text: str) -> str:
    """ALFWorld's opening text states its task on a line `Your task is to: <task>`."""
    for line in _clean(text).splitlines():
        if line.startswith("Your task is to:"):
            return line.removeprefix("Your task is to:").strip()
    return ""


def _start(path: str) -> Any:
    """A TextWorld environment playing the game at `path` (reset once)."""
    import textworld

    pddl = path.endswith(".tw-pddl")
    if not pddl and not Path(path).with_suffix(".json").exists():
        raise ValueError(
            f"TextWorld game {path!r} has no {Path(path).with_suffix('.json').name} beside it: TextWorld reads a "
            "game's facts and admissible commands from the JSON that tw-make writes with it"
        )
    infos = textworld.EnvInfos(
        admissible_commands=True,
        description=True,
        inventory=True,
        feedback=True,
        facts=True,
        win_facts=True,
        objective=True,
        won=True,
        lost=True,
        policy_commands=not pddl,  # the PDDL backend would run its planner at every step
    )
    with warnings.catch_warnings():
        # Jericho cannot read a TextWorld game's score itself; TextWorld's own wrapper does it
        warnings.filterwarnings("ignore", message=".*is not fully supported.*")
        try:
            env = textworld.start(path, request_infos=infos)
        except ImportError as error:
            raise ValueError(
                f"cannot play {path!r}: {error}. PDDL games (ALFWorld's .tw-pddl) need TextWorld's planner: "
                "pip install 'textworld[pddl]'"
            ) from error
    return env


_INFO: dict[str, GameInfo] = {}


def game_info(path: str, state: Any) -> GameInfo:
    """The `GameInfo` of the game at `path`, read from its state at reset the first time."""
    if path not in _INFO:
        quest: frozenset[Fact] | None = None
        win = state.get("win_facts") or []
        if len(win) == 1 and len(win[0]) == 1:  # one quest with one way to win
            facts = frozenset((str(p.name), tuple(str(a.name) for a in p.arguments)) for p in win[0][0])
            quest = facts if goal_text(facts) is not None else None
        objective = " ".join(_clean(state.get("objective")).splitlines())  # a goal is one line
        quest_text = goal_text(quest) if quest else objective or _task_line(state.get("feedback") or "")
        if not quest_text:
            raise ValueError(f"TextWorld game {path!r} states no quest: neither winning facts nor an objective")
        if not state.get("admissible_commands"):
            raise ValueError(f"TextWorld game {path!r} lists no admissible commands: it cannot give candidates")
        entities = frozenset(name for fact in _facts(state) or () for name in fact[1])
        _INFO[path] = GameInfo(quest, quest_text, entities)
    return _INFO[path]


class TextWorldEnv(gymnasium.Env):
    """TextWorld games (`games`: paths of game files) as a protocol environment, `max_steps`
    steps per episode. One game is open at a time (an open game holds about 3 MiB): a reset onto
    another game closes it and opens that one, about 50 ms."""

    metadata = {"render_modes": []}

    def __init__(self, games: Sequence[str | Path], max_steps: int = 30):
        if not games:
            raise ValueError("TextWorldEnv needs at least one game file")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.games = tuple(str(g) for g in games)
        self.max_steps = max_steps
        self.observation_space = spaces.Text(max_length=8_192, charset=_TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=256, charset=_TEXT_CHARSET)
        self._env: Any = None  # the open game's TextWorld environment
        self._open_index = -1
        self._index = -1  # the episode's game
        self._actions: list[str] = []  # the episode's commands so far (what a pickled copy replays)
        self._state: Any = None
        self.goal = ""
        self._goal_facts: frozenset[Fact] | None = None
        self._shapes: list[tuple[str, ...]] = []
        self._reported: set[str] = set()
        self.t = 0

    # ------------------------------------------------------------------ games

    def _restart(self, index: int) -> Any:
        """Game `index` from its start (opened unless it is the open one): its first state."""
        if index != self._open_index:
            if self._env is not None:
                self._env.close()
                self._env, self._open_index = None, -1
            self._env = _start(self.games[index])
            self._open_index = index
        return self._env.reset()

    def game(self, index: int) -> GameInfo:
        """What game `index` says about itself (opening it the first time in this process)."""
        path = self.games[index]
        return _INFO[path] if path in _INFO else game_info(path, self._restart(index))

    def _game_for(self, goal: str) -> tuple[int, frozenset[Fact] | None]:
        """A game (looked at in a seeded order) where `goal` can be met, and the goal's facts."""
        try:
            facts: frozenset[Fact] | None = parse_goal(goal)
        except ValueError:
            facts = None
        for index in self.np_random.permutation(len(self.games)):
            game = self.game(int(index))
            if facts is not None and all(
                name in game.entities for fact in facts for name in fact[1] if name not in ("P", "I")
            ):
                return int(index), facts
            if facts is None and goal == game.quest_text:
                return int(index), None
        raise ValueError(
            f"no game of this TextWorldEnv has goal {goal!r}: give a goal of the grammar ('take the <object>', "
            "'go to the <room>', 'open the <container or door>', joined by ' and ') over its entities, or a game's objective"
        )

    # ------------------------------------------------------------------ the protocol

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        goal = (options or {}).get("goal")
        if goal is None:
            self._index = int(self.np_random.integers(len(self.games)))
        else:
            self._index, self._goal_facts = self._game_for(goal)
        self._state = self._restart(self._index)
        game = game_info(self.games[self._index], self._state)
        if goal is None:
            self.goal, self._goal_facts = game.quest_text, game.quest
        else:
            self.goal = goal
        self._actions = []
        self._shapes = [quest_shape(game.quest), quest_shape(self._goal_facts)]
        self.t, self._reported = 0, set()
        return with_goal(self._text(reply=False), self.goal), self._info([])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._env is None or self._index < 0:
            raise RuntimeError("call reset() before step()")
        candidates = self._candidates()
        if action not in candidates:
            raise InvalidActionError(f"{action!r} is not one of this step's candidates {candidates}")
        self._state, _, game_over = self._env.step(action)
        self._actions.append(action)
        self.t += 1
        facts = _facts(self._state)
        achieved: list[str] = []
        if facts:
            goals, too_many = achieved_goals(facts, self._shapes)
            # a shape with too many goals to list is left out for the rest of the episode: listing
            # part of it now could report a goal later than the step it first held
            self._shapes = [shape for shape in self._shapes if shape not in too_many]
            achieved = [g for g in goals if g not in self._reported]
        self._reported.update(achieved)
        if self._goal_facts is not None and facts is not None:
            success = self._goal_facts <= facts
        else:
            success = bool(self._state.get("won")) and self.goal == self.game(self._index).quest_text
        terminated = success or bool(game_over)
        truncated = self.t >= self.max_steps and not terminated
        return with_goal(self._text(reply=True), self.goal), float(success), terminated, truncated, self._info(achieved)

    def _candidates(self) -> list[str]:
        return [str(c) for c in self._state.get("admissible_commands") or ()] or ["look"]

    def _text(self, reply: bool) -> str:
        parts = [_clean(self._state.get("description")), _clean(self._state.get("inventory"))]
        feedback = _clean(self._state.get("feedback"))
        if reply and feedback != parts[0]:  # after a move the reply is the new room's description
            parts.append(feedback)
        return "\n".join(p for p in parts if p) or feedback or "(no text)"

    def _info(self, achieved: list[str]) -> dict[str, Any]:
        return {"candidates": self._candidates(), "goal": self.goal, "achieved_goals": achieved}

    def expert_action(self) -> str:
        """The next command of TextWorld's walkthrough from the current state (the quest's
        expert; a goal given at reset that is not the game's quest has none, nor has a PDDL game)."""

        if self._index < 0:
            raise RuntimeError("call reset() before expert_action()")
        plan = self._state.get("policy_commands")
        if self.goal != self.game(self._index).quest_text or not plan:
            raise ExpertUnavailableError(
                f"TextWorld's walkthrough solves the game's own quest only, not the goal {self.goal!r}"
                if plan
                else f"TextWorld gives no walkthrough for {self.games[self._index]!r}"
            )
        return str(plan[0])

    # ------------------------------------------------------------------ pickling (checkpoints)

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the open game (an interpreter does not pickle): a copy reopens the
        episode's game and replays the episode's commands, which TextWorld games repeat exactly."""
        return {**self.__dict__, "_env": None, "_open_index": -1, "_state": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._index >= 0:
            self._state = self._restart(self._index)
            for action in self._actions:
                self._state, _, _ = self._env.step(action)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self._open_index = None, -1
