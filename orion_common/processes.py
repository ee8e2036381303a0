"""Whether a process is still alive, as orion's clean-up code needs to know it."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still runs. A zombie does not count: it will never do anything again, and a
    process that is not our child (an MPS daemon, a dead controller) may stay one for long in a
    container without a reaping init."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` ended within ``timeout_s`` (polled every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
