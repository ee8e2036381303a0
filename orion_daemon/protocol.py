"""What `orion run`, `orion status`, `orion quota` and `orion down` say to a daemon: the wire
format both ends share (the client side is :mod:`orion_daemon.client`, the one way to ask).

One request per connection on the daemon's Unix socket: a JSON object on one line, answered by
one JSON object on one line. Every request has ``op``; every answer has ``ok`` and, when it is
false, ``error`` (one line) and optionally ``hint``. The socket lives in the daemon's state
folder (mode 0700), so only its user can reach it; both ends also ask the kernel who is at the
other end (``SO_PEERCRED``, :mod:`orion_daemon.ownership`): a client talks only to a daemon of
its own uid, the daemon answers only its own uid and root, and it learns the asking process's
pid from the socket, never from the message.

Requests: ``join`` (the fields of :class:`orion_daemon.admission.JoinRequest`; answer: ``run``,
``slot``, ``environment``), ``check`` (the same fields; answered when the daemon would admit
them now), ``learned`` (``client``; answer: ``learned``), ``status`` (answer: ``status``, see
:mod:`orion_daemon.status`), ``quota`` (a client's limits, see :mod:`orion_daemon.limits`;
answer: ``changes``), ``down`` (answer once the daemon has opened every gate and is stopping),
``record`` (a run's records: ``folder``, ``clients``, ``clock_origin_ns``, ``trace``; see
:class:`orion_daemon.records.Recordings`) and ``record_end`` (``folder``; answered once the
run's last records are written).
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

from orion_daemon.ownership import peer_credentials

MAX_MESSAGE_BYTES = 1 << 20


def read_line(connection: socket.socket) -> bytes:
    """One line from ``connection`` (without its newline), at most :data:`MAX_MESSAGE_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if b"\n" in chunk or size > MAX_MESSAGE_BYTES:
            break
    data = b"".join(chunks)
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"message over {MAX_MESSAGE_BYTES} bytes")
    return data.split(b"\n", 1)[0]


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    message = json.loads(line.decode())
    if not isinstance(message, dict):
        raise ValueError("a message is a JSON object")
    return message


def peer_pid(connection: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``)."""
    return peer_credentials(connection)[0]


def read_request(connection: socket.socket) -> dict[str, Any]:
    """One request from an accepted connection (the server side)."""
    return decode(read_line(connection))


def answer(connection: socket.socket, message: dict[str, Any]) -> None:
    """Sends the answer to a request (the server side); a client that left is ignored."""
    with contextlib.suppress(OSError):
        connection.sendall(encode(message))
