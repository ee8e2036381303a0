"""Default scheduling thresholds, derived from the HP client's profile and latency target.

Orion bounds the best-effort work queued on the GPU so that an arriving high-priority request
never waits behind much of it. The bound is what the HP request can afford to wait:

    queue limit = SLACK_SHARE x DEFAULT_SLOWDOWN x the HP step's GPU time

i.e. half of the 5% over the step's GPU time that orion's goal allows (HP p99 within 5% of
alone): 2.5% of the step, the bound the Orion paper used. The step's GPU time (the sum of its
profiled kernels' durations, un-instrumented where measured) is the part of the latency the GPU
must spend on the request itself. An arriving request can find up to one queue limit of BE work
let through ahead of it, so the bound takes half the slack and leaves the other half for what
else delays a request (host-side launching, a context switch).

A latency target can only tighten the bound: with a target the bound is the smaller of the above
and SLACK_SHARE x (target - the step's GPU time), never below MIN_QUEUE_LIMIT_NS. It used to
loosen it too, taking everything between the step's GPU time and a p99 target as slack; but a
p99 alone is far above the step's GPU time (requests queue behind one another, the host launches
them), so that slack was mostly spent already. Measured on an H100: an HP with a 1.2-ms step, a
2.39-ms p99 alone and a 2.6-ms target got a bound of about 790 us instead of 25 us, and its p99
went to 1.83x of alone. What a target asks of the BE work is now the daemon's latency controller's
to find, from the HP's measured slowdown (orion_daemon.latency_control).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # pandas only for the hints: the daemon and `orion up`/`orion run` import this module, and a
    # command started beside a latency-critical service must not spend ~0.3 s loading pandas.
    import pandas as pd

SLACK_SHARE = 0.5
DEFAULT_SLOWDOWN = 0.05
# The smallest bound: below it no BE kernel fits beside another, so each waits for an empty
# queue (which always admits one), and a smaller figure would change nothing.
MIN_QUEUE_LIMIT_NS = 1_000
# When there is no HP profile (or it is empty), a limit of this size still bounds the damage.
FALLBACK_QUEUE_LIMIT_NS = 50_000
# While an HP client with no profile has not been learned yet: its requests' length is unknown,
# so the bound is the one the rule gives a short step (0.4 ms of GPU time; the HP services
# measured so far have steps of 1.2-1.3 ms, a 30-us bound), not the fallback's 50 us. It holds
# from the HP's join to its learned step, so a BE client already running cannot hold its first
# requests up by more.
UNLEARNED_HP_QUEUE_LIMIT_NS = 10_000
# A launch older than this counts as finished even if no completion was ever seen (a context
# torn down mid-flight): far above any kernel of an inference or training step.
DEFAULT_STALE_NS = 5_000_000_000


def step_gpu_time_ns(kernels: pd.DataFrame) -> float:
    """GPU time of one profiled step: measured durations where present, ncu's otherwise."""
    import pandas as pd

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
    profile, or what the client learned online); the fallback when it is not. A target only
    ever makes the bound smaller."""
    if step_ns <= 0:
        return FALLBACK_QUEUE_LIMIT_NS
    slack = step_ns * DEFAULT_SLOWDOWN
    if latency_target_ns is not None:
        slack = min(slack, max(latency_target_ns - step_ns, 0.0))
    return int(max(SLACK_SHARE * slack, MIN_QUEUE_LIMIT_NS))


def learned_step_ns(learned: list[dict]) -> float:
    """The GPU time of an HP step from what the client learned online: its longest learned CUDA
    graph (a served request replayed as a graph is one step). 0 when it learned no graph with a
    duration yet: an eager client's step has no boundary the library can see, so its queue
    bound stays the fallback until an offline profile gives one."""
    durations = [int(e.get("duration_ns") or 0) for e in learned if e.get("graph")]
    return float(max(durations, default=0))


LEARNED_LAUNCH_SHARE = 0.99
"""The share of an eager HP's launches whose kernels must have learned durations before its
queue bound leaves the tight bound of its join for the fallback (and the latency loop starts). Not
every kernel: a rarely launched one may never get its samples, and the suite's eager encoder
service, 99.94% learned, stayed at the join's bound with the loop off for its whole run."""


def learned_enough(learned: list[dict]) -> bool:
    """Whether an HP's online profile covers enough of its work to steer by: kernels with a
    learned duration account for at least :data:`LEARNED_LAUNCH_SHARE` of its launches."""
    launches = sum(int(e.get("launches") or 0) for e in learned)
    known = sum(int(e.get("launches") or 0) for e in learned if int(e.get("duration_ns") or 0) > 0)
    return launches > 0 and known >= LEARNED_LAUNCH_SHARE * launches


def alone_latency_ns(kernels: pd.DataFrame | None, metadata: dict | None = None) -> float:
    """How long an HP request takes alone as its profile says: the step's wall time on the GPU
    (``step_gpu_span_ns``, a graph profile's) when it has one, else its kernels' GPU time; 0
    without a profile. A latency target below it cannot be met, whatever BE does."""
    span = float((metadata or {}).get("step_gpu_span_ns") or 0)
    return max(span, step_gpu_time_ns(kernels) if kernels is not None else 0.0)


def target_below_alone_refusal(alone_ns: float, latency_target_ns: float) -> str:
    """Why an HP's latency target is refused at join ('' when it is not): below what the HP takes
    alone, so no scheduling of BE work could meet it."""
    if alone_ns <= 0 or latency_target_ns >= alone_ns:
        return ""
    return (
        f"the latency target {latency_target_ns / 1e6:g} ms is below this HP's latency alone, "
        f"{alone_ns / 1e6:.3g} ms (its profile's step on the GPU): no sharing can meet it"
    )


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
