"""Default scheduling thresholds, derived from the HP client's profile and latency target.

Orion bounds the best-effort work queued on the GPU so that an arriving high-priority request
never waits behind much of it. The bound is what the HP request can afford to wait:

    queue limit = SLACK_SHARE x (latency target - the HP step's GPU time)

clamped to [MIN_QUEUE_LIMIT_NS, the HP step's GPU time]. The step's GPU time (the sum of its
profiled kernels' durations, un-instrumented where measured) is the part of the latency the
GPU must spend on the request itself; the rest of the target is slack. An arriving request can
find up to one queue limit of BE work let through ahead of it, so the bound takes half the slack
and leaves the other half for what else delays a request (host-side launching, requests queued
behind one another). A bound larger than the request's own GPU work is never needed to keep BE
busy between requests, so that is the ceiling.

Without a target, the target is the HP step's GPU time plus DEFAULT_SLOWDOWN (5%, orion's goal:
HP p99 within 5% of alone), which gives 2.5% of the step: the bound the Orion paper used, as a
special case of the rule rather than a constant of its own.
"""

from __future__ import annotations

import pandas as pd

SLACK_SHARE = 0.5
DEFAULT_SLOWDOWN = 0.05
# The smallest bound: below it no BE kernel fits beside another, so each waits for an empty
# queue (which always admits one), and a smaller figure would change nothing.
MIN_QUEUE_LIMIT_NS = 1_000
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


def default_queue_limit_ns(
    hp_kernels: pd.DataFrame | None, latency_target_ns: float | None = None
) -> int:
    """The BE queue bound for an HP client with these profiled kernels and this p99 latency
    target (None: 5% over its step's GPU time); the fixed fallback without an HP profile."""
    step = step_gpu_time_ns(hp_kernels) if hp_kernels is not None else 0.0
    return queue_limit_for_step_ns(step, latency_target_ns)


def queue_limit_for_step_ns(step_ns: float, latency_target_ns: float | None = None) -> int:
    """The rule above for an HP step of ``step_ns`` GPU time, however it is known (an offline
    profile, or what the client learned online); the fallback when it is not."""
    if step_ns <= 0:
        return FALLBACK_QUEUE_LIMIT_NS
    target = (
        latency_target_ns if latency_target_ns is not None else step_ns * (1 + DEFAULT_SLOWDOWN)
    )
    slack = max(target - step_ns, 0.0)
    return int(min(max(SLACK_SHARE * slack, MIN_QUEUE_LIMIT_NS), max(step_ns, MIN_QUEUE_LIMIT_NS)))


def learned_step_ns(learned: list[dict]) -> float:
    """The GPU time of an HP step from what the client learned online: its longest learned CUDA
    graph (a served request replayed as a graph is one step). 0 when it learned no graph with a
    duration yet: an eager client's step has no boundary the library can see, so its queue
    bound stays the fallback until an offline profile gives one."""
    durations = [int(e.get("duration_ns") or 0) for e in learned if e.get("graph")]
    return float(max(durations, default=0))


def target_below_step_warning(hp_kernels: pd.DataFrame | None, latency_target_ns: float) -> str:
    """A warning when the HP target cannot be met even alone ('' when it can)."""
    step = step_gpu_time_ns(hp_kernels) if hp_kernels is not None else 0.0
    if step <= 0 or latency_target_ns > step:
        return ""
    return (
        f"the HP latency target {latency_target_ns / 1e6:g} ms is not above the HP step's "
        f"profiled GPU time {step / 1e6:.3g} ms, so it cannot be met even alone; the BE queue "
        f"bound is the minimum, {MIN_QUEUE_LIMIT_NS / 1000:g} us"
    )


def default_unknown_duration_ns(queue_limit_ns: int) -> int:
    """Duration assumed for an unprofiled kernel: the whole queue limit, so that a BE kernel
    nobody profiled only runs when no other BE work is queued."""
    return queue_limit_ns
