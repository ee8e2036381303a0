"""Changing a client's limits while its run is live (``orion quota`` on a run directory).

A run's clients are clients of a daemon (:mod:`colocation.gpu_daemon`: the GPU's running one or
the run's own), and the runner records in ``run.json`` which (``scheduler``: the daemon's process,
its state folder and the run clock's origin). A change is a ``quota`` request on that daemon's
socket (:func:`orion_daemon.limits.request_change`, through
:func:`orion_daemon.client.change_limits`): the daemon checks it by the rules a join
meets, against what it has promised now, and applies it, exactly as for `orion quota` on its
state folder (:mod:`orion_daemon.limits`). What it changed is appended to the run directory's
``limits.csv`` with its time on the run clock, so the record shows when each limit held.
"""

from __future__ import annotations

import csv
import json
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
from orion_daemon import state
from orion_daemon.limits import request_change, shares_enforced


def _live_record(run_dir: Path) -> dict[str, Any]:
    """run.json of a run that is still running, with its daemon's location."""
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
    if not isinstance(scheduler, dict) or "controller_pid" not in scheduler:
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


def _run_daemon(run_dir: Path, scheduler: dict[str, Any]) -> dict[str, Any]:
    """The record of the daemon that holds the run's clients (its socket, settings)."""
    folder = scheduler.get("state_dir")
    if not isinstance(folder, str) or not folder:
        raise OrionError(
            f"{run_dir}: run.json does not say which orion daemon the run's clients joined (a run "
            "started by an older orion), so its limits cannot change while it runs"
        )
    record = state.live_record(Path(folder))
    if record is None or record.get("pid") != scheduler.get("controller_pid"):
        raise OrionError(f"{run_dir}: the run's controller is gone (it was stopped or killed)")
    return record


def change_limits(run_dir: Path, client: str, **changes: Any) -> list[dict[str, Any]]:
    """Asks the daemon of the live run at ``run_dir`` to change ``client``'s limits (``changes``:
    :func:`orion_daemon.limits.request_change`'s ``memory_limit``, ``min_util``, ``max_util``)
    and records what it changed in the run's ``limits.csv``; the changes, as the daemon answers
    them (``field``, ``old``, ``new``, ``in_use``) with ``time_s`` on the run clock. Nothing
    changes when the daemon refuses any of it."""
    data = _live_record(run_dir)
    _check_client(data, client)
    scheduler = data["scheduler"]
    daemon = _run_daemon(run_dir, scheduler)
    shares = shares_enforced(str(daemon.get("policy")), bool(daemon.get("shares")))
    if (changes.get("min_util") is not None or changes.get("max_util") is not None) and not shares:
        # The daemon would refuse too; a run says it in its own terms (its jobs file).
        raise OrionError(
            f"{run_dir}: the run was started without GPU-time shares (no client had "
            "min_util or max_util, and its policy is not 'quota'), so nothing enforces them"
        )
    answered = request_change(daemon, client, **changes)
    now = RunClock(int(scheduler.get("clock_origin_ns", 0))).now()
    made = [{**change, "time_s": now} for change in answered]
    if made:
        _append(run_dir / LIMITS_TABLE, client, made)
    return made


def _append(path: Path, client: str, changes: list[dict[str, Any]]) -> None:
    new_file = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if new_file:
            writer.writerow(column_names(LIMIT_COLUMNS))
        for change in changes:
            old, new = change["old"], change["new"]
            writer.writerow(
                (
                    f"{change['time_s']:.6f}",
                    utc_now(),
                    client,
                    change["field"],
                    "" if old is None else old,
                    "" if new is None else new,
                    int(change.get("in_use") or 0),
                )
            )
