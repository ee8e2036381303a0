"""Unix socket paths of any length.

A Unix socket's address holds 107 bytes of path, and a state folder inside a deep run directory
(a benchmark's cell, a CI workspace) easily needs more: binding there failed with "AF_UNIX path
too long" and the daemon did not start. A socket is found by its directory, so a long path is
reached through a descriptor of that directory instead: ``/proc/self/fd/N/daemon.sock`` names the
same file in the same folder (its permissions, and who may reach it, unchanged) in 30 bytes.
The native join (``daemon_join.cpp``) does the same.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

MAX_PATH_BYTES = 107
"""The longest path ``sockaddr_un.sun_path`` holds with its terminating zero (Linux)."""


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """An address that names the socket file ``path`` for ``bind`` or ``connect``, valid inside
    the block: ``path`` itself when it fits, else the same name through a descriptor of its
    folder. A folder that does not exist raises :class:`FileNotFoundError`, as ``connect``
    would."""
    text = str(path)
    if len(os.fsencode(text)) <= MAX_PATH_BYTES:
        yield text
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)
