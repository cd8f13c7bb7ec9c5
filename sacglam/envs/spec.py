"""What the pipeline knows about an environment, whichever it is: `EnvironmentSpec`.

Spec: `docs/reference/environment-protocol.md`, "Selecting an environment". Every layer above `sacglam.envs` reads
an environment through this interface only: how to make one (or a vector of them), the name of
its goal set (metric keys: `eval/<goal set>/...`), its held-out twin, its goal types and their
shares (per-type evaluation and the replay buffer's prior sampling), the goal list evaluation
draws fixed episodes from, the words of its texts (the tiny model's vocabulary), and its expert.

Four kinds: Playground-Text (`PlaygroundSpec`), BabyAI-Text (`BabyAISpec`), TextWorld games
(`TextWorldSpec`), and any other protocol environment named by a gymnasium id or `module:Class`
with keyword arguments (`GymnasiumSpec`: no goal list, one goal type, `all`, and an expert only
if the environment has an `expert_action()`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import pkgutil
import re
import shlex
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium
from gymnasium.vector import VectorEnv

from sacglam.envs.guard import ProtocolGuard, raised_in_user_code
from sacglam.envs.protocol import ExpertUnavailableError
from sacglam.envs.text_vector import TextVectorEnv
from sacglam.errors import UserInputError

ALL_TYPES = "all"  # the one goal type of an environment that has none


class EnvironmentSpec(ABC):
    """One environment on one goal set. Specs are small, picklable values (Ray ships them)."""

    goal_set: str  # the name metric keys use: eval/<goal_set>/...

    @abstractmethod
    def make(self) -> gymnasium.Env:
        """One environment."""

    def make_vector(self, num_envs: int) -> VectorEnv:
        """`num_envs` environments as one vector with same-step auto-reset (`TextVectorEnv`)."""
        return TextVectorEnv([self.make() for _ in range(num_envs)])

    def held_out(self) -> EnvironmentSpec | None:
        """The same environment on its held-out goals, or None when it has none."""
        return None

    def holds_out_goals(self) -> bool:
        """Whether the held-out twin holds out goals, so that a goal of its episodes must never be
        reported in training; False where it holds out something else under the same goal texts
        (other games, maps or levels)."""
        return True

    def prepare(self) -> None:
        """Make what this environment and its held-out twin need on disk (TextWorld: its games),
        once, in the process that starts a run, before any worker does. Raises ValueError naming
        what is wrong. Nothing to make for most environments."""
        return None

    @property
    def goal_types(self) -> tuple[str, ...]:
        """Goal categories in display order (`(ALL_TYPES,)` for an environment without any)."""
        return (ALL_TYPES,)

    def goal_type(self, goal: str) -> str:
        return ALL_TYPES

    def goals(self) -> tuple[str, ...] | None:
        """The goals episodes of this goal set draw from, or None when the environment does not say
        (evaluation then resets with seeds only)."""
        return None

    def type_shares(self) -> dict[str, float]:
        """The fraction of the goal set in each goal type (the overall success re-weights by it)."""
        goals = self.goals()
        if not goals:
            return {t: 1.0 / len(self.goal_types) for t in self.goal_types}
        counts = dict.fromkeys(self.goal_types, 0)
        for goal in goals:
            counts[self.goal_type(goal)] += 1
        return {t: c / len(goals) for t, c in counts.items()}

    def vocabulary(self) -> tuple[str, ...]:
        """Words of the environment's texts, for the tiny model's word-level tokenizer (() when
        unknown: the tiny model then cannot be used)."""
        return ()

    @property
    def has_expert(self) -> bool:
        """Whether `expert_action` has an expert to ask."""
        return False

    def expert_action(self, env: gymnasium.Env, observation: str, candidates: Sequence[str]) -> str:
        """The expert's action in `env`'s current state (`observation`, `candidates`)."""
        raise ExpertUnavailableError(f"{type(self).__name__} has no expert policy")


@dataclass(frozen=True)
class PlaygroundSpec(EnvironmentSpec):
    """Playground-Text (`docs/reference/playground-text.md`): `n_objects` per scene, goals from `goal_set`,
    episodes of `max_steps`; `step_latency_ms` adds a sleep per vector step (benchmarks only)."""

    n_objects: int = 6
    goal_set: str = "train"
    max_steps: int = 30
    step_latency_ms: float = 0.0

    def __post_init__(self) -> None:
        from sacglam.envs.playground_text import validate_env_args

        validate_env_args(self.n_objects, self.goal_set, self.max_steps)

    def make(self) -> gymnasium.Env:
        from sacglam.envs.playground_text import PlaygroundText

        return PlaygroundText(n_objects=self.n_objects, goals=self.goal_set, max_steps=self.max_steps)

    def make_vector(self, num_envs: int) -> VectorEnv:
        from sacglam.envs.latency import StepLatency
        from sacglam.envs.vector import PlaygroundTextVector

        vector = PlaygroundTextVector(num_envs, n_objects=self.n_objects, goals=self.goal_set, max_steps=self.max_steps)
        return StepLatency(vector, self.step_latency_ms) if self.step_latency_ms else vector

    def held_out(self) -> EnvironmentSpec | None:
        from sacglam.envs.goals import HELD_OUT_GOALS

        if self.goal_set not in HELD_OUT_GOALS:
            return None
        return PlaygroundSpec(self.n_objects, HELD_OUT_GOALS[self.goal_set], self.max_steps, self.step_latency_ms)

    @property
    def goal_types(self) -> tuple[str, ...]:
        from sacglam.envs.goals import GOAL_TYPES

        return GOAL_TYPES

    def goal_type(self, goal: str) -> str:
        from sacglam.envs.goals import goal_type

        return goal_type(goal)

    def goals(self) -> tuple[str, ...]:
        from sacglam.envs.goals import GOAL_SETS

        return GOAL_SETS[self.goal_set]

    def type_shares(self) -> dict[str, float]:
        from sacglam.envs.goals import goal_type_shares

        return goal_type_shares(self.goal_set)  # cached: the train set has 8,470 goals

    def vocabulary(self) -> tuple[str, ...]:
        from sacglam.envs.vocabulary import prompt_words

        return prompt_words()

    @property
    def has_expert(self) -> bool:
        return True

    def expert_action(self, env: gymnasium.Env, observation: str, candidates: Sequence[str]) -> str:
        from sacglam.envs.expert import ExpertPolicy

        return ExpertPolicy().act([observation], [candidates])[0]


@dataclass(frozen=True)
class BabyAISpec(EnvironmentSpec):
    """BabyAI-Text (`docs/reference/babyai-text.md`) on `level`, missions of `goal_set` (train or test)."""

    level: str = "MixedLocal"
    goal_set: str = "train"
    n_objects: int = 4
    room_size: int = 8
    max_steps: int = 40

    def __post_init__(self) -> None:
        if self.goal_set not in ("train", "test"):
            raise ValueError(f"BabyAI-Text goals must be 'train' or 'test' (held-out missions), got {self.goal_set!r}")
        self.make()  # validates every other argument with BabyAIText's own messages

    def make(self) -> gymnasium.Env:
        from sacglam.envs.babyai import BabyAIText

        return BabyAIText(self.level, self.goal_set, self.n_objects, self.room_size, self.max_steps)

    def held_out(self) -> EnvironmentSpec | None:
        if self.goal_set != "train":
            return None
        return BabyAISpec(self.level, "test", self.n_objects, self.room_size, self.max_steps)

    @property
    def goal_types(self) -> tuple[str, ...]:
        from sacglam.envs.babyai import LEVELS

        return LEVELS[self.level]

    def goal_type(self, goal: str) -> str:
        from sacglam.envs.babyai import goal_type

        return goal_type(goal)

    def goals(self) -> tuple[str, ...]:
        from sacglam.envs.babyai import LEVELS, missions

        return tuple(m.text for m in missions(LEVELS[self.level], self.goal_set))

    def vocabulary(self) -> tuple[str, ...]:
        from sacglam.envs.babyai import ACTIONS, COLORS, OBJECT_TYPES, TASKS

        fixed = "Goal You see carry Action : , nothing a an the wall door open closed locked step steps left right forward and"
        words = fixed.split() + list(COLORS) + list(OBJECT_TYPES) + [w for t in (*TASKS, *ACTIONS) for w in t.split()]
        return tuple(dict.fromkeys(words + [str(n) for n in range(13)]))

    @property
    def has_expert(self) -> bool:
        return True

    def expert_action(self, env: gymnasium.Env, observation: str, candidates: Sequence[str]) -> str:
        return env.unwrapped.expert_action()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TextWorldSpec(EnvironmentSpec):
    """TextWorld games (`docs/reference/textworld.md`): `n_games` per level of a challenge family built
    offline (train seeds, or held-out seeds for goal set `test`), or the games at `game_path`
    (`held_out_game_path` for `test`); `max_steps` per episode. Building the games (once, into
    the cache) happens here, in the process that makes the spec, before any worker needs them."""

    challenge: str = "coin_collector"
    levels: tuple[int, ...] = (2, 3)
    n_games: int = 10
    game_path: str = ""
    held_out_game_path: str = ""
    goal_set: str = "train"
    max_steps: int = 30

    def __post_init__(self) -> None:
        if self.goal_set not in ("train", "test"):
            raise ValueError(f"TextWorld goals must be 'train' or 'test' (the held-out games), got {self.goal_set!r}")
        if self.goal_set == "test" and self.game_path and not self.held_out_game_path:
            raise ValueError(
                "TextWorld games from env.tw_game_path have no held-out twin: set env.tw_held_out_game_path"
            )
        if self.held_out_game_path and not self.game_path:
            raise ValueError(
                "env.tw_held_out_game_path is set without env.tw_game_path: give the train games' path too"
            )
        if self.max_steps < 1:
            raise ValueError(f"env.max_steps must be >= 1, got {self.max_steps}")
        # Checked now, built by `prepare` when a run starts (or at first use): a config whose games a flag
        # replaces (`--env.tw-levels 4` on a file's levels 2, 4 and 6) must not build the file's.
        if self.game_path:
            self.game_files()  # lists the files: a missing path fails here, naming it
        else:
            from sacglam.envs.textworld.games import validate_games

            validate_games(self.challenge, self.levels, self.n_games)

    def game_files(self) -> tuple[str, ...]:
        from sacglam.envs.textworld.games import challenge_games, game_files

        if self.game_path:
            return tuple(
                str(p) for p in game_files(self.held_out_game_path if self.goal_set == "test" else self.game_path)
            )
        held_out = self.goal_set == "test"
        return tuple(str(p) for p in challenge_games(self.challenge, self.levels, self.n_games, held_out))

    def prepare(self) -> None:
        self.game_files()
        if (twin := self.held_out()) is not None:
            twin.prepare()

    def make(self) -> gymnasium.Env:
        from sacglam.envs.textworld import TextWorldEnv

        return TextWorldEnv(self.game_files(), self.max_steps)

    def held_out(self) -> EnvironmentSpec | None:
        if self.goal_set == "test" or (self.game_path and not self.held_out_game_path):
            return None
        return replace(self, goal_set="test")

    def holds_out_goals(self) -> bool:
        return False  # held-out games, whose goal texts the train games share

    def vocabulary(self) -> tuple[str, ...]:
        """The words random play meets in the train and held-out games, and every entity name."""
        from sacglam.envs.words import collect_words, words_of

        words: list[str] = []
        for spec in (self, self.held_out()):
            if spec is None:
                continue
            env = spec.make()
            games = len(env.games)  # type: ignore[attr-defined]
            names = [name for i in range(games) for name in sorted(env.game(i).entities)]  # type: ignore[attr-defined]
            env.close()
            words += collect_words(spec.make, steps=min(2_000, 100 * games))  # about 10 episodes a game
            words += words_of(names)
        return tuple(dict.fromkeys(words))

    @property
    def has_expert(self) -> bool:
        """TextWorld's walkthrough, which its Inform7 games have (PDDL games: not asked for)."""
        return not any(path.endswith(".tw-pddl") for path in self.game_files())

    def expert_action(self, env: gymnasium.Env, observation: str, candidates: Sequence[str]) -> str:
        return env.unwrapped.expert_action()  # type: ignore[attr-defined]


VOCABULARY_CHECK_STEPS = 500  # random-play steps that check an environment's own vocabulary list (per goal set)

_ENTRY = re.compile(r"^[\w.]+:[\w.-]+$")  # `module:Class`, or `module:Id-v0` (the import registers the id)


class EnvironmentNameError(UserInputError, ValueError):
    """`env.name` names no environment this process can import or make."""


class EnvironmentArgumentsError(UserInputError, ValueError):
    """The environment refused the keyword arguments it was given (`env.kwargs`, `env.held_out_kwargs`)."""


def _shell_word(code: str) -> str:
    """`code` quoted for a shell, readably: in double quotes when nothing in it is special there
    (Python's reprs use single quotes), else as `shlex.quote` does."""
    return f'"{code}"' if not set(code) & set('"$`\\!') else shlex.quote(code)


def _import_failure(module_name: str, error: ImportError) -> str:
    """What went wrong importing `module_name`, and the fix: the module (or its package) is not
    found from here; a module it imports is not installed; or its import failed otherwise."""
    missing = error.name if isinstance(error, ModuleNotFoundError) else None
    if missing and (missing == module_name or module_name.startswith(missing + ".")):
        beside = _modules_beside(missing) if missing == module_name else ""
        return (
            f"cannot import module {module_name!r} ({error}){beside}; run from the folder that holds it, or add "
            "that folder to PYTHONPATH"
        )
    if missing:
        return f"module {module_name!r} imports {missing!r}, which is not installed ({error}): install it here"
    return f"importing module {module_name!r} failed ({type(error).__name__}: {' '.join(str(error).split())})"


def _attribute(env: gymnasium.Env, name: str) -> Any:
    """`env`'s attribute `name`, found on the environment or on any wrapper around it (a
    `module:function` entry may return the environment in wrappers of its own), or None."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def _raised_at(error: BaseException) -> str:
    """`", at its_module.py:12"`: where in the environment's code `error` was raised ("" if not there)."""
    frame = raised_in_user_code(error)
    return f", at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""


def _is_env_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, gymnasium.Env)


def _has_class(module_name: str, name: str) -> bool:
    """Whether `module_name` imports (from here too) and has a gymnasium.Env class `name`."""
    try:
        return _is_env_class(getattr(_import_from_here(module_name), name, None))
    except Exception:  # any failure: no suggestion
        return False


def _modules_beside(missing: str) -> str:
    """When `pkg.modul` is missing but `pkg` imports: "; package 'pkg' has: a, b" (a misspelling
    shows itself); else ""."""
    package_name, dot, _ = missing.rpartition(".")
    if not dot:
        return ""
    try:
        package = importlib.import_module(package_name)
    except ImportError:
        return ""
    names = sorted(m.name for m in pkgutil.iter_modules(getattr(package, "__path__", [])))
    return f"; package {package_name!r} has {', '.join(names) if names else 'no modules'}"


def _import_from_here(module_name: str):
    """Import `module_name`; failing that, import it from the working directory, as `python -m`
    would (the `sacglam` command does not put it on sys.path), and put the directory on PYTHONPATH
    too, so the processes a run starts (Ray workers, spawned runs) import it the same way."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        here = os.getcwd()
        if here in sys.path or not error.name or module_name.split(".")[0] != error.name.split(".")[0]:
            raise
        sys.path.insert(0, here)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            sys.path.remove(here)
            raise  # what is missing from here (`pkg.modul`, or what the module imports) is the error to show
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        return module


@dataclass(frozen=True)
class GymnasiumSpec(EnvironmentSpec):
    """Any protocol environment: `entry` is a gymnasium id (`"CartText-v0"`, `"pkg.module:Id-v0"`)
    or `module:Class`; `kwargs` go to it. With `held_out_kwargs`, goal set `test` is the held-out
    twin: the same entry with those keyword arguments on top of `kwargs`."""

    entry: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    goal_set: str = "train"
    held_out_kwargs: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if not self.entry:
            raise ValueError("env.name is empty: give playground-text, babyai-text, a gymnasium id or 'module:Class'")
        if self.goal_set not in ("train", "test"):
            raise ValueError(f"env.goals must be 'train' or 'test' (its held-out twin), got {self.goal_set!r}")
        if self.goal_set == "test" and self.held_out_kwargs is None:
            raise ValueError(f"env {self.entry!r} has no held-out twin: set env.held_out_kwargs to use goals='test'")
        self.make().close()  # fails now, with the entry's own message, rather than inside a worker

    def make(self) -> gymnasium.Env:
        """The environment, its calls checked against the protocol as a run makes them
        (`ProtocolGuard`). Raises `EnvironmentNameError` or `EnvironmentArgumentsError` (one line)
        when it cannot be made."""
        kwargs = {**self.kwargs, **(self.held_out_kwargs or {})} if self.goal_set == "test" else dict(self.kwargs)
        module, factory, rerun = self._factory()
        try:
            env = factory(**kwargs)
        except gymnasium.error.Error as error:  # from gymnasium.make: no such id, or what it needs is missing
            raise self._not_made(module, error) from error
        except Exception as error:  # the arguments do not fit it, or its own code failed
            if isinstance(error, UserInputError):
                raise
            given = "env.kwargs updated by env.held_out_kwargs" if self.goal_set == "test" else "env.kwargs"
            arguments = f" with {given}, {kwargs!r}," if kwargs else ""
            try:  # the call as Python, when the arguments are literals Python reads back
                literal = ast.literal_eval(repr(kwargs)) == kwargs
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                literal = False
            rerun = rerun.replace("KWARGS", repr(kwargs))
            how = f"; its traceback: python -c {_shell_word(rerun)}" if literal else ""
            raise EnvironmentArgumentsError(
                f"env.name {self.entry!r}: constructing it{arguments} failed "
                f"({type(error).__name__}: {' '.join(str(error).split())}{_raised_at(error)}){how}"
            ) from error
        if not isinstance(env, gymnasium.Env):  # a factory function's result
            raise EnvironmentNameError(
                f"env.name {self.entry!r} returned a {type(env).__name__}, not a gymnasium.Env: name a gymnasium.Env "
                "class, a function that returns one, or a registered environment id"
            )
        return ProtocolGuard(env)

    def _factory(self) -> tuple[Any, Any, str]:
        """(the module `module:Class` names, or None; what makes the environment from keyword
        arguments; the Python line that calls it with KWARGS, for the error of arguments it refuses)."""
        registered = functools.partial(gymnasium.make, self.entry)  # with its registered wrappers (time limit, ...)
        rerun = f"import gymnasium; gymnasium.make({self.entry!r}, **KWARGS)"
        if self.entry in gymnasium.registry or "/" in self.entry or not _ENTRY.match(self.entry):
            return None, registered, rerun
        module_name, _, name = self.entry.partition(":")
        try:
            module = _import_from_here(module_name)
        except ImportError as error:
            raise EnvironmentNameError(f"env.name {self.entry!r}: {_import_failure(module_name, error)}") from error
        target = getattr(module, name, None)
        if _is_env_class(target) or (callable(target) and not isinstance(target, type)):  # a class, or a factory
            return module, target, f"import {module_name}; {module_name}.{name}(**KWARGS)"
        if target is not None and self.entry not in gymnasium.registry:
            raise EnvironmentNameError(
                f"env.name {self.entry!r}: {module_name}.{name} is "
                f"{'a class but not a gymnasium.Env subclass' if isinstance(target, type) else f'a {type(target).__name__}, not callable'}: name a "
                "gymnasium.Env class, a function that returns one, or a registered environment id"
            )
        return module, registered, rerun  # `module:RegisteredId`

    def _not_made(self, module: Any, error: gymnasium.error.Error) -> EnvironmentNameError:
        # gymnasium's own "not found" text suggests look-alike ids of its registry (`Hopper`): noise here
        not_found = isinstance(error, (gymnasium.error.UnregisteredEnv, gymnasium.error.NamespaceNotFound))
        why = "" if not_found else f" ({' '.join(str(error).split())})"
        if module is None:
            module_name, dot, name = self.entry.rpartition(".")
            as_class = ""
            if dot and not_found and re.fullmatch(r"\w+", name) and _has_class(module_name, name):
                as_class = f"; a class is named module:Class: {module_name}:{name}"
            return EnvironmentNameError(
                f"env.name {self.entry!r}: gymnasium cannot make this environment id{why or ' (not registered here)'}"
                f"{as_class}"
            )
        classes = sorted(  # its own and those it imports (a package's re-exports), not gymnasium's
            n for n, v in vars(module).items() if _is_env_class(v) and not v.__module__.startswith("gymnasium")
        )
        module_name, _, name = self.entry.partition(":")
        return EnvironmentNameError(
            f"env.name {self.entry!r}: module {module_name!r} has no gymnasium.Env class {name!r} "
            f"({'its classes: ' + ', '.join(classes) if classes else 'it defines none'}), and it registers "
            f"no such environment id{why}"
        )

    def held_out(self) -> EnvironmentSpec | None:
        if self.held_out_kwargs is None or self.goal_set == "test":
            return None
        return GymnasiumSpec(self.entry, self.kwargs, "test", self.held_out_kwargs)

    def prepare(self) -> None:
        """Before a run or an evaluation: the environment and its held-out twin construct with
        their arguments and answer a first `reset` as the protocol says (one line if not)."""
        for spec in (self, self.held_out()):
            if spec is not None:
                env = spec.make()
                try:
                    env.reset(seed=0)  # the guard checks it against the protocol
                finally:
                    env.close()

    def holds_out_goals(self) -> bool:
        """True unless the environment says otherwise with an attribute `holds_out_goals = False`
        (its held-out twin holds out maps or levels, say, not goals)."""
        env = self.make()
        declared = _attribute(env, "holds_out_goals")
        env.close()
        return declared is not False

    @property
    def has_expert(self) -> bool:
        """An environment with an `expert_action()` method (no arguments: the expert's next action)."""
        env = self.make()
        found = callable(_attribute(env, "expert_action"))
        env.close()
        return found

    def expert_action(self, env: gymnasium.Env, observation: str, candidates: Sequence[str]) -> str:
        expert = _attribute(env, "expert_action")
        if not callable(expert):
            raise ExpertUnavailableError(
                f"env {self.entry!r} has no expert: give it an expert_action() method that returns the expert's next "
                "action (docs/reference/environment-protocol.md)"
            )
        return expert()

    def vocabulary(self) -> tuple[str, ...]:
        """The words random play meets in the environment and in its held-out twin
        (`sacglam.envs.words`), after those of its own `vocabulary` attribute when it has one: a
        list that misses words the texts use (punctuation, a candidate) would make each of them the
        unknown token, so the ones random play finds are added, with a note naming them."""
        from sacglam.envs.words import collect_words

        env = self.make()
        words = tuple(_attribute(env, "vocabulary") or ())
        name = type(env.unwrapped).__name__
        env.close()
        steps = VOCABULARY_CHECK_STEPS if words else 2_000  # a listed vocabulary is checked, not collected
        twin = self.held_out()
        collected = collect_words(self.make, steps) + (collect_words(twin.make, steps) if twin is not None else ())
        listed = set(words)
        missing = [w for w in dict.fromkeys(collected) if w not in listed]
        if words and missing:
            shown = ", ".join(repr(w) for w in missing[:12]) + (", ..." if len(missing) > 12 else "")
            print(
                f"note: {name}.vocabulary lacks {len(missing)} word(s) that {steps} steps of random play met ({shown}); "
                "they are added to the tiny model's vocabulary (list them to silence this)"
            )
        return tuple(dict.fromkeys(words + tuple(missing)))
