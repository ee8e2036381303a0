"""Each connection to a daemon served on a thread of its own, within deadlines.

A connection that sends nothing, or one byte a second, holds only its own thread, and only until
its deadline; every other connection, the heartbeat and the gate keeper go on meanwhile. The
number of connections served at once is bounded, so a flood of them costs threads no more than
that; one over the bound is answered "busy" at once and closed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from orion_daemon.protocol import MAX_MESSAGE_BYTES, answer, decode

REQUEST_DEADLINE_S = 5.0
"""How long a client has to send its whole request (one line); a request is far smaller than
what a busy machine sends in that time."""
ANSWER_DEADLINE_S = 5.0
"""How long a client has to take the answer."""
MAX_CONNECTIONS = 64

Handler = Callable[[dict[str, Any], socket.socket], dict[str, Any]]


def read_line_by(connection: socket.socket, deadline: float) -> bytes:
    """One line from ``connection``, all of it by ``deadline`` (``time.monotonic``); raises
    ``TimeoutError`` after it, and ``ValueError`` for a line over the size bound."""
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no whole request within {REQUEST_DEADLINE_S:g} s")
        connection.settimeout(remaining)
        try:
            chunk = connection.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"no whole request within {REQUEST_DEADLINE_S:g} s") from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"message over {MAX_MESSAGE_BYTES} bytes")
        if b"\n" in chunk:
            break
    return b"".join(chunks).split(b"\n", 1)[0]


class ConnectionServer:
    """Serves accepted connections, each on a thread: read one request by its deadline, answer
    it with ``handle`` (which turns every failure into an answer), send it by its deadline."""

    def __init__(self, handle: Handler, refuse: Callable[[str], dict[str, Any]]) -> None:
        self._handle = handle
        self._refuse = refuse
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def serve(self, connection: socket.socket) -> None:
        """Takes ``connection`` (accepted) over: served on a thread, or refused as busy."""
        if not self._slots.acquire(blocking=False):
            with connection:
                connection.settimeout(0.1)  # a refusal never waits on its reader
                answer(connection, self._refuse(f"busy: {MAX_CONNECTIONS} requests in progress"))
            return
        try:
            threading.Thread(
                target=self._serve, args=(connection,), name="orion-request", daemon=True
            ).start()
        except RuntimeError:  # no thread could start
            self._slots.release()
            connection.close()

    def _serve(self, connection: socket.socket) -> None:
        try:
            with connection:
                try:
                    message = decode(
                        read_line_by(connection, time.monotonic() + REQUEST_DEADLINE_S)
                    )
                except (OSError, ValueError, RecursionError) as error:  # TimeoutError: OSError
                    reply = self._refuse(f"bad request: {error}")
                else:
                    reply = self._handle(message, connection)
                connection.settimeout(ANSWER_DEADLINE_S)
                answer(connection, reply)
        finally:
            self._slots.release()

    def idle(self, timeout_s: float) -> bool:
        """Waits (up to ``timeout_s``) until no request is being served; whether none is."""
        deadline = time.monotonic() + timeout_s
        taken = 0
        try:
            while taken < MAX_CONNECTIONS:
                if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    return False
                taken += 1
            return True
        finally:
            for _ in range(taken):
                with contextlib.suppress(ValueError):
                    self._slots.release()
