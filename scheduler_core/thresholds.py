"""Default scheduling thresholds, derived from the HP client's profile.

Orion bounds the best-effort work queued on the GPU so that an arriving high-priority request
never waits behind much of it; the paper used about 2.5% of the HP request latency. A profile
gives the HP step's GPU time (sum of its kernels' durations, un-instrumented where measured),
which is the part of the latency the GPU is busy for, so the default limit is 2.5% of that.
"""

from __future__ import annotations

import pandas as pd

QUEUE_LIMIT_FRACTION = 0.025
# When there is no HP profile (or it is empty), a limit of this size still bounds the damage.
FALLBACK_QUEUE_LIMIT_NS = 50_000
# A launch older than this counts as finished even if no completion was ever seen (a context
# torn down mid-flight): far above any kernel of an inference or training step.
DEFAULT_STALE_NS = 5_000_000_000


def step_gpu_time_ns(kernels: pd.DataFrame) -> float:
    """GPU time of one profiled step: measured durations where present, ncu's otherwise."""
    if kernels.empty:
        return 0.0
    measured = pd.to_numeric(kernels["measured_duration_ns"], errors="coerce")
    profiled = pd.to_numeric(kernels["duration_ns"], errors="coerce")
    return float(measured.fillna(profiled).fillna(0).sum())


def default_queue_limit_ns(hp_kernels: pd.DataFrame | None) -> int:
    """2.5% of the HP step's GPU time, or a fixed fallback without an HP profile."""
    if hp_kernels is None:
        return FALLBACK_QUEUE_LIMIT_NS
    step = step_gpu_time_ns(hp_kernels)
    return int(step * QUEUE_LIMIT_FRACTION) if step > 0 else FALLBACK_QUEUE_LIMIT_NS


def default_unknown_duration_ns(queue_limit_ns: int) -> int:
    """Duration assumed for an unprofiled kernel: the whole queue limit, so that a BE kernel
    nobody profiled only runs when no other BE work is queued."""
    return queue_limit_ns
