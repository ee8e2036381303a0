"""A daemon inside another process: `orion colocate` runs its own GPU's daemon on a thread.

Set-up and tear-down happen in the calling thread, so a daemon that cannot start (another one
runs for the GPU, MPS does not start) refuses there with its own error, and everything it owns
is released by the caller's own clean-up (after its clients are stopped); only :meth:`Daemon.loop`
runs on the thread. The daemon is the same object `orion up` starts, talked to the same way
(its socket), so a run's clients join it exactly as `orion run` joins a standing one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from orion_common.errors import OrionError
from orion_daemon.server import Daemon, DaemonSettings

STOP_TIMEOUT_S = 10.0
"""The loop notices it should stop within one tick (0.1 s): requests are served on threads of
their own, so none holds it up."""


class DaemonThread:
    """A :class:`Daemon` serving on a thread of this process."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="orion-daemon", daemon=True)

    def _serve(self) -> None:
        try:
            self.daemon.loop()
        except BaseException as error:  # kept for check(): the owner must learn of it
            self.failure = error

    def check(self) -> None:
        """Raises when the daemon no longer serves (it failed, or `down` reached it)."""
        if self._thread.is_alive():
            return
        why = f"it failed: {self.failure!r}" if self.failure is not None else "it was stopped"
        raise OrionError(
            f"the orion daemon of GPU {self.daemon.settings.gpu} stopped during the run ({why}); "
            "the clients ran ungated from then on"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the loop (its resources are released by :func:`daemon_thread`)."""
        self.daemon.stopping = True
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)


@contextlib.contextmanager
def daemon_thread(settings: DaemonSettings, notes: list[str]) -> Iterator[DaemonThread]:
    """A daemon with ``settings`` serving on a thread for the block; what it notes about its
    start and stop (stale files removed, MPS left running) is appended to ``notes``."""
    daemon = Daemon(settings)
    try:
        with daemon.running():
            serving = DaemonThread(daemon)
            serving.start()
            try:
                yield serving
            finally:
                serving.stop()
    finally:
        notes.extend(daemon.notes)
