"""The one way anything outside the daemon speaks to it: :func:`call`, a request and its answer.

`orion status`, `orion quota`, `orion down`, `orion run` (its check before the program starts),
a run's clients taking their slots, the records a run asks for, orion.ray's node agents and
`orion up` waiting for a daemon it started: all of them go through :func:`call`, so the
connection's deadline, the check of who listens on the socket (``SO_PEERCRED``), the size bound
and the one-line refusal are written once. The wire format (one JSON line each way) is
:mod:`orion_daemon.protocol`'s, shared with the server side; the requests are listed there.

The functions below :func:`call` name each request with its fields, so a caller never spells a
message by hand. A daemon is named by its record (``daemon.json``, :mod:`orion_daemon.state`)
or, where a caller has no record yet, by its socket's path.

How a daemon *process* gets its settings is the other half of speaking to it in one way:
:func:`daemon_command` hands it the whole :class:`~orion_daemon.server.DaemonSettings` as one
JSON object, which ``python -m orion_daemon`` reads back with
:meth:`~orion_daemon.server.DaemonSettings.parse_json`; no setting is flattened into flags and
parsed again on the other side.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orion_common import unix_sockets
from orion_common.errors import OrionError
from orion_daemon.ownership import check_daemon_peer
from orion_daemon.protocol import decode, encode, read_line

if TYPE_CHECKING:
    from orion_daemon.admission import JoinRequest
    from orion_daemon.server import DaemonSettings

TIMEOUT_S = 10.0
"""How long a request waits for the daemon's answer unless its caller says otherwise."""
SETTINGS_FLAG = "--settings"
"""The one argument of ``python -m orion_daemon``: the daemon's settings as one JSON object."""

Daemon = Mapping[str, Any] | Path
"""A daemon as callers hold it: its record (``daemon.json``) or its socket's path."""


def socket_path(daemon: Daemon) -> Path:
    """Where ``daemon`` listens."""
    return daemon if isinstance(daemon, Path) else Path(daemon["socket"])


def call(
    daemon: Daemon,
    op: str,
    *,
    timeout_s: float = TIMEOUT_S,
    passed: list[int] | None = None,
    **fields: Any,
) -> dict:
    """Sends the request ``op`` with ``fields`` to ``daemon`` and returns its answer; an
    :class:`OrionError` with the daemon's own one-line refusal (and hint) when it said no, or
    saying that it did not answer (gone, stalled past ``timeout_s``, not this user's).
    Descriptors the daemon passes with its answer are appended to ``passed`` (the caller's to
    close), or closed when ``passed`` is None."""
    path = socket_path(daemon)
    received: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout_s)
            with unix_sockets.reachable(path) as address:
                connection.connect(address)
            check_daemon_peer(connection, path)  # before a word is sent or believed
            connection.sendall(encode({"op": op, **fields}))
            answer = decode(read_line(connection, received))
    except (OSError, ValueError) as error:
        _close_all(received)
        raise OrionError(
            f"the orion daemon at {path} did not answer ({error})",
            hint="`orion status` says whether it runs; `orion up` starts one",
        ) from None
    if not answer.get("ok") or passed is None:
        _close_all(received)
    else:
        passed.extend(received)
    if not answer.get("ok"):
        raise OrionError(str(answer.get("error", "the daemon refused")), hint=answer.get("hint"))
    return answer


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def answers(daemon: Daemon, timeout_s: float = 2.0) -> bool:
    """Whether ``daemon`` answers a status request within ``timeout_s``: a daemon just started
    is ready once it does."""
    try:
        call(daemon, "status", timeout_s=timeout_s)
    except OrionError:
        return False
    return True


def status(daemon: Daemon, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """What `orion status --json` shows (:mod:`orion_daemon.status`)."""
    return call(daemon, "status", timeout_s=timeout_s)["status"]


def learned(daemon: Daemon, client: str) -> dict[str, Any]:
    """What ``client`` learned online: the kernels `orion status --save-profile` writes."""
    return call(daemon, "learned", client=client)["learned"]


def down(daemon: Daemon, timeout_s: float = 5.0) -> None:
    """Asks ``daemon`` to stop; answered once every gate is open and it is stopping."""
    call(daemon, "down", timeout_s=timeout_s)


def check_join(daemon: Daemon, join_request: JoinRequest) -> None:
    """Raises the daemon's refusal unless it would admit ``join_request`` now (nothing is
    reserved)."""
    call(daemon, "check", **join_request.__dict__)


def join(daemon: Daemon, join_request: JoinRequest) -> tuple[Any, int | None]:
    """Takes a slot for the calling process; the answer's ``environment`` (unchecked: the
    caller checks it, :func:`orion_daemon.ownership.checked_environment`) and the descriptor of
    the run's decisions the daemon passed with it (the caller's to keep or close; None when none
    came)."""
    passed: list[int] = []
    environment = call(daemon, "join", passed=passed, **join_request.__dict__).get("environment")
    _close_all(passed[1:])
    return environment, (passed[0] if passed else None)


def change_limits(daemon: Daemon, client: str, **changes: Any) -> list[dict[str, Any]]:
    """Asks ``daemon`` to change ``client``'s limits (``memory_limit``, ``min_util``,
    ``max_util``; only those given), checked by the rules a join meets; the changes it made."""
    return list(call(daemon, "quota", client=client, **changes).get("changes", []))


def start_records(
    daemon: Daemon, folder: Path, clients: list[str], clock_origin_ns: int, trace: bool
) -> None:
    """The daemon writes the records of ``clients`` into the run directory ``folder``."""
    call(
        daemon,
        "record",
        folder=str(folder),
        clients=clients,
        clock_origin_ns=clock_origin_ns,
        trace=trace,
    )


def end_records(daemon: Daemon, folder: Path) -> None:
    """Returns once the daemon has written the last records of the run at ``folder``."""
    call(daemon, "record_end", folder=str(folder))


def daemon_command(settings: DaemonSettings) -> list[str]:
    """The ``python -m orion_daemon`` command line that runs a daemon with ``settings``."""
    document = json.dumps(settings.to_json(), separators=(",", ":"), sort_keys=True)
    return [sys.executable, "-m", "orion_daemon", SETTINGS_FLAG, document]
