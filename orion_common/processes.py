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


def _stat_field(pid: int, field: int) -> int | None:
    """Field ``field`` (numbered as proc(5) does, from 1) of ``/proc/<pid>/stat`` from the
    state (3) on, as a number; None when ``pid`` does not run (or this is not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name, in parentheses, may hold anything
    try:
        return int(fields[field - 3])  # fields[0] is field 3 (the state)
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``, field 22); None
    when it does not run (or this is not Linux). A pid is reused once its process is gone, so a
    recorded pid names the same process only while this also matches what was recorded with it."""
    return _stat_field(pid, 22)


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (``/proc/<pid>/stat``, field 4); None when it does not run."""
    return _stat_field(pid, 4)


def is_ancestor(ancestor: int, pid: int, max_depth: int = 64) -> bool:
    """Whether ``ancestor`` is ``pid``'s parent, grandparent, ... (as the kernel says now): what
    a daemon checks before a process that names a client as its parent shares that client's
    memory limit. Bounded, so a cycle read mid-reuse of pids cannot loop."""
    at = parent_pid(pid)
    for _ in range(max_depth):
        if at is None or at <= 1:
            return False
        if at == ancestor:
            return True
        at = parent_pid(at)
    return False


def same_process(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` still runs and is the process that started at ``start_time`` (None: a
    record of an older orion that kept no start time; then only whether ``pid`` runs)."""
    if not process_alive(pid):
        return False
    return start_time is None or process_start_time(pid) == start_time


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` ended within ``timeout_s`` (polled every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
