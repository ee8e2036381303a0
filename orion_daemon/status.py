"""The daemon's clients and what `orion status` shows of each, from the library's own counters.

Rates come from the daemon's samples of those counters (every half second, the last few
kept), so they describe the last seconds, not the client's whole life. Field names carry their
units; ``--json`` prints exactly these dictionaries.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from orion_daemon.latency_control import Reading
from scheduler_core.profile_sources import (
    felt_p99,
    felt_tail,
    interference,
    profile_sources,
    tail_quantile,
    tail_slowdown,
)
from scheduler_core.settings import LOOP_READS
from scheduler_core.shares import NO_CAP, NO_PROMISE

HELD_REASONS = (
    "queue_full",
    "unknown_beside_hp",
    "hp_kernel_unknown",
    "not_enough_sms",
    "class_clash",
    "hp_backlog",
    "hp_busy",
    "sampling_hold",
    "hp_not_quiet",
)
"""Reasons a BE launch waited (the library counts each blocked launch once per reason)."""


REQUEST_FIGURES = (
    "requests_timed",
    "request_slowdown",
    "request_p99",
    "request_alone_p99",
    "request_p99_over_alone",
)
"""The status fields of an HP's requests timed whole (request_figures); None for a BE client."""


@dataclass(frozen=True)
class ClientSample:
    """One reading of the counters rates are taken from: launches (launches per second), the
    measured and expected GPU time of timed launches (the interference), and the felt and
    expected time of launches timed from their call to the end of their work (the felt
    slowdown)."""

    time_s: float
    launches: int
    sampled_ns: int = 0
    sampled_expected_ns: int = 0
    felt_ns: int = 0
    felt_expected_ns: int = 0
    felt_samples: int = 0
    felt_slower: tuple[int, ...] = ()  # felt samples above each of the library's tail ratios
    felt_alone_samples: int = 0  # of those, the ones that ran alone (layout 18)
    felt_alone_slower: tuple[int, ...] = ()
    start_felt_ns: int = 0  # the same of request starts, apart (layout 20)
    start_felt_expected_ns: int = 0
    start_felt_samples: int = 0
    start_felt_slower: tuple[int, ...] = ()
    requests_timed: int = 0  # an HP's requests timed whole (layout 22)
    request_ns: int = 0  # of those compared with its requests alone: their time and reference
    request_expected_ns: int = 0
    request_samples: int = 0
    request_slower: tuple[int, ...] = ()
    request_alone_samples: int = 0
    request_alone_slower: tuple[int, ...] = ()

    @classmethod
    def from_stats(cls, time_s: float, stats: dict[str, Any]) -> ClientSample:
        """The counters of the library's statistics (``Scheduler.client_stats``) by their own
        names: a count, or a list of counts (a tail); absent ones (an older library) 0 or ()."""
        counters: dict[str, Any] = {}
        for counter in fields(cls):
            if counter.name == "time_s":
                continue
            if str(counter.type).startswith("tuple"):
                counters[counter.name] = tuple(int(n) for n in stats.get(counter.name, ()))
            else:
                counters[counter.name] = int(stats.get(counter.name, 0))
        return cls(time_s=time_s, **counters)


@dataclass
class Client:
    """A client holding a slot, as the daemon knows it."""

    slot: int
    name: str
    role: str
    claim_pid: int
    command: list[str]
    profile: str | None
    memory_limit: int | None
    min_util: float
    max_util: float
    latency_target_ms: float | None
    joined_s: float
    hp_context: str | None = None
    """Under MPS, where the HP runs (``mps`` or ``own``: its choice, else the daemon's); None
    for a BE client and on a time-sliced daemon."""
    sm_percent: float | None = None
    """Under MPS, the SM share a BE client's kernels got as it joined (``--be-sm-percent``
    where an HP may run beside it in the server); None: every SM."""
    samples: deque[ClientSample] = field(default_factory=lambda: deque(maxlen=8))

    def record(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("samples")
        return data


def _launch_rate(samples: list[ClientSample]) -> float | None:
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    span = last.time_s - first.time_s
    return (last.launches - first.launches) / span if span > 0 else None


def _interference(samples: list[ClientSample], felt: bool = False) -> float | None:
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    if felt:
        slowdown = interference(
            last.felt_ns - first.felt_ns, last.felt_expected_ns - first.felt_expected_ns
        )
    else:
        slowdown = interference(
            last.sampled_ns - first.sampled_ns,
            last.sampled_expected_ns - first.sampled_expected_ns,
        )
    return None if slowdown is None else round(slowdown, 3)


def _tail_growth(
    samples: int, first_slower: tuple[int, ...], last_slower: tuple[int, ...]
) -> dict[float, float] | None:
    """The tail of the ``samples`` timed between two readings of one set of "slower than"
    counters; None where the counters' buckets differ between the readings."""
    if len(first_slower) != len(last_slower):
        return None
    slower = [b - a for a, b in zip(first_slower, last_slower, strict=True)]
    return felt_tail(samples, slower)


def _felt_tail_between(first: ClientSample, last: ClientSample) -> dict[float, float] | None:
    return _tail_growth(last.felt_samples - first.felt_samples, first.felt_slower, last.felt_slower)


def _start_felt(samples: list[ClientSample]) -> tuple[float | None, float | None]:
    """Over the samples kept, the HP's request starts as felt: their mean slowdown against
    alone and the largest tail ratio more than 1% of them exceeded (None with too few)."""
    if len(samples) < 2:
        return None, None
    first, last = samples[0], samples[-1]
    mean = interference(
        last.start_felt_ns - first.start_felt_ns,
        last.start_felt_expected_ns - first.start_felt_expected_ns,
    )
    tail = _tail_growth(
        last.start_felt_samples - first.start_felt_samples,
        first.start_felt_slower,
        last.start_felt_slower,
    )
    return mean, felt_p99(tail)


def _felt_tail(samples: list[ClientSample]) -> dict[float, float] | None:
    """Over the samples kept, the share of felt samples slower than each of the ratios."""
    return _felt_tail_between(samples[0], samples[-1]) if len(samples) >= 2 else None


def _alone_tail(samples: list[ClientSample]) -> dict[float, float] | None:
    """The felt tail of the HP's launches alone over its whole life so far: a baseline does not
    need to be recent, and beside BE that never pauses alone launches are rare."""
    if not samples:
        return None
    last = samples[-1]
    return felt_tail(last.felt_alone_samples, last.felt_alone_slower)


def _p99_over_alone(
    recent_tail: dict[float, float] | None, alone_tail: dict[float, float] | None
) -> tuple[float | None, float | None]:
    """(the p99 of a tail alone, a recent tail's p99 over it), both interpolated
    (tail_quantile); the ratio None without both."""
    alone = tail_quantile(alone_tail)
    recent = tail_quantile(recent_tail)
    if alone is None or recent is None:
        return alone, None
    return alone, recent / alone


def felt_p99_over_alone(samples: list[ClientSample]) -> tuple[float | None, float | None]:
    """(the p99 of the HP's felt launches alone, the recent felt p99 over it): a tail read
    against the HP's own scatter without BE, not against 1.0 (tail_quantile, interpolated).
    Measured to be read beside the p99 ratio; the latency loop does not act on it."""
    return _p99_over_alone(_felt_tail(samples), _alone_tail(samples))


def request_figures(samples: list[ClientSample]) -> dict[str, Any]:
    """An HP's requests timed whole (first launch call to the end of its last kernel, against
    the median of its requests alone; request_timer.h), over the samples kept: their mean
    slowdown, the p99 of their ratios from below (felt_p99), and that p99 interpolated over the
    p99 of its requests alone since it joined (the figure to read beside a measured p99 ratio).
    None where too few were timed, and all None before a request ran alone (nothing to compare
    with: ``requests_timed`` then says requests were timed)."""
    figures: dict[str, Any] = dict.fromkeys(REQUEST_FIGURES)
    figures["requests_timed"] = samples[-1].requests_timed if samples else 0
    if len(samples) < 2:
        return figures
    first, last = samples[0], samples[-1]
    mean = interference(
        last.request_ns - first.request_ns, last.request_expected_ns - first.request_expected_ns
    )
    tail = _tail_growth(
        last.request_samples - first.request_samples, first.request_slower, last.request_slower
    )
    alone_tail = felt_tail(last.request_alone_samples, last.request_alone_slower)
    alone_p99, over_alone = _p99_over_alone(tail, alone_tail)
    figures.update(
        request_slowdown=None if mean is None else round(mean, 4),
        request_p99=felt_p99(tail),
        request_alone_p99=None if alone_p99 is None else round(alone_p99, 4),
        request_p99_over_alone=None if over_alone is None else round(over_alone, 4),
    )
    return figures


def recent_reading(
    samples: list[ClientSample], period_s: float, reads: str = LOOP_READS.default
) -> Reading | None:
    """The client's slowdown over the last ``period_s`` of samples, what the daemon's latency
    loop reads (orion_daemon.latency_control). Reading ``requests`` (:data:`LOOP_READS`): the
    mean of its requests timed whole against its requests alone, and their tail where it is 2x
    or more, where requests were timed so in that span. Otherwise, or reading ``launches``: its
    mean as felt (launch call to the end of its work, against alone) where the library timed
    launches so, else the GPU time of its timed launches over what they took alone, and the
    felt tail where it is 2x or more; None without timed launches in that span."""
    if len(samples) < 2:
        return None
    last = samples[-1]
    first = next((s for s in samples if s.time_s >= last.time_s - period_s), samples[0])
    if first is last:
        first = samples[-2]
    if reads == "requests":
        requests = interference(
            last.request_ns - first.request_ns,
            last.request_expected_ns - first.request_expected_ns,
        )
        if requests is not None:
            tail = _tail_growth(
                last.request_samples - first.request_samples,
                first.request_slower,
                last.request_slower,
            )
            return Reading(requests, tail_slowdown(tail))
    felt = interference(
        last.felt_ns - first.felt_ns, last.felt_expected_ns - first.felt_expected_ns
    )
    # A p99 target is about the tail: what more than 1% of the felt samples exceeded
    # (scheduler_core.profile_sources.tail_slowdown), where that is 2x or more.
    tail = tail_slowdown(_felt_tail_between(first, last))
    mean = felt
    if mean is None:
        mean = interference(
            last.sampled_ns - first.sampled_ns,
            last.sampled_expected_ns - first.sampled_expected_ns,
        )
    if mean is None and tail is None:
        return None
    return Reading(1.0 if mean is None else mean, tail)


def request_shape(stats: dict[str, Any], sources: dict[str, Any]) -> dict[str, Any] | None:
    """An HP's work per request since it joined: its launches, graph launches and known GPU time
    (profiled or learned) over the requests it started (a launch 1 ms after its previous call
    and its previous work's end, and its first; layout 21). Long GPU work or many launches per
    request did best in a context of its own under MPS, about a millisecond in one graph in the
    MPS server (docs/scheduler.md).
    None for a BE client and before an HP's first request."""
    requests = int(stats.get("hp_requests", 0))
    if requests == 0:
        return None
    gpu_ms = sources["offline_gpu_ms"] + sources["online_gpu_ms"]
    return {
        "requests": requests,
        "launches_per_request": round(int(stats.get("launches", 0)) / requests, 2),
        "graphs_per_request": round(int(stats.get("graph_launches", 0)) / requests, 2),
        "gpu_ms_per_request": round(gpu_ms / requests, 4),
    }


def client_status(client: Client, stats: dict[str, Any]) -> dict[str, Any]:
    """One client's row of `orion status` (also its ``--json`` object)."""
    samples = list(client.samples)
    reasons = stats.get("reasons", {})
    held_by = {reason: int(reasons.get(reason, 0)) for reason in HELD_REASONS}
    launches_per_s = _launch_rate(samples)
    limit = int(stats.get("memory_limit", 0)) or None
    tail = _felt_tail(samples)
    alone_p99, over_alone = felt_p99_over_alone(samples)
    start_mean, start_p99 = _start_felt(samples)
    sources = profile_sources(stats)
    return {
        "name": client.name,
        "slot": client.slot,
        "pid": int(stats.get("pid") or 0) or client.claim_pid,
        "role": client.role,
        "state": stats.get("state"),
        "command": client.command,
        "profile": client.profile,
        "profiled_kernels": int(stats.get("profiled_kernels", 0)),
        "profiled_graphs": int(stats.get("profiled_graphs", 0)),
        "launches": int(stats.get("launches", 0)),
        "launches_per_s": None if launches_per_s is None else round(launches_per_s, 1),
        "gpu_share": round(float(stats.get("gpu_share", 0.0)), 4),
        "min_util": float(stats.get("min_util", NO_PROMISE)),
        "max_util": float(stats.get("max_util", NO_CAP)),
        "memory_used_bytes": int(stats.get("memory_used", 0)),
        "memory_peak_bytes": int(stats.get("memory_peak", 0)),
        "memory_limit_bytes": limit,
        "allocations_refused": int(stats.get("allocations_refused", 0)),
        "held_launches": int(stats.get("blocked_launches", 0)),
        "held_ms": round(float(stats.get("blocked_ns", 0)) / 1e6, 3),
        "gate_waits": int(stats.get("gate_waits", 0)),
        "held_by": {reason: count for reason, count in held_by.items() if count},
        "unknown_launches": int(stats.get("unknown_launches", 0)),
        "graph_launches": int(stats.get("graph_launches", 0)),
        "unknown_graph_launches": int(stats.get("unknown_graph_launches", 0)),
        "graphs_gated": int(stats.get("graphs_gated", 0)),
        "graphs_ungated": int(stats.get("graphs_ungated", 0)),
        # BE graphs split into segments launched through the gate, and why the first graph
        # orion could not bound runs whole ("" when none).
        "graphs_segmented": int(stats.get("graphs_segmented", 0)),
        "graph_segments": int(stats.get("graph_segments", 0)),
        "ungated_graph_why": str(stats.get("ungated_graph_why", "")),
        "unknown_kernels": list(stats.get("unknown_kernels", [])),
        # An HP's launches that asked BE to stand aside so its unlearned work is timed alone,
        # and the samples learned from while BE stood aside (docs/scheduler.md, sampling holds).
        "sampling_holds": int(stats.get("sampling_holds", 0)),
        "held_samples": int(stats.get("held_samples", 0)),
        # The same holds asked by an HP's request starts, for requests alone to compare its
        # requests timed whole with (request_timer.h).
        "request_holds": int(stats.get("request_holds", 0)),
        "profile_sources": sources,
        "request_shape": request_shape(stats, sources) if client.role == "hp" else None,
        # GPU time of its timed launches over what they took alone (profiled or learned alone),
        # over the last seconds: the slowdown the client suffers from its neighbours.
        "interference": _interference(samples),
        # The same as the program feels it: an HP launch from its call to the end of its work
        # (waiting for the GPU included), against alone, over the last seconds.
        "felt_slowdown": _interference(samples, felt=True),
        # Its tail: the share of those launches slower than each of the library's ratios (keys
        # "1.05x" to "8x"; None with too few of them); what the latency loop also reads, from 2x.
        "felt_tail": None if tail is None else {f"{r:g}x": round(s, 4) for r, s in tail.items()},
        # Their 99th percentile, from below: the largest ratio more than 1% of them exceeded
        # (1.0: none did), to read beside a p99 target.
        "felt_p99": felt_p99(tail),
        # The p99 of the felt ratio of its launches alone (since it joined: the baseline), and
        # the recent felt p99 over it (both interpolated between the ratios): the tail against
        # the HP's own scatter. Shown and recorded only; None until enough of either.
        "felt_alone_p99": None if alone_p99 is None else round(alone_p99, 4),
        "felt_p99_over_alone": None if over_alone is None else round(over_alone, 4),
        # The same felt figures of the HP's request starts alone (its first launch after 1 ms
        # without one): where a BE context left resident between requests costs it a switch,
        # which one felt launch in 64 of an eager HP seldom is. Shown and recorded only.
        "start_felt_slowdown": None if start_mean is None else round(start_mean, 4),
        "start_felt_p99": start_p99,
        # The HP's requests timed whole, from the first launch call to the end of the last
        # kernel, against its requests alone (request_figures): what a service's own timing of
        # its requests would say, queueing before the first launch apart. Shown and recorded.
        **(request_figures(samples) if client.role == "hp" else dict.fromkeys(REQUEST_FIGURES)),
        "latency_target_ms": client.latency_target_ms,
        "hp_context": client.hp_context,
        "sm_percent": client.sm_percent,
        "joined_s": round(client.joined_s, 3),
    }
