"""Experiment files (`tune_configs/experiments/<experiment>.yaml`): YAML data that describes a grid of runs.

    description: what the experiment asks
    metric: eval/simple-train/sampled/all      # the headline metric of plots and summaries
    forms:                                     # one or more sizes of the same experiment
      cpu:
        base: ../runs/cpu_simple_sac_her.yaml  # a run config, relative to the experiment file
        set: {total_env_steps: 15000}          # overrides for every trial (nested or dotted keys)
        variants:                              # optional named arms, each with its own overrides
          sac-her: {}                          #   (and optionally its own `base`)
          ppo: {base: ../runs/cpu_simple_ppo.yaml}
        grid:                                  # dotted config keys -> values: the cartesian product
          sac.n_step: [1, 3, 5]
        seeds: [0, 1, 2]                       # the seed axis: the one place a trial's seed is set
        trial: {cpus: 1, gpus: 0, threads: 1}  # resources of one trial (plus its Ray actors, if any)
        max_concurrent: 2
        max_failures: 1
        metric: eval/simple-train/sampled/all  # optional: overrides the file's metric for this form

Every trial's config is built and validated (`sacglam.config_io`) when the file is loaded, so a
typo in a grid key fails before anything runs, naming the file, the trial and the key. A `seed`
in `grid`, `set` or a variant is refused (`seeds:` sets it), as is a grid value given twice.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from sacglam.config import TrainConfig, unread_env_setting
from sacglam.config_io import EXPONENT_NUMBER, ConfigError, from_dict

FORM_KEYS = {"base", "set", "variants", "grid", "seeds", "trial", "max_concurrent", "max_failures", "metric"}
TRIAL_KEYS = {"cpus", "gpus", "threads"}


@dataclass(frozen=True)
class TrialResources:
    cpus: float = 1.0
    gpus: float = 0.0
    threads: int = 1  # torch threads of the trial's process


@dataclass(frozen=True)
class Trial:
    """One run of the grid: a name, its coordinates (variant, grid values, seed) and its config."""

    name: str
    coordinates: dict[str, Any]
    config: dict[str, Any]  # a TrainConfig as nested plain data (validated)

    def train_config(self) -> TrainConfig:
        return from_dict(TrainConfig, self.config, where=self.name)


@dataclass(frozen=True)
class ExperimentForm:
    experiment: str
    form: str
    description: str
    metric: str
    trials: tuple[Trial, ...]
    resources: TrialResources
    max_concurrent: int
    max_failures: int
    grid_keys: tuple[str, ...] = field(default=())


def _set_dotted(target: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{key}: {part!r} is not a section")
    target[parts[-1]] = value


def _apply(target: dict, overrides: dict, where: str) -> None:
    """Deep-merge `overrides` (nested mappings and/or dotted keys) into `target`."""
    if not isinstance(overrides, dict):
        raise ConfigError(f"{where}: expected a mapping of config overrides, got {overrides!r}")
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _apply(target[key], value, f"{where}.{key}")
        else:
            _set_dotted(target, str(key), copy.deepcopy(value))


def _yaml(path: Path, where: str) -> dict:
    if not path.exists():
        raise ConfigError(f"{where}: {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {path} must hold a mapping")
    return data


def _number(value: Any) -> Any:
    """`value`, or the number a string in exponent form is (as a numeric setting reads it)."""
    return float(value) if isinstance(value, str) and EXPONENT_NUMBER.fullmatch(value) else value


def _env_keys(*overrides: Any) -> set[str]:
    """The `env` settings that overrides (`grid`, `set`, a variant; nested or dotted keys) give."""
    keys = set()
    for mapping in overrides:
        for key, value in (mapping or {}).items() if isinstance(mapping, dict) else ():
            if key == "env" and isinstance(value, dict):
                keys |= {str(k) for k in value}
            elif str(key).startswith("env."):
                keys.add(str(key).split(".")[1])
    return keys


def _label(value: Any) -> str:
    return str(value).replace("/", "_").replace(" ", "")


def load_experiment(path: str | Path, form: str = "cpu") -> ExperimentForm:
    """The trials of one form of an experiment file, every config validated."""
    path = Path(path)
    data = _yaml(path, str(path))
    forms = data.get("forms")
    if forms is None and {f.name for f in fields(TrainConfig)} & set(data):
        raise ConfigError(
            f"{path} is a run config, not an experiment grid (it has no `forms:`): train it with "
            f"`sacglam train --config {path}`; experiment grids are in tune_configs/experiments/"
        )
    if not isinstance(forms, dict) or not forms:
        raise ConfigError(f"{path}: needs `forms:` with at least one form (e.g. cpu, gpu)")
    if form not in forms:
        raise ConfigError(f"{path}: no form {form!r}; this file has {', '.join(forms)} (choose with --form)")
    spec = forms[form]
    where = f"{path}:forms.{form}"
    unknown = set(spec) - FORM_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(FORM_KEYS)}")
    if "base" not in spec:
        raise ConfigError(f"{where}: needs `base:`, a training config file (relative to {path.parent})")
    trial_spec = spec.get("trial", {})
    if set(trial_spec) - TRIAL_KEYS:
        raise ConfigError(
            f"{where}.trial: unknown keys {sorted(set(trial_spec) - TRIAL_KEYS)}; allowed: {sorted(TRIAL_KEYS)}"
        )
    variants = spec.get("variants") or {"default": {}}
    if not isinstance(variants, dict):
        raise ConfigError(f"{where}.variants: expected a mapping of named variants, got {variants!r}")
    grid = spec.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{where}.grid: expected a mapping of dotted keys to lists of values, got {grid!r}")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.grid.{key}: expected a non-empty list of values, got {values!r}")
        same = [_number(v) for v in values]  # `1e-2` (a string to PyYAML) is the setting 0.01
        repeated = [v for i, v in enumerate(values) if same[i] in same[:i]]
        if repeated:
            raise ConfigError(f"{where}.grid.{key}: {repeated[0]!r} is given twice; each value makes its own trials")
    for place, overrides in [("grid", grid), ("set", spec.get("set") or {})] + [
        (f"variants.{name}", v or {}) for name, v in variants.items()
    ]:
        if isinstance(overrides, dict) and "seed" in overrides:
            raise ConfigError(
                f"{where}.{place}: `seed` is set by the form's `seeds:` list (e.g. seeds: [0, 1, 2]), which "
                "makes one trial per seed; move it there"
            )
    seeds = spec.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        raise ConfigError(f"{where}.seeds: expected a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"{where}.seeds: {seeds!r} gives a seed twice")
    limits = {}
    for key, default, least in (("max_concurrent", 1, 1), ("max_failures", 1, 0)):
        value = spec.get(key, default)
        if type(value) is not int or value < least:
            raise ConfigError(f"{where}.{key}: expected an integer >= {least}, got {value!r}")
        limits[key] = value
    # a grid key's last part names it in trial names, unless two keys share it (sac.gamma, ppo.gamma)
    last_parts = [key.split(".")[-1] for key in grid]
    labels = [part if last_parts.count(part) == 1 else key for key, part in zip(grid, last_parts)]
    trials = []
    for variant, variant_spec in variants.items():
        variant_spec = dict(variant_spec or {})
        base_where = f"{where}.variants.{variant}.base" if "base" in variant_spec else f"{where}.base"
        base_file = path.parent / variant_spec.pop("base", spec["base"])
        for values in itertools.product(*grid.values()):
            for seed in seeds:
                config = _yaml(base_file, base_where)
                _apply(config, spec.get("set", {}), f"{where}.set")
                _apply(config, variant_spec, f"{where}.variants.{variant}")
                coordinates: dict[str, Any] = {"variant": variant}
                for key, value in zip(grid, values):
                    _set_dotted(config, key, copy.deepcopy(value))
                    coordinates[key] = value
                config["seed"] = seed
                coordinates["seed"] = seed
                parts = [variant] if len(variants) > 1 or variant != "default" else []
                parts += [f"{label}={_label(v)}" for label, v in zip(labels, values)] + [f"seed={seed}"]
                name = ",".join(parts)
                trial = Trial(name=name, coordinates=coordinates, config=config)
                try:
                    trial.train_config()  # validate now: a bad key fails before anything runs
                except ConfigError as error:
                    raise ConfigError(f"{where}, trial {error.one_line()}") from error
                env: dict[str, Any] = config["env"] if isinstance(config.get("env"), dict) else {}
                given = {k: env[k] for k in _env_keys(grid, spec.get("set"), variant_spec) if k in env}
                if unread := unread_env_setting({**given, "name": env.get("name", "playground-text")}):
                    raise ConfigError(f"{where}, trial {name}: {unread}")  # what the grid sets, not its base
                trials.append(trial)
    return ExperimentForm(
        experiment=path.stem,
        form=form,
        description=str(data.get("description", "")),
        metric=str(spec.get("metric", data.get("metric", ""))),
        trials=tuple(trials),
        resources=TrialResources(**trial_spec),
        max_concurrent=limits["max_concurrent"],
        max_failures=limits["max_failures"],
        grid_keys=tuple(grid),
    )
