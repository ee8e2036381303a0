"""The run clock: seconds since the run's origin on ``CLOCK_MONOTONIC``.

Every process of a run (the runner, each client, the preload library's trace) reads the same
machine-wide monotonic clock, so subtracting one origin chosen by the runner puts all their
timestamps on one time line without any clock synchronisation. Wall-clock time would jump with
NTP adjustments; a per-process ``perf_counter`` has no common zero.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone


def utc_now() -> str:
    """Wall-clock time for records a person reads (ISO 8601, seconds, UTC)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def monotonic_ns() -> int:
    """``CLOCK_MONOTONIC`` in nanoseconds, the clock the preload library also stamps with."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class RunClock:
    """Converts ``CLOCK_MONOTONIC`` readings into run-clock seconds."""

    def __init__(self, origin_ns: int) -> None:
        self.origin_ns = origin_ns

    @classmethod
    def starting_now(cls) -> RunClock:
        return cls(monotonic_ns())

    def now(self) -> float:
        """Seconds since the origin."""
        return (monotonic_ns() - self.origin_ns) / 1e9

    def seconds(self, monotonic: int) -> float:
        """A ``CLOCK_MONOTONIC`` reading (ns) as run-clock seconds."""
        return (monotonic - self.origin_ns) / 1e9

    def sleep_until(self, when_s: float, *, spin_s: float = 0.0005) -> None:
        """Sleep until run-clock ``when_s``, spinning the last ``spin_s``.

        ``time.sleep`` overshoots by tens of microseconds; an open-loop request's latency is
        measured from its arrival, so an overshoot would be charged to every policy as latency.
        """
        remaining = when_s - self.now()
        if remaining > spin_s:
            time.sleep(remaining - spin_s)
        while self.now() < when_s:
            pass
