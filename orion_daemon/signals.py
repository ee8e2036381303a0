"""SIGTERM treated like Ctrl-C, and clean-up that a second signal cannot cut short.

A run owns things that outlive a careless exit: client processes holding GPU memory, a private
MPS daemon, the scheduler's shared memory. Python turns Ctrl-C into ``KeyboardInterrupt``, so
``finally`` blocks release them; SIGTERM (``kill``, a batch system ending the job) would kill the
process without running any of them, so it is mapped onto the same path. While releasing, a
further Ctrl-C or SIGTERM is remembered instead of raised, so clean-up runs to the end (it is
bounded by timeouts) and the interrupt is raised afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises ``KeyboardInterrupt`` (main thread only; nestable)."""
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) is _raise_interrupt:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class DeferredSignals:
    """Ctrl-C and SIGTERM recorded, not raised, while the block runs (main thread only).

    A signal received inside is raised as ``KeyboardInterrupt`` on leaving the block, unless
    an exception is already on its way out (which ends the program's work anyway).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def __enter__(self) -> DeferredSignals:
        if _in_main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self.received is not None and exc_type is None:
            raise KeyboardInterrupt(f"signal {signal.Signals(self.received).name}")
