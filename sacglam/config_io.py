"""Loading the config dataclasses from YAML (the run configs in `tune_configs/runs/`), strictly.

Every key must be a field of the dataclass it lands in, every value must have the field's type
(ints are accepted for floats, lists for tuples); the dataclass's own validation then runs. An
error names the file, the key path, what was wrong and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import yaml

from sacglam.errors import UserInputError

T = TypeVar("T")


class ConfigError(UserInputError, ValueError):
    """A config file that does not fit its dataclass."""


# A number in exponent form without a dot (`5e-4`, `1E6`, `-2.5e+3`), which YAML 1.1 leaves a string.
EXPONENT_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


def load_yaml_config(cls: type[T], path: str | Path) -> T:
    """Build `cls` from the YAML mapping in `path`."""
    return from_dict(cls, yaml_config_mapping(cls, path), where=str(Path(path)))


def yaml_config_mapping(cls: type, path: str | Path) -> dict[str, Any]:
    """The mapping of `cls` fields in the YAML file `path`, unchecked; a file that does not exist,
    cannot be read, is not YAML, is an experiment grid or holds no mapping fails in one line."""
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
    if isinstance(data, dict) and "forms" in data and "forms" not in {f.name for f in dataclasses.fields(cls)}:
        raise ConfigError(
            f"{path} is an experiment grid (it has `forms:`), not a run config: run it with `sacglam tune {path}`; "
            "run configs are in tune_configs/runs/"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    return data


def from_dict(cls: type[T], data: Any, where: str = "config", base: dict[str, Any] | None = None) -> T:
    """`cls` from the mapping `data`. What `data` leaves out keeps the default of where it sits:
    `base`'s value when given (the field values a nested block is filled in over: the default its
    parent gives that field, so that a run config's `env: {max_steps: 10}` keeps `TrainConfig.env`'s
    other settings, as `sacglam train --help` shows them, not `EnvConfig()`'s), else the class's
    own. A class may adapt its nested blocks' defaults to `data` with a class method
    `nested_defaults(data, defaults)` returning, per block it adapts, a config instance or the
    field values to fill it in over (`TrainConfig`'s SAC settings follow its `algo`)."""
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
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ConfigError(f"{where}: unknown key {key!r} for {cls.__name__}{hint} Valid keys: {', '.join(fields)}")
    nested, adapted = _nested_defaults(cls, data, base)
    blocks = {key: {} for key in adapted} | data  # a block the class adapted is built even when `data` has none
    values = {key: _convert(hints[key], value, f"{where}:{key}", nested.get(key)) for key, value in blocks.items()}
    try:
        return cls(**({**base, **values} if base is not None else values))
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{where}: {error}") from error


def field_values(instance: Any) -> dict[str, Any]:
    """A dataclass instance's constructor arguments: nested configs stay instances (frozen), a
    mapping or list is copied (a config built from them must not share the default's)."""
    return {
        f.name: copy.deepcopy(value) if isinstance(value := getattr(instance, f.name), (dict, list)) else value
        for f in dataclasses.fields(instance)
        if f.init
    }


def _nested_defaults(
    cls: type, data: dict[str, Any], base: dict[str, Any] | None
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Per field of `cls` whose default is a config (a dataclass instance): the field values its
    block is filled in over (`base`'s value, or the field's default), as the class's
    `nested_defaults` adapts them to `data`; and the fields it adapted."""
    defaults = {}
    for f in dataclasses.fields(cast(Any, cls)):
        if base is not None and f.name in base:
            value = base[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            defaults[f.name] = field_values(value)
    adapt = getattr(cls, "nested_defaults", None)
    adapted = {  # an instance, or the field values to fill a block in over
        name: field_values(value) if dataclasses.is_dataclass(value) else value
        for name, value in (adapt(data, defaults) if adapt is not None else {}).items()
    }
    return defaults | adapted, set(adapted)


def _convert(tp: Any, value: Any, where: str, base: dict[str, Any] | None = None) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(cast(type, tp), value, where, base)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _convert(option, value, where, base)
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
    if tp in (int, float) and isinstance(value, str) and EXPONENT_NUMBER.fullmatch(value):
        # YAML 1.1 (PyYAML) reads `5e-4` and `1e6` as strings, where a flag or YAML 1.2 reads numbers
        number = float(value)
        if tp is float and math.isfinite(number):
            return number
        if math.isfinite(number) and number.is_integer():
            return int(number)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)  # `1.0e6` env steps
    name = getattr(tp, "__name__", str(tp))
    raise ConfigError(f"{where}: expected {name}, got {type(value).__name__} {value!r}")
