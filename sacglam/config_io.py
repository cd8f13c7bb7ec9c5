"""Loading the config dataclasses from YAML (the run configs in `tune_configs/runs/`), strictly.

Every key must be a field of the dataclass it lands in, every value must have the field's type
(ints are accepted for floats, lists for tuples); the dataclass's own validation then runs. An
error names the file, the key path, what was wrong and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import yaml

from sacglam.errors import UserInputError

T = TypeVar("T")


class ConfigError(UserInputError, ValueError):
    """A config file that does not fit its dataclass."""


def load_yaml_config(cls: type[T], path: str | Path) -> T:
    """Build `cls` from the YAML mapping in `path`."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as error:
        raise ConfigError(f"cannot read config file {path} ({error.strerror}): give a YAML file") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}") from error
    if isinstance(data, dict) and "forms" in data and "forms" not in {f.name for f in dataclasses.fields(cls)}:  # type: ignore[arg-type]
        raise ConfigError(
            f"{path} is an experiment grid (it has `forms:`), not a run config: run it with `sacglam tune {path}`; "
            "run configs are in tune_configs/runs/"
        )
    return from_dict(cls, data, where=str(path))


def from_dict(cls: type[T], data: Any, where: str = "config") -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    upgrade = getattr(cls, "upgrade", None)  # a config class that renamed keys reads its earlier files
    if upgrade is not None:
        try:
            data = upgrade(data)
        except ValueError as error:
            raise ConfigError(f"{where}: {error}") from error
    fields = {f.name: f for f in dataclasses.fields(cast(Any, cls))}
    hints = get_type_hints(cls)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r} for {cls.__name__}{hint} Valid keys: {', '.join(fields)}")
    values = {key: _convert(hints[key], value, f"{where}:{key}") for key, value in data.items()}
    try:
        return cls(**values)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{where}: {error}") from error


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(cast(type, tp), value, where)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _convert(option, value, where)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {tp}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, get_args(tp)))}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = {a for a in get_args(tp) if a is not Ellipsis}
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{where}: expected a mapping with string keys, got {value!r}")
        return dict(value)
    if tp is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a path string, got {value!r}")
        return Path(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp in (int, bool, str) and type(value) is tp:
        return value
    name = getattr(tp, "__name__", str(tp))
    raise ConfigError(f"{where}: expected {name}, got {type(value).__name__} {value!r}")
