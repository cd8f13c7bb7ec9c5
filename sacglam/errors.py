"""The one base class of errors a user can fix by changing what they asked for.

Every component raises its own subclass (a config file that does not fit, a model that cannot be
found, a run directory that does not fit the request, a Ray cluster that is too small or cannot be
reached); the command line catches this base class alone and prints the message as one line,
without a traceback. A message says what was wrong and how to fix it. Anything else that escapes
is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
import sys
import warnings


class UserInputError(Exception):
    """An input the user can fix; the message names it and the fix."""

    def one_line(self) -> str:
        """The message on one line: the first line of each part, joined (some wrap library errors).
        Raised in a Ray actor, the error reaches the caller as Ray's `RayTaskError`, an instance of
        this class too whose text is the remote traceback: the message is its `cause`'s.
        The notes added on the way up (`add_note`: what a failed run kept) follow it after "; "."""
        cause = getattr(self, "cause", None)
        if isinstance(cause, UserInputError) and cause is not self:
            line = cause.one_line()
        else:
            line = " ".join(part.strip() for part in str(self).splitlines() if part.strip())
        return with_notes(line, self)


class SacglamWarning(UserWarning):
    """Something legal but likely wrong in what the user gave (an environment's rewards, reports or
    spaces; an earlier setting's name). The command line shows it on one line (`one_line_warnings`)."""


def one_line_warnings() -> None:
    """Show each `SacglamWarning` as `warning: <message>` on one line: Python's default format adds
    the file and line it was raised at and that line's source, which are sacglam's code, not the
    user's. Other warnings keep Python's format. Installed by the command line and by the processes
    that run environments (rollout actors); installing it twice changes nothing."""
    original = warnings.formatwarning
    if getattr(original, "sacglam_one_line", False):
        return

    def formatwarning(message, category, filename, lineno, line=None):
        if issubclass(category, SacglamWarning):
            return f"warning: {' '.join(str(message).split())}\n"
        return original(message, category, filename, lineno, line)

    formatwarning.sacglam_one_line = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning


def with_notes(line: str, error: BaseException) -> str:
    """`line`, then each note added to `error` (`BaseException.add_note`) after "; "."""
    notes = [" ".join(note.split()) for note in getattr(error, "__notes__", ())]
    return "; ".join([line, *(note for note in notes if note and note not in line)])


_RAISED = re.compile(r"^(?:([A-Za-z_][\w.]*)\.)?([A-Za-z_]\w*): (.+)$")  # `[package.module.]Error: message`


def user_error_in_remote_text(text: str) -> str | None:
    """The message of the exception a traceback printed as text ends with, when that exception is
    a `UserInputError`; else None.

    Ray keeps no exception object for an actor that dies in its constructor (its `ActorDiedError`
    carries the remote traceback as text only): this reads the traceback's final exception line,
    finds its class by the name the text gives it among modules this process has imported, and
    returns its message when the class is a `UserInputError`. Only the final line counts: a bug
    raised while a user error was being handled is a bug, and keeps its traceback."""
    final = None
    for line in text.splitlines():
        if line and not line[0].isspace() and (match := _RAISED.match(line.strip())) is not None:
            final = match
    if final is None or final.group(1) is None:
        return None
    module, name, message = final.groups()
    cls = getattr(sys.modules.get(module), name, None)
    return message.strip() if isinstance(cls, type) and issubclass(cls, UserInputError) else None
