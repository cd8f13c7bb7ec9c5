"""A run's output directory (a local path or a URI): created (or refused) before anything runs,
with the run's config."""

from __future__ import annotations

import json
from dataclasses import asdict

from sacglam.config import TrainConfig
from sacglam.errors import UserInputError
from sacglam.runtime.storage import STORAGE_ERRORS, StorageError, StoragePath


class RunDirectoryError(UserInputError, RuntimeError):
    """The output directory does not fit the request (it cannot be created, a fresh run over old
    checkpoints, or a resume without any)."""


def reachable_run_directory(location: object) -> StoragePath:
    """The run directory, checked to be reachable (a URI's bucket, credentials and endpoint)."""
    try:
        directory = StoragePath(str(location))
        directory.exists()
    except StorageError:
        raise
    except STORAGE_ERRORS as error:
        raise RunDirectoryError(
            f"cannot reach the run directory {location} ({' '.join(str(error).split())}): check the path or "
            "URI, its credentials (for s3://, the AWS_* variables) and the endpoint"
        ) from error
    return directory


def create_run_directory(directory: StoragePath) -> None:
    try:
        directory.mkdir()
    except STORAGE_ERRORS as error:
        reason = getattr(error, "strerror", None) or " ".join(str(error).split())
        raise RunDirectoryError(
            f"cannot create the run directory {directory} ({reason}): choose another --output-dir"
        ) from error


def write_run_config(cfg: TrainConfig) -> None:
    """`<output_dir>/config.json`: the whole config, as `--resume` reads it back."""
    (StoragePath(cfg.output_dir) / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))


NOT_SETTINGS = ("resume", "output_dir")  # where the run is, not how it runs


def _flat(data: object, prefix: str = "") -> dict[str, object]:
    """{"sac.gamma": 0.99, ...}: nested mappings flattened to dotted names."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, object] = {}
    for key, value in data.items():
        out |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def changed_settings(cfg: TrainConfig) -> list[str]:
    """A resume's settings that differ from the run's `config.json`, as "name saved -> now" (dotted
    names, sorted); a setting the file lacks (a run written before it existed) is not listed, nor
    anything when the run has no config.json."""
    file = StoragePath(cfg.output_dir) / "config.json"
    if not file.is_file():
        return []
    saved = _flat(json.loads(file.read_text()))
    now = _flat(json.loads(json.dumps(asdict(cfg), default=str)))
    return [
        f"{name} {json.dumps(saved[name])} -> {json.dumps(value)}"
        for name, value in sorted(now.items())
        if name.split(".")[0] not in NOT_SETTINGS and name in saved and saved[name] != value
    ]
