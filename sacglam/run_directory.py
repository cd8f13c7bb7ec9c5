"""A run's output directory (a local path or a URI): created (or refused) before anything runs,
with the run's config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict

from sacglam.config import TrainConfig
from sacglam.errors import UserInputError
from sacglam.runtime.storage import STORAGE_ERRORS, StorageError, StoragePath


class RunDirectoryError(UserInputError, RuntimeError):
    """The output directory does not fit the request (it cannot be created, a fresh run over old
    checkpoints, or a resume without any)."""


class RunAlreadyComplete(RunDirectoryError):
    """`--resume` of a run that ended at its budget, to the same budget: nothing to do. The command
    line says so and exits with status 0 (a job script that resumes until done ends there)."""


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


# What `sacglam train` (and `evaluate --run`, `watch` beside it) writes in a run directory: a
# fresh run may start in a folder holding only these (an earlier attempt that stopped before its
# first checkpoint), never over anything else.
RUN_ENTRIES = frozenset(
    {
        "config.json",
        "metrics.jsonl",
        "metrics.jsonl.tmp",  # a resume's rewrite of the records, cut short
        "metrics.csv",
        "tensorboard",
        "checkpoints",
        "report.md",
        "curves.png",
        "learner.pt",
        "transcripts",
        "evaluation.json",
    }
)


def refuse_foreign_files(directory: StoragePath) -> None:
    """A fresh run's output directory must be new, empty, or an earlier attempt of a run (its
    `config.json`, a run's config, and only what a run writes): anything else is the user's, and
    a run would overwrite or append to it (`config.json`, `report.md`, `metrics.jsonl`)."""
    entries = [child.name for child in directory.children()]
    if not entries:
        return
    foreign = [name for name in entries if name not in RUN_ENTRIES]
    if not foreign and not _holds_run_config(directory / "config.json"):
        foreign = [name for name in entries if name != "checkpoints"]  # a run always writes its config first
    if foreign:
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise RunDirectoryError(
            f"{directory} already holds files that are not a run's ({shown}): a run writes config.json, "
            "metrics and checkpoints there and would overwrite them; choose a new or empty --output-dir "
            "(nothing was changed)"
        )


def _holds_run_config(file: StoragePath) -> bool:
    """Whether `file` is the `config.json` a run wrote (a JSON object with a run's settings)."""
    try:
        data = json.loads(file.read_text())
    except (*STORAGE_ERRORS, ValueError):  # missing, unreadable, not JSON, not UTF-8
        return False
    return isinstance(data, dict) and {"algo", "agent", "env", "total_env_steps"} <= set(data)


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


def _settings(config: object, prefix: str = "") -> dict[str, object]:
    """{"sac.gamma": 0.99, "env.kwargs": {...}, ...}: a config's settings by dotted name, nested
    configs flattened and every other value (a mapping such as `env.kwargs` too) whole, as JSON
    reads it back (tuples as lists)."""
    out: dict[str, object] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            out |= _settings(value, f"{prefix}{field.name}.")
        else:
            out[f"{prefix}{field.name}"] = json.loads(json.dumps(value, default=str))
    return out


def _saved(data: dict, name: str) -> tuple[bool, object]:
    """(whether `data`, a config.json, has the dotted `name`; its value)."""
    for part in name.split("."):
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def changed_settings(cfg: TrainConfig) -> list[str]:
    """A resume's settings that differ from the run's `config.json`, as "name saved -> now" (dotted
    names, in the config's order); a setting the file lacks (a run written before it existed) is
    not listed, nor anything when the run has no config.json."""
    file = StoragePath(cfg.output_dir) / "config.json"
    if not file.is_file():
        return []
    saved = json.loads(file.read_text())
    changed = []
    for name, value in _settings(cfg).items():
        present, before = _saved(saved, name)
        if name.split(".")[0] not in NOT_SETTINGS and present and before != value:
            changed.append(f"{name} {json.dumps(before)} -> {json.dumps(value)}")
    return changed
