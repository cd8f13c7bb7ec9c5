"""A run's output directory (a local path or a URI): created (or refused) before anything runs,
with the run's config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict

from sacglam.config import TrainConfig, json_values
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


# What `sacglam train` writes in a run directory (and `evaluate --run` beside it). A fresh run
# starts in a folder holding none of these, or an earlier attempt's (its config.json a run's,
# stopped before its first checkpoint); it writes beside anything else there (a log of the
# command's output, a `.gitkeep`), never over a file it did not write.
RUN_ENTRIES = frozenset(
    {
        "config.json",
        "metrics.jsonl",
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
    """A fresh run's output directory must hold none of the files a run writes, unless they are
    an earlier attempt's (its `config.json` a run's config): a run would overwrite or append to
    the user's `config.json`, `report.md`, `metrics.jsonl`. An empty `checkpoints/` is no file."""
    present = [child.name for child in directory.children() if child.name in RUN_ENTRIES]
    if not present or present == ["checkpoints"] or _holds_run_config(directory / "config.json"):
        return
    raise RunDirectoryError(
        f"{directory} already holds {', '.join(present)}, not written by a run (it has no run's config.json): "
        "a run would overwrite them; choose another --output-dir, or move them (nothing was changed)"
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
            out[f"{prefix}{field.name}"] = json_values(value)
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
