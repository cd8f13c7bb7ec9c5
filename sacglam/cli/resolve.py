"""The one resolver of the `sacglam` command line: a subcommand's flags, a run config file
(`--config FILE`) and a run's saved config (`train --resume DIR`, `evaluate --run DIR`) become its
config (`resolve`), or fail in one line.

tyro parses the flags over a default instance holding what the file and the run give: the parser
itself puts the flags over them. It cannot say whether a flag was given, which the rules need
(`--algo` and `--env.name` choose the defaults a file is filled in over; a flag at its default
still overrides a file): `read_flags` reads that from the arguments, and `_wide` whether help is
asked for. Nothing else in the command line reads them. The rules (docs/guides/configs.md), one row each
in tests/test_cli_resolve.py:
- a mapping (`--env.kwargs`) is set in a file, never by a flag;
- an `--env.*` flag, or a setting of FILE's env block, that the environment the config ends up
  with never reads is refused (the block's are not checked when a flag names another environment);
- `train`: the flags over FILE, `--algo` beside it read as FILE's `algo:` where FILE's blocks fit
  that method. Without FILE, `--resume DIR` starts from DIR's config (an `--output-dir`
  elsewhere is refused), and `--algo sac|ppo` or an `--env.name` other than Playground-Text get
  the defaults a file naming them gets. Defaults worked out from the model and the environment
  (`_WORKED_OUT`) are worked out again for the final ones unless FILE or a flag sets them;
- an `--env.name` other than Playground-Text gets the goal set `train` for a `simple-*` one (only
  Playground-Text has those), unless `--env.goals` is given;
- `evaluate`: FILE is a run config (its environment, its agent without a critic, its seed) or an
  evaluation's settings. With `--run DIR`: DIR's environment, changed by FILE's env block (which
  must exist; one naming another environment replaces it) and `--env.*`; a flag picking policies,
  variants or an agent is refused; `--episodes` and `--output` are kept as given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tyro

from sacglam.cli.usage import UsageError, one_line_errors
from sacglam.config import (
    EnvConfig,
    EvalConfig,
    TrainConfig,
    env_settings_read_by,
    not_read_because,
    unread_env_setting,
)
from sacglam.config_io import ConfigError, field_values, from_dict, yaml_config_mapping

Config = TrainConfig | EvalConfig


@dataclass(frozen=True)
class Flag:
    """A flag as typed, up to any `=` (`--env.max_steps`); the setting it gives, dotted and with
    underscores (`env.max_steps`; `--no-progress`: `progress`); the value after it, if any."""

    typed: str
    key: str
    value: str | None


@dataclass(frozen=True)
class Flags:
    """A subcommand's arguments for tyro (without `--config FILE`: no field reads it) and every
    flag among them, in order."""

    args: tuple[str, ...]
    named: tuple[Flag, ...]

    def given(self, key: str) -> list[Flag]:
        """The flags that set `key` or a setting inside it (`env`: every `--env.*`)."""
        return [f for f in self.named if f.key == key or f.key.startswith(f"{key}.")]

    def value(self, key: str) -> str | None:
        """The value of the last flag that sets `key` (None: none does, or it has none)."""
        return next((f.value for f in reversed(self.named) if f.key == key), None)


def read_flags(args: Sequence[str]) -> Flags:
    """The flags among `args`. A value is the flag's `=VALUE`, or the argument after it unless that
    is a flag; a negation (`--sac.no-her`) names its setting (no setting's name starts with `no_`)."""
    named, dropped = [], set()
    for at, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        typed, eq, value = arg.partition("=")
        follows = not eq and at + 1 < len(args) and not args[at + 1].startswith("--")
        *blocks, name = typed[2:].replace("-", "_").split(".")
        key = ".".join([*blocks, name.removeprefix("no_")])
        named.append(Flag(typed, key, value if eq else args[at + 1] if follows else None))
        if key == "config":
            dropped |= {at, at + 1} if follows else {at}
    return Flags(tuple(a for at, a in enumerate(args) if at not in dropped), tuple(named))


def parse(args: list[str], subcommands: Mapping[str, type]) -> Any:
    """`sacglam <command> [--config FILE.yaml] [--field value ...]`: the config of `command`, one
    of `subcommands`, each named with the dataclass it parses into."""
    if not args or args[0] not in subcommands:
        cli = tyro.extras.subcommand_cli_from_dict
        return one_line_errors("sacglam", cli, dict(subcommands), prog="sacglam", args=args, wide=_wide(args))
    command, cls = args[0], subcommands[args[0]]
    if cls not in (TrainConfig, EvalConfig):
        return _parse(command, cls, None, args[1:])
    flags = read_flags(args[1:])
    _refuse_mapping_flags(cls, flags)
    if flags.given("config") and not flags.value("config"):
        raise UsageError("--config needs a YAML file, e.g. --config tune_configs/runs/cpu_simple_sac_her.yaml")
    file = yaml_config_mapping(cls, path) if (path := flags.value("config")) else None
    if cls is EvalConfig:
        from sacglam.export import run_config_of

        return resolve(command, flags, file, run_config_of(directory) if (directory := flags.value("run")) else None)
    _refuse_output_dir_on_resume(flags)
    return resolve(command, flags, file, _resumed(flags) if flags.given("resume") and file is None else None)


def resumed_config(args: Sequence[str]) -> TrainConfig:
    """`train --resume DIR [flags]` without `--config`, before the flags: DIR's saved config."""
    return _resumed(read_flags(args))


def resolve(command: str, flags: Flags, file: dict[str, Any] | None = None, run: TrainConfig | None = None) -> Config:
    """The config of `train` or `evaluate` (`command`) from its `flags`, FILE's mapping (`file`)
    and the run it resumes or evaluates (`run`; None where DIR holds none: the evaluation says
    why), by the rules of the module's docstring."""
    path = flags.value("config") or ""
    block = file.get("env") if file is not None and isinstance(file.get("env"), dict) else None
    _refuse_unread_env_settings(flags, block, run, path)
    if command == "evaluate":
        parsed = _parse(command, EvalConfig, _evaluation_default(flags, file, block, run, path), flags.args)
        return _evaluation_of_run_dir(parsed, flags) if parsed.run is not None else parsed
    mapping = file  # the run config the defaults are built from (None: the resumed run's own, or none)
    if mapping is None and run is None:
        mapping = _named(flags) or None
    default = run if mapping is None else _training_default(flags, mapping, path)
    goals = _goal_set_flags(flags, default.env if default is not None else TrainConfig.env)
    parsed = _parse(command, TrainConfig, default, [*flags.args, *goals])
    if mapping is None:
        return parsed
    return parsed.resolved_again(**{arg: not (_sets(mapping, key) or flags.given(key)) for arg, key in _WORKED_OUT})


_WORKED_OUT = (  # `TrainConfig.resolved_again`'s arguments, and the setting each works out again
    ("warm_start_steps", "warm_start_steps"),
    ("vocabulary", "agent.tiny_vocabulary"),
    ("lora_r", "agent.lora_r"),
    ("end_of_action", "agent.end_of_action"),
    ("critic_input_norm", "agent.critic_input_norm"),
)


def _parse(command: str, cls: type, default: Any, args: Sequence[str]) -> Any:
    """tyro's parse of `args` into `cls` over `default`, a rejection in one line."""
    prog, description = f"sacglam {command}", _DESCRIPTIONS.get(cls)
    return one_line_errors(
        prog, tyro.cli, cls, default=default, args=list(args), prog=prog, description=description, wide=_wide(args)
    )


_DESCRIPTIONS = {  # what `--help` says above the options: the class's docstring and the flags tyro does not list
    TrainConfig: (
        f"{inspect.cleandoc(TrainConfig.__doc__ or '')}\n\n--config FILE.yaml: a run config (tune_configs/runs/, docs/guides/configs.md) gives the "
        "defaults; the flags below override it. --resume DIR alone continues a run with its own config."
    ),
    EvalConfig: (
        f"{inspect.cleandoc(EvalConfig.__doc__ or '')}\n\n--config FILE.yaml: a run config whose environment (and agent) to evaluate; "
        "with --run DIR, its env block only, which changes the run's environment unless it names another (the agent "
        "is the run's); the flags below override it."
    ),
}


def _wide(args: Sequence[str]) -> bool:
    """Whether tyro's output is read back, drawn wide: not where help is asked for (it is shown)."""
    return not any(a in ("-h", "--help") for a in args)


def _resumed(flags: Flags) -> TrainConfig:
    """The saved config of the run `--resume DIR` names, resuming DIR."""
    from sacglam.runtime.saved_config import saved_run_config

    if not (directory := flags.value("resume")):
        raise UsageError("--resume needs the run directory to continue, e.g. --resume runs/demo")
    data, saved = saved_run_config(directory, "--resume takes a directory written by `sacglam train`")
    return from_dict(TrainConfig, {**data, "resume": directory}, where=saved)


_UNRESOLVED = "<unresolved>"  # a placeholder vocabulary, replaced before the config is used
_FLAGS = "the command line"  # where a config named by flags alone comes from, for `_without_location`


def _training_default(flags: Flags, mapping: dict[str, Any], path: str) -> TrainConfig:
    """`train`'s default instance from the run config `mapping` (FILE's, else what the flags name),
    `--algo` read as its `algo:` where its blocks fit that method (where they do not, the flags
    given with it may: `--agent.critic value`; tyro says if not)."""
    if (flags.given("env") or flags.given("agent.model")) and not _sets(mapping, "agent.tiny_vocabulary"):
        # the words of an environment or model the flags replace would be collected (random play:
        # seconds to a minute) for nothing: `resolve` has the final one's collected, once
        agent = mapping["agent"] if isinstance(mapping.get("agent"), dict) else {}
        mapping = {**mapping, "agent": {**agent, "tiny_vocabulary": [_UNRESOLVED]}}
    try:
        if (algo := flags.value("algo")) not in (None, mapping.get("algo")):
            with contextlib.suppress(ConfigError):
                return from_dict(TrainConfig, {**mapping, "algo": algo}, where=path or _FLAGS)
        return from_dict(TrainConfig, mapping, where=path or _FLAGS)
    except ConfigError as error:
        if path:
            raise
        raise ConfigError(_without_location(str(error))) from error


def _sets(mapping: dict[str, Any], key: str) -> bool:
    """Whether the run config `mapping` sets `key` (a field, or a block's: `agent.lora_r`)."""
    block, _, name = key.rpartition(".")
    inner = mapping.get(block) if block else mapping
    return isinstance(inner, dict) and name in inner


def _named(flags: Flags) -> dict[str, Any]:
    """The method and environment the flags name where their defaults differ from the default
    run's (`--algo sac` or `ppo`, an `--env.name` other than Playground-Text), as a run config's keys."""
    named: dict[str, Any] = {"algo": algo} if (algo := flags.value("algo")) in ("sac", "ppo") else {}
    if (env := flags.value("env.name")) not in (None, "playground-text"):
        named["env"] = {"name": env}
    return named


def _without_location(message: str) -> str:
    """A config error about flags, without the location a config file's error gives ("<file>:env:
    ..."): the user typed the flag, and a message that names the setting (`env.name 'x': ...`)
    says the rest; one that does not keeps its block (`env: ...`)."""
    rest = message.removeprefix(f"{_FLAGS}:").removeprefix(f"{_FLAGS}").lstrip(": ")
    block, sep, text = rest.partition(": ")
    return text if sep and text.startswith(f"{block}.") else rest


def _goal_set_flags(flags: Flags, env: EnvConfig) -> list[str]:
    """`--env.goals train` where `--env.name` names another environment than Playground-Text, the
    defaults' environment `env` has a simplified-task goal set (`simple-train`: Playground-Text's
    only) and no flag sets the goal set."""
    named = flags.value("env.name") not in (None, "playground-text")
    simple = env.goals.startswith("simple-") and not flags.given("env.goals")
    return ["--env.goals", "train"] if named and simple else []


def _evaluation_default(
    flags: Flags, file: dict[str, Any] | None, block: dict[str, Any] | None, run: TrainConfig | None, path: str
) -> EvalConfig | None:
    """`evaluate`'s default instance. With `--run DIR`: DIR's environment, or FILE's env `block`
    (nothing else in FILE: the agent is the run's) over it, or over the defaults where it names
    another. Without: FILE as a run config or an evaluation's settings. `env_given`: FILE's env or `--env.*`."""
    default = None
    if flags.given("run") and file is not None:
        if block is None:
            raise UsageError(
                f"--config {path} has no env block, and with --run a config gives only the environment to evaluate "
                "on (the agent is the run's): add an env block, or drop --config"
            )
        own = run.env if run is not None and block.get("name", run.env.name) == run.env.name else None
        env = from_dict(EnvConfig, block, where=f"{path}: env", base=field_values(own) if own else None)
        default = EvalConfig(env=env, env_given=True)
    elif flags.given("run") and run is not None:
        default = EvalConfig(env=run.env)
    elif file is not None:
        default = _evaluation_of_run_config(file, path)
    return replace(default or EvalConfig(), env_given=True) if flags.given("env") else default


def _evaluation_of_run_config(file: dict[str, Any], path: str) -> EvalConfig:
    """`evaluate --config FILE`: a run config's environment, agent (without its critic: the
    policies evaluated need none) and seed; a file with no setting only a run has, as it is."""
    run_only = {f.name for f in dataclasses.fields(TrainConfig)} - {f.name for f in dataclasses.fields(EvalConfig)}
    if not run_only & set(file):
        return from_dict(EvalConfig, file, where=path)
    run = from_dict(TrainConfig, file, where=path)
    words = run.agent.tiny_vocabulary if _sets(file, "agent.tiny_vocabulary") else ()
    agent = replace(run.agent, critic="none", tiny_vocabulary=words)
    return EvalConfig(env=run.env, env_given=True, agent=agent, seed=run.seed)


def _evaluation_of_run_dir(cfg: EvalConfig, flags: Flags) -> EvalConfig:
    """`evaluate --run DIR` evaluates DIR's agent, sampled and greedy, next to random play and the
    expert: a flag that picks policies, variants or another agent would be ignored, so it is
    refused; `--episodes` replaces the run's `eval_episodes`, and `--output` is kept as given,
    even at its default path."""
    ignored = [f.typed for f in flags.named if f.key in ("policies", "variants")]
    ignored += [f.typed for f in flags.given("agent")]
    if ignored:
        names = list(dict.fromkeys(ignored))
        raise UsageError(
            f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} not apply with --run: it evaluates the run's "
            "own agent, sampled and greedy, next to random play and the expert; drop the flag, or evaluate "
            "baselines without --run"
        )
    episodes = cfg.episodes if flags.given("episodes") else cfg.run_episodes
    return replace(cfg, run_episodes=episodes, output_given=cfg.output_given or bool(flags.given("output")))


def _refuse_mapping_flags(cls: type, flags: Flags) -> None:
    """A mapping field given as a flag (`--env.kwargs '{...}'`, `--env.kwargs.max-steps 2`): say
    where it goes instead of tyro's bare "Unrecognized options"."""
    for key in (key for key in _mapping_keys(cls) if flags.given(key)):
        parts = key.split(".")
        yaml = "".join(f"{p}: {{" for p in parts) + "..." + "}" * len(parts)
        raise UsageError(
            f"--{key.replace('_', '-')} is a mapping, set in a run config, not on the command line: write "
            f"`{yaml}` in a YAML file and pass --config FILE (other flags still override it)"
        )


def _mapping_keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted keys of `cls`'s mapping fields, nested configs included (`env.kwargs`): the
    command line's parser cannot read a mapping, so the configs hide these from it."""
    keys = []
    for name, hint in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(hint):
            keys += _mapping_keys(typing.cast(type, hint), f"{prefix}{name}.")
        elif any(typing.get_origin(t) is dict for t in (hint, *typing.get_args(hint))):  # `dict[...] | None` too
            keys.append(prefix + name)
    return keys


def _refuse_unread_env_settings(flags: Flags, block: dict[str, Any] | None, run: TrainConfig | None, path: str) -> None:
    """An `--env.*` flag, or a setting of FILE's env `block`, that the environment the config gets
    never reads (`max_steps` for a `module:Class` environment, `level` for Playground-Text) would
    change nothing, silently: refuse it, saying which environments read it and where the
    environment's own settings go. Checked before any config collects the environment's words."""
    own = run.env.name if run is not None else EnvConfig.name  # the environment a block that names none changes
    named_by_block = str(block.get("name", own)) if block is not None else own
    env_name = flags.value("env.name") or named_by_block
    settings, read = {f.name for f in dataclasses.fields(EnvConfig)}, env_settings_read_by(env_name)
    for flag in flags.given("env"):
        name = flag.key.removeprefix("env.")
        if name in settings and name not in read:  # not a setting at all: tyro says so
            because = not_read_because(env_name, name, kwargs_place="a run config's env.kwargs")
            raise UsageError(f"{flag.typed} {because}")
    if block is not None and env_name == named_by_block and (unread := unread_env_setting({**block, "name": env_name})):
        raise UsageError(f"{path}: {unread}")


def _refuse_output_dir_on_resume(flags: Flags) -> None:
    """`--resume DIR` continues the run where it is: an `--output-dir` elsewhere would be ignored."""
    resumed, output = flags.value("resume"), flags.value("output_dir")
    if resumed is not None and output is not None and not _same_location(resumed, output):
        raise UsageError(
            f"--resume {resumed} continues the run in its own directory, so --output-dir {output} would not be used: "
            "leave --output-dir out (to continue it elsewhere, copy the run directory there and resume the copy)"
        )


def _same_location(a: str, b: str) -> bool:
    """Whether two run locations name the same directory (local paths compared resolved)."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
