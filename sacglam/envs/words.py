"""The words of an environment's texts, collected by random play: what a tiny model's word-level
tokenizer is built from when the environment does not list its own (`docs/reference/environment-protocol.md`).

Words are split as that tokenizer splits them (`\\w+|[^\\w\\s]+`: runs of letters and digits, runs
of punctuation), so every word collected is one token. A word that random play never meets (a
state it does not reach) becomes the unknown token at training time: an environment whose texts
are rich should list its words in a `vocabulary` attribute instead.
"""

from __future__ import annotations

import contextlib
import random
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import gymnasium

from sacglam.errors import SacglamWarning, UserInputError

WORD = re.compile(r"\w+|[^\w\s]+")  # the pre-tokenizer of sacglam.models.tiny.word_level_tokenizer


def words_of(texts: Iterable[str]) -> list[str]:
    """The words of `texts`, in order of first appearance, without repeats."""
    return list(dict.fromkeys(word for text in texts for word in WORD.findall(text)))


def _texts_of(observation: Any, info: Any) -> list[str]:
    texts = [observation] if isinstance(observation, str) else []
    if isinstance(info, dict):
        texts += [c for c in info.get("candidates") or () if isinstance(c, str)]
        texts += [g for g in [info.get("goal"), *(info.get("achieved_goals") or ())] if isinstance(g, str)]
    return texts


def collect_words(make_env: Callable[[], gymnasium.Env], steps: int = 2_000, seed: int = 0) -> tuple[str, ...]:
    """The words of observations, candidates and goals over `steps` steps of uniformly random play
    in a fresh `make_env()` (episodes reset with seeds `seed`, `seed + 1`, ...). Raises ValueError
    naming the step when the environment fails during play."""
    seen: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as seen:  # said again below, with where they came from
            warnings.simplefilter("always", SacglamWarning)
            words = _play_for_words(make_env, steps, seed)
    except BaseException:
        with contextlib.suppress(Warning):  # a filter that makes warnings errors must not hide the failure
            _warn_again(seen)
        raise
    _warn_again(seen)
    return words


def _warn_again(seen: list[warnings.WarningMessage]) -> None:
    """The warnings random play raised, sacglam's saying where they came from."""
    for warning in seen:
        if issubclass(warning.category, SacglamWarning):
            message = f"in the random play that collects the environment's words: {warning.message}"
            warnings.warn(message, category=warning.category, stacklevel=3)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _play_for_words(make_env: Callable[[], gymnasium.Env], steps: int, seed: int) -> tuple[str, ...]:
    env, rng = make_env(), random.Random(seed)
    texts: list[str] = []
    try:
        episode, step = 0, 0
        observation, info = env.reset(seed=seed)
        texts += _texts_of(observation, info)
        while step < steps:
            candidates = info.get("candidates") if isinstance(info, dict) else None
            if not candidates:
                break  # not a protocol environment: nothing to play
            observation, _, terminated, truncated, info = env.step(rng.choice(list(candidates)))
            step += 1
            texts += _texts_of(observation, info)
            if terminated or truncated:
                episode += 1
                observation, info = env.reset(seed=seed + episode)
                texts += _texts_of(observation, info)
    except Exception as error:
        if isinstance(error, UserInputError):
            raise  # the environment's own one-line message (`ProtocolGuard`), as it is
        raise ValueError(
            f"random play to collect the words of {type(env.unwrapped).__name__} failed at step {step} "
            f"({type(error).__name__}: {error}); check it with sacglam.envs.protocol.check_environment"
        ) from error
    finally:
        env.close()
    return tuple(words_of(texts))
