"""A daemon's state folder and its record (``daemon.json``, format ``orion-daemon`` version 1).

One folder per GPU, ``<base>/gpu<N>/``; ``<base>`` is ``$ORION_STATE_DIR`` when set, else
``$XDG_RUNTIME_DIR/orion``, else ``/tmp/orion-<uid>``. Both the GPU's folder and ``<base>``
are the user's own, mode 0700 (:mod:`orion_daemon.ownership` creates them so and refuses them
otherwise). It holds:

- ``daemon.json``: the live daemon (its pid, GPU, policy, sharing mode, shared-memory name,
  socket, MPS folders and current clients), replaced atomically on every change and removed by
  a clean stop; one left by a daemon that died names a pid that no longer runs (stale);
- ``daemon.lock``: held by the running daemon for its whole life (:data:`LOCK`);
- ``daemon.sock``: the Unix socket `orion run`, `orion status` and `orion down` talk to;
- ``daemon.log``: what the daemon printed (detached daemons);
- ``clients.csv``: every client that joined and left; ``memory.csv``, ``shares.csv``: samples
  of each client's memory and GPU-time share; ``limits.csv``: limits changed by `orion quota`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_common.processes import same_process
from orion_daemon.ownership import check_folder

FORMAT = "orion-daemon"
VERSION = 1
RECORD = "daemon.json"
SOCKET = "daemon.sock"
LOG = "daemon.log"
LOCK = "daemon.lock"
"""Held (``flock``) by the running daemon from before its socket is bound until it has gone:
one daemon per state folder, whatever races. Never removed (removing a lock file is a race)."""
CLIENTS_TABLE = "clients.csv"
CLIENT_EVENT_COLUMNS = (
    "time_s",
    "utc",
    "event",
    "client",
    "role",
    "slot",
    "pid",
    "command",
    "detail",
)
"""clients.csv: ``event`` is join, leave (the process exited), dead (it ended without detaching:
killed), expired (no process attached within the daemon's bound after the join) or refused
(``detail`` says why); times on the daemon's clock (seconds since it started)."""


def state_base() -> Path:
    """Where every GPU's state folder lives (see the module docstring)."""
    configured = os.environ.get("ORION_STATE_DIR")
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "orion"
    return Path(f"/tmp/orion-{os.getuid()}")


def state_dir(gpu: int, base: Path | None = None) -> Path:
    """The state folder of the daemon for GPU ``gpu`` under ``base`` (None: :func:`state_base`)."""
    return (base or state_base()) / f"gpu{gpu}"


def read_record(folder: Path) -> dict[str, Any] | None:
    """The daemon record in ``folder``, or None when there is none (or it is unreadable).
    Refuses a folder that is not this user's own (:func:`ownership.check_folder`): whoever could
    write there could name any pid for `orion down` to signal, or any socket."""
    check_folder(folder)
    try:
        data = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return data


def live_record(folder: Path) -> dict[str, Any] | None:
    """The record of a daemon that is running now; None when none runs (a stale record of a
    daemon that died is not one, nor one whose pid now belongs to another process: the record's
    ``pid_start`` is the daemon's start time, :func:`orion_common.processes.same_process`)."""
    record = read_record(folder)
    if record is None:
        return None
    pid, started = record.get("pid"), record.get("pid_start")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    if started is not None and (isinstance(started, bool) or not isinstance(started, int)):
        return None
    if not same_process(pid, started):
        return None
    return record


def require_daemon(gpu: int, folder: Path | None = None) -> dict[str, Any]:
    """The running daemon's record for ``gpu``, or the one-line error saying how to start one."""
    folder = folder or state_dir(gpu)
    record = live_record(folder)
    if record is None:
        raise OrionError(
            f"no orion daemon runs for GPU {gpu} (state folder {folder})",
            hint=f"start one with `orion up --gpu {gpu}`, or run the program ungated with "
            "`orion run --no-daemon`",
        )
    return record


def owned_refusal(record: dict[str, Any]) -> OrionError:
    """Why a daemon that an `orion colocate` run started for itself (its record's ``owner``, the
    run's directory) neither admits other programs nor stops on `orion down`: it is the run's,
    and goes when the run ends."""
    gpu = record.get("gpu", {}).get("index") if isinstance(record.get("gpu"), dict) else None
    return OrionError(
        f"the orion daemon of GPU {gpu} belongs to the `orion colocate` run in "
        f"{record.get('owner')} (pid {record.get('pid')}): it serves that run's clients and "
        "stops when the run ends",
        hint=f"wait for the run to end, or stop it (Ctrl-C in its terminal, or kill -TERM "
        f"{record.get('pid')})",
    )


def remove_stale(folder: Path) -> list[str]:
    """Removes what a daemon that died (SIGKILL) left in ``folder``: its record and socket.
    Its shared memory is removed by :func:`scheduler_core.run_state.remove_stale_runs`; logs
    and records are kept. Returns what was removed."""
    removed = []
    for name in (RECORD, SOCKET):
        path = folder / name
        try:
            path.unlink()
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed
