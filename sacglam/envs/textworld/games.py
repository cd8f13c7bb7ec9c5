"""Where TextWorld games come from: built offline from a challenge family, or read from files.

Spec: `docs/reference/textworld.md`, "Games". `challenge_games` builds games of a TextWorld challenge family
(`coin_collector`, `treasure_hunter`) with TextWorld's own generator and bundled Inform7
compiler, no network, once per (family, level, seed), into the cache (`$SACGLAM_CACHE/textworld`),
where every later run and every process on the node finds them. Train games use seeds 0, 1, ...;
held-out games use seeds from `HELD_OUT_FIRST_SEED` on, and a held-out game identical to a train
game (same world and quest: small levels have few distinct games) is skipped, so the held-out set
never contains a train game. `game_files` reads a game file or a folder of them (ALFWorld's
`.tw-pddl` games, a user's `.z8` games with the `.json` tw-make writes beside each).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from sacglam.cache import cache_root, publish

CHALLENGES = {"coin_collector": "tw-coin_collector", "treasure_hunter": "tw-treasure_hunter"}
LEVELS = {"coin_collector": (1, 300), "treasure_hunter": (1, 30)}  # inclusive ranges TextWorld accepts
HELD_OUT_FIRST_SEED = 1_000_000
GAME_SUFFIXES = (".z8", ".tw-pddl")  # what tw-make writes (with its .json), and ALFWorld's PDDL games
_GAME_FILE = "game.z8"


def validate_challenge(challenge: str, levels: Sequence[int]) -> None:
    """Raises ValueError naming what is wrong with a challenge family and its levels."""
    if challenge not in CHALLENGES:
        raise ValueError(f"unknown TextWorld challenge {challenge!r}; choose one of {', '.join(CHALLENGES)}")
    low, high = LEVELS[challenge]
    if not levels or any(not low <= level <= high for level in levels):
        raise ValueError(f"TextWorld {challenge} levels must be between {low} and {high}, got {list(levels)}")


def validate_games(challenge: str, levels: Sequence[int], n_games: int) -> None:
    """Raises ValueError naming what is wrong with a family, its levels and games per level
    (builds nothing)."""
    validate_challenge(challenge, levels)
    if n_games < 1:
        raise ValueError(f"TextWorld n_games must be >= 1 (games per level), got {n_games}")


def build_game(challenge: str, level: int, seed: int) -> Path:
    """The compiled game of `challenge` at `level` generated with `seed` (built on first use)."""
    validate_challenge(challenge, [level])

    def build(out: Path) -> None:
        import textworld
        import textworld.challenges
        from textworld.generator import compile_game

        options = textworld.GameOptions()
        options.seeds = seed
        options.path = str(out / _GAME_FILE)
        options.file_ext = ".z8"
        options.force_recompile = True
        make_game = textworld.challenges.CHALLENGES[CHALLENGES[challenge]][1]
        compile_game(make_game({"level": level}, options), options)

    target = cache_root() / "textworld" / f"{challenge}-level{level}-seed{seed}"
    return publish(build, target, marker=_GAME_FILE) / _GAME_FILE


def fingerprint(game: Path) -> str:
    """A digest of a built game's world, quests and names (two seeds may generate the same game)."""
    data = json.loads(game.with_suffix(".json").read_text())
    return hashlib.sha256(
        json.dumps([data["world"], data["quests"], data["infos"]], sort_keys=True).encode()
    ).hexdigest()


def challenge_games(challenge: str, levels: Sequence[int], n_games: int, held_out: bool = False) -> tuple[Path, ...]:
    """`n_games` games per level: the train games (seeds 0, 1, ...) or the held-out ones (seeds
    from `HELD_OUT_FIRST_SEED`, skipping any identical to a train game). Raises ValueError when a
    level has fewer distinct held-out games than asked for within 10x as many seeds. Listed once
    per process and cache (a config's spec is made many times; the held-out list reads every
    game's JSON)."""
    validate_games(challenge, levels, n_games)
    return _challenge_games(challenge, tuple(levels), n_games, held_out, cache_root())


@functools.lru_cache(maxsize=32)
def _challenge_games(
    challenge: str, levels: tuple[int, ...], n_games: int, held_out: bool, root: Path
) -> tuple[Path, ...]:
    games: list[Path] = []
    for level in levels:
        train = [build_game(challenge, level, seed) for seed in range(n_games)]
        if not held_out:
            games += train
            continue
        seen = {fingerprint(g) for g in train}
        chosen: list[Path] = []
        for seed in range(HELD_OUT_FIRST_SEED, HELD_OUT_FIRST_SEED + 10 * n_games):
            game = build_game(challenge, level, seed)
            digest = fingerprint(game)
            if digest not in seen:
                seen.add(digest)
                chosen.append(game)
            if len(chosen) == n_games:
                break
        else:
            raise ValueError(
                f"TextWorld {challenge} level {level} has fewer than {n_games} held-out games distinct from its "
                f"{n_games} train games: ask for fewer games (env.tw_games) or a higher level"
            )
        games += chosen
    return tuple(games)


def game_files(path: str) -> tuple[Path, ...]:
    """The games at `path`: one game file, or every game file under a folder (recursively,
    sorted). Raises ValueError when there is none."""
    root = Path(path).expanduser()
    if root.is_file():
        if not root.name.endswith(GAME_SUFFIXES):
            raise ValueError(f"{path!r} is not a TextWorld game file ({', '.join(GAME_SUFFIXES)})")
        return (root,)
    if not root.is_dir():
        raise ValueError(f"TextWorld game path {path!r} does not exist: give a game file or a folder of games")
    found = tuple(sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(GAME_SUFFIXES)))
    if not found:
        raise ValueError(f"no TextWorld game ({', '.join(GAME_SUFFIXES)}) under {path!r}")
    return found
