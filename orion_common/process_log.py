"""Where the lines of a process orion starts go: the daemon (`python -m orion_daemon`), a client
of a run (`python -m colocation.client`) and a profiled step (`profiler/target.py`).

Their code is library code (the rest of orion imports it), and library code never prints: a
function printing on import or call would write into whatever terminal or pipe the importer
owns. Such code logs to a named logger instead, and only the process's entry point decides where
those lines land: its stdout is the daemon's log file, its stderr the pipe the parent reads.
Lines keep the exact text they had when they were printed, no level or time added, because
people and tests read those logs.
"""

from __future__ import annotations

import logging
from typing import TextIO

from orion_common.errors import OrionError


def log_to(stream: TextIO, *names: str) -> None:
    """Sends the records of the loggers ``names`` (and below) to ``stream``, one bare line each,
    flushed as written; a second call replaces the first (a test may run an entry point twice),
    so no line is written twice."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in names:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False


def error_lines(error: OrionError) -> list[str]:
    """``error: <message>`` and, when there is one, ``hint: <hint>``: what the CLI shows for an
    :class:`OrionError`, for the processes that report one without the CLI."""
    return [f"error: {error.message}", *([f"hint: {error.hint}"] if error.hint else [])]
