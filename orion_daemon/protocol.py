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
``slot``, ``environment``, and the run's decisions passed with it: a sealed memfd the client maps
read-only, sent as ``SCM_RIGHTS`` with the answer's bytes), ``check`` (the same fields; answered
when the daemon would admit them now), ``learned`` (``client``; answer: ``learned``), ``status``
(answer: ``status``, see :mod:`orion_daemon.status`), ``quota`` (a client's limits, see
:mod:`orion_daemon.limits`; answer: ``changes``), ``down`` (answer once the daemon has opened every
gate and is stopping), ``record`` (a run's records: ``folder``, ``clients``, ``clock_origin_ns``,
``trace``; see :class:`orion_daemon.records.Recordings`) and ``record_end`` (``folder``; answered
once the run's last records are written).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from typing import Any

from orion_daemon.ownership import peer_credentials

MAX_MESSAGE_BYTES = 1 << 20
PASSED_FDS = "_passed_fds"
"""The key of an answer (server side) listing descriptors to pass with it (``SCM_RIGHTS``): taken
out before the answer is encoded, never sent as JSON."""
MAX_PASSED_FDS = 4
"""The most descriptors a client takes with one answer; more are closed on arrival."""


def read_line(connection: socket.socket, passed: list[int] | None = None) -> bytes:
    """One line from ``connection`` (without its newline), at most :data:`MAX_MESSAGE_BYTES`;
    descriptors passed with it are appended to ``passed`` (closed when it is None: a caller that
    expects none must not leak what a peer sends)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk, fds, _, _ = socket.recv_fds(
            connection, 65536, MAX_PASSED_FDS, socket.MSG_CMSG_CLOEXEC
        )
        for fd in fds:
            if passed is None:
                os.close(fd)
            else:
                passed.append(fd)
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
    """Sends the answer to a request (the server side), with the descriptors its
    :data:`PASSED_FDS` lists (they stay open here); a client that left is ignored."""
    fds = list(message.pop(PASSED_FDS, ()))
    data = encode(message)
    with contextlib.suppress(OSError):
        if fds:
            sent = socket.send_fds(connection, [data], fds)
            data = data[sent:]
        connection.sendall(data)
