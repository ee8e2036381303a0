"""Where a client's gating figures came from: its offline profile, what it learned online, or
nothing (unknown work), read from the preload library's counters.

The library counts every tracked launch by the source of the duration and SM need it was gated
with (``offline_launches``, ``online_launches``; the rest of ``tracked_launches`` was unknown),
and sums the durations of the known ones (``offline_ns``, ``online_ns``). An unknown launch has
no duration to sum (that is what unknown means), so shares are given of launches, with the GPU
time of the known part beside them. One reading, here, for `orion status` and `orion report`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

SOURCES = ("offline", "online", "unknown")


def profile_sources(stats: dict[str, Any]) -> dict[str, Any]:
    """Launch shares by source (None without tracked launches) and the known GPU time in ms."""
    tracked = int(stats.get("tracked_launches", 0))
    offline = int(stats.get("offline_launches", 0))
    online = int(stats.get("online_launches", 0))
    unknown = max(tracked - offline - online, 0)
    counts = {"offline": offline, "online": online, "unknown": unknown}
    return {
        "launches": counts,
        "launch_share": {
            source: (round(count / tracked, 4) if tracked else None)
            for source, count in counts.items()
        },
        "offline_gpu_ms": round(int(stats.get("offline_ns", 0)) / 1e6, 3),
        "online_gpu_ms": round(int(stats.get("online_ns", 0)) / 1e6, 3),
    }


TAIL_SHARE = 0.01
"""A p99 target is missed once more than 1% of an HP's requests are slower than it allows: the
share of felt samples above a ratio that says the tail is at least that ratio."""
TAIL_MIN_SAMPLES = 50
"""Felt samples a window needs before its tail is read (fewer, and one slow launch is 2%)."""
TAIL_STEER_RATIO = 2.0
"""The smallest tail ratio the latency loop acts on: an HP's launches alone scatter by tens of
percent around their learned durations (host wake-ups, clocks), not by twice."""


def felt_tail(samples: int, slower: Sequence[int]) -> dict[float, float] | None:
    """Over a window of ``samples`` felt samples, the share of them slower than each of the
    library's ratios (``FELT_TAIL_RATIOS``; ``slower[k]`` counts those above ratio k); None for
    a window with fewer than :data:`TAIL_MIN_SAMPLES`."""
    from scheduler_core.library import native_module

    ratios = native_module().FELT_TAIL_RATIOS
    if samples < TAIL_MIN_SAMPLES or len(slower) != len(ratios):
        return None
    return {float(r): count / samples for r, count in zip(ratios, slower, strict=True)}


def felt_p99(tail: dict[float, float] | None) -> float | None:
    """A lower bound of the felt samples' 99th percentile ratio: the largest of the library's
    ratios that more than :data:`TAIL_SHARE` of them exceeded, 1.0 when none did (the p99 is
    then under the smallest ratio); None without a tail to read."""
    if not tail:
        return None
    return tail_slowdown(tail, minimum=0.0) or 1.0


def tail_quantile(tail: dict[float, float] | None) -> float | None:
    """The felt samples' 99th percentile ratio, interpolated between the library's ratios: where
    the share above ratio k is over :data:`TAIL_SHARE` and the share above ratio k+1 is not, the
    ratio at which the share falls to it, log-linearly (shares of a tail fall about
    exponentially). 1.0 when not even the smallest ratio's share is over it (the p99 is below
    that ratio, which is all the counts say), the largest ratio when even its share is; None
    without a tail to read. Finer than :func:`felt_p99` for comparing two tails, which is what
    it is for: a shared tail with the same HP's tail alone."""
    if not tail:
        return None
    points = sorted(tail.items())
    if points[0][1] <= TAIL_SHARE:
        return 1.0
    for (low, low_share), (high, high_share) in itertools.pairwise(points):
        if low_share > TAIL_SHARE >= high_share:
            if high_share > 0:
                step = math.log(low_share / TAIL_SHARE) / math.log(low_share / high_share)
            else:  # none above `high`: no rate of fall to follow, the share falls evenly
                step = (low_share - TAIL_SHARE) / low_share
            return low * (high / low) ** step
    return points[-1][0]


def tail_slowdown(
    tail: dict[float, float] | None, minimum: float = TAIL_STEER_RATIO
) -> float | None:
    """The largest ratio, at least ``minimum``, that more than :data:`TAIL_SHARE` of the felt
    samples exceeded: the HP's tail is at least that many times alone. None when none did."""
    if not tail:
        return None
    above = [ratio for ratio, share in tail.items() if ratio >= minimum and share > TAIL_SHARE]
    return max(above, default=None)


def interference(
    sampled_ns: int, sampled_expected_ns: int, *, minimum_expected_ns: int = 100_000
) -> float | None:
    """How much slower timed launches ran than their durations alone (1.0: as alone), from the
    sums of measured and expected GPU time over some window; None when the window timed too
    little work (under ``minimum_expected_ns``) to say."""
    if sampled_expected_ns < minimum_expected_ns:
        return None
    return sampled_ns / sampled_expected_ns
