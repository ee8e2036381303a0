"""The one exception type orion's library code raises for problems a user can act on.

The CLI catches :class:`OrionError` in one place and prints ``error: <message>`` plus the hint,
so library code never prints and never exits. Anything else escaping is a bug and keeps its
traceback.
"""

from __future__ import annotations


class OrionError(Exception):
    """A problem the user can fix: bad input, a missing tool, a GPU that is not there.

    ``message`` is one line saying what is wrong; ``hint`` (optional) says what to do about it.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(OrionError):
    """A value the caller gave is not one the command or function takes: an option out of its
    range, options that contradict each other.

    The CLI exits with status 2 for it, as for any usage error (typer's own included), and 1 for
    every other :class:`OrionError`: one exit-code rule for every command, so a script can tell
    "called wrongly" from "failed"."""
