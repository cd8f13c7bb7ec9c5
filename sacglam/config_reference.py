"""The reference page of every config key (`docs/reference/config.md`), generated from the
dataclasses of `sacglam.config`: each field's name, type, default and docstring (the same
docstrings `--help` shows).

    python -m sacglam.config_reference            # writes docs/reference/config.md
    python -m sacglam.config_reference --check    # exit status 1 when the page is stale

A test (`tests/test_config_reference.py`) fails when the committed page differs from this output.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

from sacglam import config

PAGE = Path("docs/reference/config.md")
_COMMAND_LINE_ONLY = "set by the command line"


def field_docs(cls: type) -> dict[str, tuple[str, bool]]:
    """Field name -> (its docstring, whether `--help` hides it: run configs only), read from the
    string that follows each field in the class body, as tyro reads them."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out: dict[str, tuple[str, bool]] = {}
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = ""
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                doc = inspect.cleandoc(str(following.value.value))
            out[node.target.id] = (doc, "Suppress" in ast.unparse(node.annotation))
    return out


def type_name(annotation: Any) -> str:
    """A readable type: `int`, `float | None`, `'sac' | 'sac-her' | 'ppo'`, `tuple[int, ...]`."""
    if typing.get_origin(annotation) is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = repr(annotation).replace("typing.", "").replace("pathlib.", "").replace("NoneType", "None")
    return text.replace("|", "\\|")


def value_text(value: Any) -> str:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(value_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def declared(cls: type) -> dict[str, Any]:
    """A dataclass's fields as declared (`None` and `auto` where `__post_init__` fills a value in
    from others: the docstrings say how)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def block(prefix: str, cls: type, values: dict[str, Any], others: dict[str, dict[str, Any]], title: str) -> list[str]:
    """The table of one dataclass's keys under `prefix` (`values` their defaults; `others`, by
    label, other defaults to show where they differ), then the blocks nested in it."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    lines = [f"## `{prefix.rstrip('.')}`" if prefix else f"## {title}", ""]
    lines += [cell(inspect.cleandoc(cls.__doc__ or "")), ""]
    if others:
        lines += ["Defaults in brackets: " + "; ".join(f"{label}'s, where they differ" for label in others) + ".", ""]
    lines += ["| key | type | default | what |", "| --- | --- | --- | --- |"]
    nested = []
    for f in dataclasses.fields(cls):
        doc, suppressed = docs.get(f.name, ("", False))
        if suppressed and _COMMAND_LINE_ONLY in doc:
            continue  # the command line's own bookkeeping, not a setting
        value = values[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            nested.append((key, value, {label: vars_of(other[f.name]) for label, other in others.items()}))
            shown = f"see [`{key}`](#{key.replace('.', '')})"
        else:
            shown = f"`{value_text(value)}`"
            for label, other in others.items():
                if other[f.name] != value:
                    shown += f" ({label}: `{value_text(other[f.name])}`)"
        note = " (run configs only: not a flag)" if suppressed else ""
        lines.append(f"| `{key}` | {type_name(hints[f.name])} | {cell(shown)} | {cell(doc)}{note} |")
    lines.append("")
    for key, value, other in nested if prefix else ():
        lines += block(f"{key}.", type(value), vars_of(value), other, title)
    return lines


def vars_of(instance: Any) -> dict[str, Any]:
    """A dataclass instance's fields, by name."""
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}


def render() -> str:
    """The whole page."""
    train = declared(config.TrainConfig)
    lines = [
        "# Config reference",
        "",
        "<!-- Generated by `python -m sacglam.config_reference` from sacglam/config.py; do not edit. -->",
        "",
        "Every key of a run config (`sacglam train --config RUN.yaml`, and each trial of a `sacglam tune` grid),",
        "with its type, its default in `sacglam train` and what it does. A key is a flag too:",
        "`sac.batch_size` is `--sac.batch-size` (`sacglam train --help` lists them); keys marked *run configs only*",
        "are mappings that only YAML can give. A default of `None` or `'auto'` is decided when the run starts,",
        "from other settings, as its description says. Naming `algo: sac` or `algo: ppo`, or an environment other",
        "than Playground-Text, gives some blocks other defaults (`TrainConfig.nested_defaults`): the `sac` block",
        "shows SAC-GLAM's (no relabeling) in brackets where they differ, and the `env` block `EnvConfig`'s own,",
        "which every other environment starts from. How run configs and grids are written:",
        "[configs and Tune grids](../guides/configs.md).",
        "",
        "Contents: [`sacglam train`](#sacglam-train), [`env`](#env), [`agent`](#agent), [`sac`](#sac),",
        "[`ppo`](#ppo), [`pipeline`](#pipeline), [`pipeline.resources`](#pipelineresources),",
        "[`goal_sampler`](#goal_sampler), [`sacglam evaluate`](#sacglam-evaluate).",
        "",
    ]
    lines += block("", config.TrainConfig, train, {}, "sacglam train")
    for name in ("env", "agent", "sac", "ppo", "pipeline", "goal_sampler"):
        others: dict[str, dict[str, Any]] = {}
        if name == "sac":
            others = {"algo sac": vars_of(config.SACConfig())}
        if name == "env":
            others = {"EnvConfig()": vars_of(config.EnvConfig())}
        lines += block(f"{name}.", type(train[name]), vars_of(train[name]), others, name)
    # `sacglam evaluate`'s env and agent are the classes above: its table points to them
    lines += block("", config.EvalConfig, declared(config.EvalConfig), {}, "sacglam evaluate")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="Write docs/reference/config.md from sacglam/config.py.")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is not what this writes")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args()
    text = render()
    if args.check:
        stale = not args.output.exists() or args.output.read_text() != text
        if stale:
            print(f"{args.output} is stale: run python -m sacglam.config_reference", file=sys.stderr)
        sys.exit(1 if stale else 0)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
