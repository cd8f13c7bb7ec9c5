"""The one base class of errors a user can fix by changing what they asked for.

Every component raises its own subclass (a config file that does not fit, a model that cannot be
found, a run directory that does not fit the request, a Ray cluster that is too small or cannot be
reached); the command line catches this base class alone and prints the message as one line,
without a traceback. A message says what was wrong and how to fix it. Anything else that escapes
is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserInputError(Exception):
    """An input the user can fix; the message names it and the fix."""

    def one_line(self) -> str:
        """The message on one line: the first line of each part, joined (some wrap library errors)."""
        return " ".join(line.strip() for line in str(self).splitlines() if line.strip())
