"""A run's output directory: created (or refused) before anything runs, with the run's config."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from sacglam.config import TrainConfig
from sacglam.errors import UserInputError


class RunDirectoryError(UserInputError, RuntimeError):
    """The output directory does not fit the request (it cannot be created, a fresh run over old
    checkpoints, or a resume without any)."""


def create_run_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirectoryError(
            f"cannot create the run directory {directory} ({error.strerror}): choose another --output-dir"
        ) from error


def write_run_config(cfg: TrainConfig) -> None:
    """`<output_dir>/config.json`: the whole config, as `--resume` reads it back."""
    (cfg.output_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
