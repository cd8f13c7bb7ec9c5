"""A run's saved config (`<run dir>/config.json`, written by `run_directory.write_run_config`) read
back: the one reader, for `--resume`, `sacglam export`, `evaluate --run` and `watch`."""

from __future__ import annotations

import json

from sacglam.errors import UserInputError
from sacglam.runtime.storage import STORAGE_ERRORS, StoragePath


class SavedConfigError(UserInputError, ValueError):
    """A run directory without a readable config.json."""


def saved_run_config(run_dir: str, fix: str) -> tuple[dict, str]:
    """The config `run_dir` (a path or a URI) was trained with, as a dict, and where it was read
    (for `config_io.from_dict`'s messages). A missing, unreachable or broken file raises
    SavedConfigError in one line that ends with `fix` (what the command needs instead)."""
    saved = StoragePath(run_dir) / "config.json"
    try:
        if not saved.is_file():
            there = StoragePath(run_dir).exists()
            raise SavedConfigError(
                f"{StoragePath(run_dir)} {'has no config.json' if there else 'does not exist'}: {fix}"
            )
        data = json.loads(saved.read_text())
    except (*STORAGE_ERRORS, ValueError) as error:  # ValueError: broken JSON, or bytes that are not UTF-8
        if isinstance(error, UserInputError):
            raise
        raise SavedConfigError(f"cannot read {saved} ({' '.join(str(error).split())}): {fix}") from error
    if not isinstance(data, dict):
        raise SavedConfigError(f"{saved} does not hold a config (a JSON object): {fix}")
    return data, str(saved)
