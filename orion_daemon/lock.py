"""One daemon per state folder: a lock taken before anything is bound, held for the daemon's life.

Looking for a live ``daemon.json`` and then binding the socket leaves a window in which two
`orion up` both find none and both start. ``flock`` on ``daemon.lock`` closes it: the kernel
gives the lock to one process, and takes it back when that process ends however it ends
(SIGKILL too), so a lock is never stale and nothing has to clean it up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_daemon import state


def already_running(gpu: int, record: dict[str, Any] | None) -> OrionError:
    """The one-line refusal of a second daemon for ``gpu`` (``record``: the running one's)."""
    who = ""
    if record is not None:
        who = f" (pid {record.get('pid')}, since {record.get('started_utc')})"
    return OrionError(
        f"an orion daemon already runs for GPU {gpu}{who}",
        hint=f"`orion status --gpu {gpu}` shows it; `orion down --gpu {gpu}` stops it",
    )


@contextlib.contextmanager
def folder_lock(folder: Path, gpu: int) -> Iterator[None]:
    """Holds ``folder``'s ``daemon.lock`` for the block; refuses at once while another process
    holds it (a daemon running or starting). The descriptor is not inherited by children (an
    MPS daemon must not keep the lock after this daemon has gone)."""
    path = folder / state.LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise OrionError(f"cannot open the daemon lock {path}: {error.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The holder may not have written its record yet (it is starting): say what is known.
            raise already_running(gpu, state.live_record(folder)) from None
        yield
    finally:
        os.close(fd)  # releases the lock
