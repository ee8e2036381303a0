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
