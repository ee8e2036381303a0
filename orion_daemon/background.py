"""The daemon's two timers that nothing else may hold up: its heartbeat, and its records.

Clients stop gating once the daemon's heartbeat is a second old, so a beat that waited on a
request being answered, or on a disk write, would let one idle connection or one slow fsync
ungate every client. The heartbeat therefore has a thread of its own that does nothing else.
Records (``daemon.json``, ``clients.csv``, the recorders' samples) are written by another
thread: the scheduling never waits on a disk, and a disk that fails (full: ``ENOSPC``) costs
records, said once in the log and in `orion status`, never scheduling.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from orion_common.errors import OrionError

JOIN_TIMEOUT_S = 10.0


class Heartbeat:
    """Calls ``beat`` every ``interval_s`` on a thread of its own until :meth:`stop`."""

    def __init__(self, beat: Callable[[], None], interval_s: float) -> None:
        self._beat = beat
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orion-heartbeat", daemon=True)
        self._last_beat: float | None = None  # time.monotonic() of the last beat

    def age_s(self) -> float | None:
        """Seconds since the last beat (None before the first): a daemon's health as its
        clients see it, for `orion status` and the metrics."""
        last = self._last_beat
        return None if last is None else round(time.monotonic() - last, 6)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._beat()
            self._last_beat = time.monotonic()
            self._stopped.wait(self._interval_s)

    def stop(self) -> None:
        """No beat after this returns (clients then notice the silence, unless told first)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)


class RecordWriter:
    """Runs the daemon's disk writes on a thread of its own: the writes handed to :meth:`submit`
    in order, and ``sample`` every ``interval_s``.

    A write that fails (``OSError``, or the :class:`OrionError` orion's writers turn one into)
    is dropped: the first failure is logged with ``log`` and kept in :attr:`degraded`, which
    `orion status` shows; writing goes on (a disk that frees up is written to again)."""

    def __init__(
        self, sample: Callable[[], None], interval_s: float, log: Callable[[str], None]
    ) -> None:
        self._sample = sample
        self._interval_s = interval_s
        self._log = log
        self._pending: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="orion-records", daemon=True)
        self.degraded: str | None = None
        """Why records are incomplete (the first failed write), or None."""
        self.failed_writes = 0
        self.written = 0
        """Writes (and samples) done without failing, for `orion status` and the metrics."""
        self._counts = threading.Lock()
        self._submitted = 0
        self._done = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, write: Callable[[], None]) -> None:
        """Runs ``write`` on the records thread, after the writes submitted before it."""
        with self._counts:
            self._submitted += 1
        self._pending.put(write)

    @property
    def pending(self) -> int:
        """Writes submitted and not yet done (failed ones count as done): 0 once everything
        submitted before this call is on disk, or given up."""
        with self._counts:
            return self._submitted - self._done

    def attempt(self, write: Callable[[], None]) -> None:
        """Runs ``write`` now, in the calling thread; a failure degrades records as above."""
        try:
            write()
        except (OSError, OrionError) as error:
            with self._counts:  # attempts come from the records thread and the daemon's own
                self.failed_writes += 1
            if self.degraded is None:
                message = error.message if isinstance(error, OrionError) else str(error)
                self.degraded = message
                self._log(f"records degraded, scheduling goes on: {message}")  # never raises
        else:
            with self._counts:
                self.written += 1

    def _run(self) -> None:
        next_sample = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_sample:  # even while writes keep coming
                next_sample = now + self._interval_s
                self.attempt(self._sample)
                continue
            try:
                write = self._pending.get(timeout=next_sample - now)
            except queue.Empty:
                continue
            if write is None:
                return
            self.attempt(write)
            with self._counts:
                self._done += 1

    def stop(self) -> None:
        """Writes what was submitted, then ends the thread (a disk that hangs is left behind
        after a while: the daemon's own shutdown must not wait on it for ever)."""
        self._pending.put(None)
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT_S)
