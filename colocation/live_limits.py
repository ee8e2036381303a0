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

from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_common.run_format import (
    LIMIT_COLUMNS,
    LIMITS_TABLE,
    RUN_JSON,
    STATUS_RUNNING,
    column_names,
)
from orion_common.runclock import RunClock, utc_now


@dataclass(frozen=True)
class LimitChange:
    client: str
    field: str
    old: float | None
    new: float | None
    in_use: int
    time_s: float


def _live_record(run_dir: Path) -> dict[str, Any]:
    """run.json of a run that is still running, with its scheduler's location; or, for a
    daemon's state folder, the daemon's record (the same fields: its clients, its policy and
    where its scheduler state is)."""
    from orion_daemon import state

    path = run_dir / RUN_JSON
    if not path.exists() and (run_dir / state.RECORD).exists():
        path = run_dir / state.RECORD
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


def _check_client(data: dict[str, Any], client: str) -> None:
    names = [entry.get("name") for entry in data.get("clients", [])]
    if client not in names:
        known = ", ".join(map(str, names))
        raise OrionError(f"no client {client!r} in this run (clients: {known})")


def _gpu_memory_bytes(data: dict[str, Any]) -> int | None:
    """The GPU's memory as the live record says it: a run's ``environment.gpu_memory_mib``
    (NVML's total), a daemon's ``gpu.memory_bytes``; None when it says neither."""
    environment = data.get("environment")
    if isinstance(environment, dict):
        mib = environment.get("gpu_memory_mib")
        if isinstance(mib, int) and not isinstance(mib, bool) and mib > 0:
            return mib << 20
    gpu = data.get("gpu")
    if isinstance(gpu, dict):
        size = gpu.get("memory_bytes")
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    return None


def change_memory_limit(run_dir: Path, client: str, limit: int | None) -> LimitChange:
    """Sets ``client``'s memory limit (bytes; None: none) in the live run at ``run_dir``."""
    from orion_daemon.admission import memory_limit_problem
    from scheduler_core import LiveRun

    data = _live_record(run_dir)
    _check_client(data, client)
    problem = memory_limit_problem(limit, _gpu_memory_bytes(data))
    if problem is not None:
        raise OrionError(problem, hint="give a limit in the GPU's memory, or 'none'")
    scheduler = data["scheduler"]
    with LiveRun(str(scheduler["shm"])) as run:
        index = run.client_index(client)
        in_use, old = run.memory(index)
        run.set_memory_limit(index, limit)
    clock = RunClock(int(scheduler.get("clock_origin_ns", 0)))
    change = LimitChange(client, "memory_limit", old or None, limit, in_use, clock.now())
    _append(run_dir / LIMITS_TABLE, change)
    return change


def change_shares(
    run_dir: Path, client: str, min_util: float | None, max_util: float | None
) -> list[LimitChange]:
    """Sets ``client``'s GPU-time shares (None: unchanged) in the live run at ``run_dir``; the
    gate keeper applies them at its next pass. Checked against the other clients' promises."""
    from scheduler_core import LiveRun

    data = _live_record(run_dir)
    _check_client(data, client)
    role = next(e.get("role") for e in data.get("clients", []) if e.get("name") == client)
    if role == "hp" and data.get("policy") != "quota":
        raise OrionError(
            f"policy {data.get('policy')!r} never holds HP work back; GPU-time shares apply to "
            "BE clients (every client under policy 'quota')"
        )
    for name, value in (("--min-util", min_util), ("--max-util", max_util)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise OrionError(f"{name} must be between 0 and 1 (got {value:g})")
    scheduler = data["scheduler"]
    with LiveRun(str(scheduler["shm"])) as run:
        if not run.quotas_enforced():
            raise OrionError(
                f"{run_dir}: the run was started without GPU-time shares (no client had "
                "min_util or max_util, and its policy is not 'quota'), so nothing enforces them"
            )
        index = run.client_index(client)
        old_min, old_max = run.quota(index)
        new_min = old_min if min_util is None else min_util
        new_max = old_max if max_util is None else max_util
        if new_min > new_max:
            raise OrionError(f"min_util {new_min:g} would be above max_util {new_max:g}")
        others = sum(run.quota(i)[0] for i in run.client_indices() if i != index)
        if others + new_min > 1.0 + 1e-9:
            raise OrionError(
                f"min_util would add up to {others + new_min:g} over the clients; at most 1"
            )
        run.set_quota(index, new_min, new_max)
    now = RunClock(int(scheduler.get("clock_origin_ns", 0))).now()
    changes = [
        LimitChange(client, field, old, new, 0, now)
        for field, old, new in (("min_util", old_min, new_min), ("max_util", old_max, new_max))
        if old != new
    ]
    for change in changes:
        _append(run_dir / LIMITS_TABLE, change)
    return changes


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
