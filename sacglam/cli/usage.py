"""Usage errors: arguments that do not fit together, and the parser's rejection of a flag (a box of
several lines on stderr) read back as one line."""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from sacglam.errors import UserInputError


class UsageError(UserInputError):
    """Command-line arguments that do not fit together."""


_BOX = re.compile(r"\x1b\[[0-9;]*m|[╭╮╰╯│┃]")  # terminal colours and box borders


def one_line_errors(command: str, cli: Callable[..., Any], /, *args: Any, wide: bool = True, **kwargs: Any) -> Any:
    """Run a tyro parser; its rejection of a flag (a box of several lines on stderr) becomes one
    `UsageError` line: the box's message, then where the help is. Help and success pass through.
    `wide`: tyro draws at the width of a long line (False where help was asked for: it is shown)."""
    captured = io.StringIO()
    try:
        # the box is read here, not shown: drawn wide, no flag in it wraps
        with contextlib.redirect_stderr(captured), _columns(1000) if wide else contextlib.nullcontext():
            parsed = cli(*args, **kwargs)
        sys.stderr.write(captured.getvalue())  # warnings of a successful parse still reach the user
        return parsed
    except SystemExit as stop:
        if stop.code in (0, None):
            sys.stderr.write(captured.getvalue())
            raise
        # A config's construction that failed on something other than a setting's value (an
        # environment that breaks the protocol, a module that does not import): tyro reports it as
        # a setting it could not parse; the error says what is wrong itself, and `--help` cannot help.
        cause = _user_error_behind(stop)
        if cause is not None:
            raise cause from None
        # The box: a top border with the title, the message (wrapped over rows), a rule, the help.
        rows = [_BOX.sub("", line).strip() for line in captured.getvalue().splitlines()[1:]]
        message: list[str] = []
        for row in rows:
            if _is_rule(row):
                if message:
                    break
                continue  # the rule under the title, where the box is drawn without borders (no terminal)
            message.append(row)
        text = " ".join(" ".join(message).split()) or f"invalid arguments (exit status {stop.code})"
        close = _suggested_flags(rows, text)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UsageError(f"{text}{hint} (`{command} --help` lists every option)") from None


def _is_rule(row: str) -> bool:
    """A horizontal rule of tyro's box: drawn with box characters on a terminal, dashes elsewhere."""
    return bool(row) and set(row) <= set("─━- ")


def _suggested_flags(rows: list[str], message: str) -> list[str]:
    """The flags tyro's box suggests (its "Perhaps you meant:" section: rows of a flag, or a flag
    and its negation, with its metavar, each followed by its help) for the first unrecognised one
    in `message`, closest first, at most two."""
    if "Perhaps you meant:" not in rows:
        return []
    offered = []
    for row in rows[rows.index("Perhaps you meant:") + 1 :]:
        if _is_rule(row):
            break
        if row.startswith("-"):  # a flag's row ("--progress, --no-progress"), not its help
            offered += [flag for flag in re.findall(r"--[\w.-]+", row) if flag not in offered]
    unknown = re.search(r"Unrecognized options: (--[\w.-]+)", message)
    if unknown is None:
        return offered[:2]
    return difflib.get_close_matches(unknown.group(1), offered, n=2, cutoff=0.0)


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """`COLUMNS` set to `width` (the width tyro draws its boxes at) for the block."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def _user_error_behind(error: BaseException) -> UserInputError | None:
    """The `UserInputError` that `error` was raised while handling (its cause, or its context
    unless that was suppressed with `raise ... from None`), followed back; None if there is none."""
    behind: BaseException | None = error
    while behind is not None and not isinstance(behind, UserInputError):
        behind = behind.__cause__ or (None if behind.__suppress_context__ else behind.__context__)
    return behind
