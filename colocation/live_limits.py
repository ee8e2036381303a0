"""Changing a client's limits while its run is live (``orion quota``).

The runner records in ``run.json`` where the run's shared state is (``scheduler``: its name, the
controller's pid and the run clock's origin). A change is written straight into that shared
state, so the client's preload library obeys it from its next allocation, and appended to the
run directory's ``limits.csv`` with its time on the run clock, so the record shows when each
limit held.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.runclock import RunClock
from colocation.rundir import utc_now
from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_common.run_format import (
    LIMIT_COLUMNS,
    LIMITS_TABLE,
    RUN_JSON,
    STATUS_RUNNING,
    column_names,
)


@dataclass(frozen=True)
class LimitChange:
    client: str
    field: str
    old: int | None
    new: int | None
    in_use: int
    time_s: float


def _live_record(run_dir: Path) -> dict[str, Any]:
    """run.json of a run that is still running, with its scheduler's location."""
    path = run_dir / RUN_JSON
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise OrionError(f"{run_dir}: no {RUN_JSON}; not a run directory") from None
    except (OSError, ValueError) as error:
        raise OrionError(f"{path}: cannot read it ({error})") from None
    status = data.get("status")
    scheduler = data.get("scheduler")
    if status != STATUS_RUNNING:
        raise OrionError(
            f"{run_dir}: the run is not live (status {status!r}); limits change only while it runs"
        )
    if not isinstance(scheduler, dict) or "shm" not in scheduler:
        raise OrionError(
            f"{run_dir}: the run has no scheduler state (policy {data.get('policy')!r} does not "
            "load orion's library), so nothing could enforce a limit"
        )
    if not process_alive(int(scheduler.get("controller_pid", 0))):
        raise OrionError(f"{run_dir}: the run's controller is gone (it was stopped or killed)")
    return data


def change_memory_limit(run_dir: Path, client: str, limit: int | None) -> LimitChange:
    """Sets ``client``'s memory limit (bytes; None: none) in the live run at ``run_dir``."""
    from scheduler_core import LiveRun

    data = _live_record(run_dir)
    names = [entry.get("name") for entry in data.get("clients", [])]
    if client not in names:
        raise OrionError(
            f"no client {client!r} in this run (clients: {', '.join(map(str, names))})"
        )
    scheduler = data["scheduler"]
    with LiveRun(str(scheduler["shm"])) as run:
        index = run.client_index(client)
        in_use, old = run.memory(index)
        run.set_memory_limit(index, limit)
    clock = RunClock(int(scheduler.get("clock_origin_ns", 0)))
    change = LimitChange(client, "memory_limit", old or None, limit, in_use, clock.now())
    _append(run_dir / LIMITS_TABLE, change)
    return change


def _append(path: Path, change: LimitChange) -> None:
    new_file = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if new_file:
            writer.writerow(column_names(LIMIT_COLUMNS))
        writer.writerow(
            (
                f"{change.time_s:.6f}",
                utc_now(),
                change.client,
                change.field,
                "" if change.old is None else change.old,
                "" if change.new is None else change.new,
                change.in_use,
            )
        )
