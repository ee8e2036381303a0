"""Where the HP tail comes from: each slow HP request attributed to what delayed it.

A p99 slowdown says *that* the HP client suffered, not *why*. With ``"trace": true`` the run
directory holds every kernel launch (``trace.csv``, run clock, profiled duration, and in new runs
the policy's ``reason``), so each HP request above its run's p95 can be set against the BE work
around it:

- **BE work already running when it arrived**: BE launches with ``launch_s < arrival_s`` whose
  profiled end (``launch_s + duration_ns / 1e9``) lies after the arrival. The GPU was (by the
  profile's estimate) still busy with them, so the request's first kernels had to share or wait.
  Their outstanding time is summed: ``launch_s + duration - arrival_s`` over them.
- **BE kernels admitted beside it**: BE launches with ``arrival_s <= launch_s < end_s``, i.e. the
  policy let them go while the request was being served; their ``reason`` says why
  (``fits_beside``, ``hp_idle``, ...), which is what to tune.
- **Waiting for the GPU to switch context** (time-sliced runs only: the ``timeslice`` policy,
  or ``run.sharing: "timeslice"``): the clients have contexts of their own and the driver runs
  one at a time, so BE work running at the arrival is not beside the request but in its way,
  holding the GPU until the driver switches to HP's context. The wait is counted from the arrival
  to the latest profiled end of that BE work, capped by the driver's timeslice, plus the switch
  itself (:data:`DRIVER_TIMESLICE_MS`, :data:`CONTEXT_SWITCH_MS`; docs/scheduler.md, "Sharing
  without MPS", says what is measured of them). In such a run it takes the place of "BE work
  already running" (0 there); under MPS it is 0.
- **HP-side time**: the rest. ``start_s - arrival_s`` is queueing behind earlier HP requests;
  what is left is the request's own service.

The causes overlap in time and the BE amounts are sums over kernels that may run side by side,
so they are not added up as measured. Each slow request's latency is split instead
(:func:`split_latency`): its *delay* is the latency minus an estimate of its service alone (the
median latency of the run's requests below p50: requests that met no interference), and the delay
is given, in this order and never more than is left, to HP queueing (measured by timestamps, so
trusted first), the wait for a context switch, BE outstanding at arrival, BE admitted beside;
whatever the delay does not cover plus the service alone is the rest. The five parts add up to
the latency, which is what the stacked bar shows.

Everything here is pure: DataFrames in, DataFrames out; nothing reads files or prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reporting.metrics import PERCENTILE_METHOD, run_labels, time_sliced, window_rows
from reporting.rundata import ClientInfo, RunData

SLOW_PERCENTILE = 95.0
"""Requests strictly above this percentile of their run's in-window latencies are "slow"."""
ALONE_PERCENTILE = 50.0
"""Requests strictly below this percentile are taken as served without interference."""
TOP_KERNELS = 3
"""How many BE kernel names ``be_running_kernels`` lists per request."""
DRIVER_TIMESLICE_MS: float | None = 2.09
"""How long the driver lets a context hold the GPU while another context has work: caps the
wait for a context switch. Measured on an H100 (driver 580.159, default compute policy) with
``benchmarks/timeslice_probe.py``: 2.091 ms, p10-p90 2.090-2.091 (docs/scheduler.md, "Sharing
without MPS"; benchmarks/results/nvidia-h100-80gb-hbm3/timeslice-probe/)."""
CONTEXT_SWITCH_MS = 0.151
"""What one switch of the GPU between contexts costs, added to each wait for one: 151 us on the
same H100 (p10-p90 151.0-151.6 us), by the same probe."""

NO_TRACE_NOTE = 'no kernel trace: the tail attribution needs `"trace": true` in the run config'
MISSING_TRACE_NOTE = (
    "no tail attribution: the run traced its kernels, but its trace is not in the run directory "
    "(traces are large and often not kept)"
)
"""The tail section's line for a run whose trace file is gone; the run's own note (a warning,
:mod:`reporting.rundata`) names the file, so a report says "trace.csv is missing" once."""


def no_trace_note(run: RunData) -> str:
    """Why a run has no tail attribution: it was not traced, or its trace file is gone."""
    traced = (run.config.get("run") or {}).get("trace") if isinstance(run.config, dict) else None
    return MISSING_TRACE_NOTE if traced else NO_TRACE_NOTE


NO_REASON = "not recorded"
"""The reason shown for launches of a trace from before ``reason`` was recorded."""

SLOW_REQUEST_COLUMNS = [
    "run",
    "client",
    "request",
    "arrival_s",
    "latency_ms",
    "queue_ms",
    "be_running_at_arrival_count",
    "be_outstanding_at_arrival_ms",
    "context_switch_ms",
    "be_admitted_count",
    "be_admitted_ms",
    "top_be_kernel",
    "be_running_kernels",
    "reasons",
    "service_alone_ms",
    "part_be_outstanding_ms",
    "part_context_switch_ms",
    "part_be_admitted_ms",
    "part_queue_ms",
    "part_rest_ms",
]
TAIL_SUMMARY_COLUMNS = [
    "run",
    "policy",
    "client",
    "traced",
    "requests",
    "p95_ms",
    "service_alone_ms",
    "slow_requests",
    "mean_latency_ms",
    "be_outstanding_ms",
    "context_switch_ms",
    "be_admitted_ms",
    "queue_ms",
    "rest_ms",
    "share_be_outstanding",
    "share_context_switch",
    "share_be_admitted",
    "share_queue",
    "share_rest",
    "top_be_kernel",
    "reasons",
    "note",
]
PARTS = (
    ("be_outstanding_ms", "BE outstanding at arrival"),
    ("context_switch_ms", "waiting for the GPU to switch context"),
    ("be_admitted_ms", "BE admitted beside"),
    ("queue_ms", "HP queueing"),
    ("rest_ms", "rest (HP service, unexplained)"),
)
"""Summary column and legend text of each part of a slow request's latency, bottom to top."""


@dataclass(frozen=True)
class LatencySplit:
    """One slow request's latency in five parts that add up to it (ms)."""

    be_outstanding_ms: float
    be_admitted_ms: float
    queue_ms: float
    rest_ms: float
    context_switch_ms: float = 0.0


def split_latency(
    latency_ms: float,
    service_alone_ms: float,
    queue_ms: float,
    be_outstanding_ms: float,
    be_admitted_ms: float,
    context_switch_ms: float = 0.0,
) -> LatencySplit:
    """Split ``latency_ms`` into parts that add up to it, so a stacked bar can show it.

    The delay (latency minus the service alone, at least 0) goes first to HP queueing (measured),
    then to the wait for a context switch, then to BE outstanding at arrival, then to BE admitted
    beside (estimates from profiled durations, possibly of kernels that ran side by side, so each
    is capped by what is left); the rest is the service alone plus any delay no cause covers.
    Missing inputs count as 0."""
    latency = max(_num(latency_ms), 0.0)
    left = max(latency - max(_num(service_alone_ms), 0.0), 0.0)
    parts = []
    for amount in (queue_ms, context_switch_ms, be_outstanding_ms, be_admitted_ms):
        taken = min(max(_num(amount), 0.0), left)
        parts.append(taken)
        left -= taken
    queue, switch, outstanding, admitted = parts
    return LatencySplit(
        be_outstanding_ms=outstanding,
        be_admitted_ms=admitted,
        queue_ms=queue,
        rest_ms=latency - queue - switch - outstanding - admitted,
        context_switch_ms=switch,
    )


def context_switch_wait_ms(
    running_ends_s: np.ndarray,
    arrival_s: float,
    timeslice_ms: float | None = DRIVER_TIMESLICE_MS,
    switch_ms: float = CONTEXT_SWITCH_MS,
) -> float:
    """How long a request arriving at ``arrival_s`` waits for the GPU to switch to its context,
    when BE work expected to end at ``running_ends_s`` holds it in another context: until the
    latest of those ends (the BE context keeps the GPU while it has work), at most one timeslice
    when that is known, plus the switch itself. 0 when no BE work holds the GPU."""
    ends = np.asarray(running_ends_s, dtype=float)
    ends = ends[np.isfinite(ends) & (ends > arrival_s)]
    if not ends.size:
        return 0.0
    hold_ms = (float(ends.max()) - arrival_s) * 1e3
    if timeslice_ms is not None:
        hold_ms = min(hold_ms, timeslice_ms)
    return hold_ms + switch_ms


def service_alone_ms(latencies_ms: np.ndarray) -> float:
    """The proxy for a request's own GPU time: the median latency of the requests below p50.

    Those met (nearly) no interference, so their latency is mostly service. When none lie
    strictly below p50 (all equal), the requests at p50 are used; NaN without requests."""
    data = np.asarray(latencies_ms, dtype=float)
    data = data[np.isfinite(data)]
    if not data.size:
        return float("nan")
    p50 = float(np.percentile(data, ALONE_PERCENTILE, method=PERCENTILE_METHOD))
    fast = data[data < p50]
    if not fast.size:
        fast = data[data <= p50]
    return float(np.median(fast))


def be_launches(run: RunData) -> pd.DataFrame | None:
    """The trace's BE launches sorted by ``launch_s``, with ``end_s`` (launch plus profiled
    duration); None for a run without a trace.

    BE is every traced client that is not an HP client of the run: a launch of an HP client
    delays another HP request only through HP queueing, which is counted apart. A launch
    without a profiled duration is taken to end at its launch (it cannot be estimated)."""
    if run.trace is None:
        return None
    hp_names = {c.name for c in run.clients if c.role == "hp"}
    trace = run.trace
    be = trace[~trace["client"].astype(str).isin(hp_names) & trace["launch_s"].notna()].copy()
    duration_s = be["duration_ns"].astype(float).fillna(0.0).clip(lower=0.0) / 1e9
    be["duration_ms"] = duration_s * 1e3
    be["end_s"] = be["launch_s"].astype(float) + duration_s
    if "reason" in be.columns:
        be["reason"] = be["reason"].astype(object).where(be["reason"].notna(), NO_REASON)
    else:
        be["reason"] = NO_REASON
    be["kernel_name"] = be["kernel_name"].astype(object).where(be["kernel_name"].notna(), "?")
    return be.sort_values("launch_s", kind="stable").reset_index(drop=True)


def slow_requests(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per slow HP request (latency above its run's p95) of every traced run, with what
    delayed it (columns ``SLOW_REQUEST_COLUMNS``, see the module docstring). Runs without a
    trace contribute no rows; :func:`tail_summary` says why."""
    frames = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        be = be_launches(run)
        if be is None:
            continue
        for client in _hp_clients(run):
            frames.append(_client_slow_requests(run, client, label, be))
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=SLOW_REQUEST_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SLOW_REQUEST_COLUMNS]


def tail_summary(runs: Sequence[RunData], slow: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run and HP client: how many requests are slow, the mean of each part of their latency
    (ms; the five add up to ``mean_latency_ms``) and each cause's mean share of a slow request's
    latency. A run without a trace gets one row with ``traced`` false and :data:`NO_TRACE_NOTE`.
    ``slow`` is ``slow_requests(runs)`` when the caller has it already."""
    slow = slow if slow is not None else slow_requests(runs)
    rows = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        for client in _hp_clients(run):
            latencies = window_rows(run, client)["latency_ms"].to_numpy(dtype=float)
            row: dict[str, object] = {
                "run": label,
                "policy": run.policy,
                "client": client.name,
                "traced": run.trace is not None,
                "requests": int(latencies.size),
                "p95_ms": _percentile(latencies, SLOW_PERCENTILE),
                "service_alone_ms": service_alone_ms(latencies),
                "note": None,
            }
            if run.trace is None:
                row["note"] = no_trace_note(run)
                rows.append(row)
                continue
            mine = slow[(slow["run"] == label) & (slow["client"] == client.name)]
            row["slow_requests"] = len(mine)
            if len(mine):
                latency = mine["latency_ms"].astype(float)
                row["mean_latency_ms"] = float(latency.mean())
                for column, _ in PARTS:
                    part = mine[f"part_{column}"].astype(float)
                    row[column] = float(part.mean())
                    share = (part / latency).where(latency > 0)
                    row[f"share_{column.removesuffix('_ms')}"] = float(share.mean())
                row["top_be_kernel"] = _most_common(mine["top_be_kernel"].dropna())
                row["reasons"] = _merge_counts(mine["reasons"])
            else:
                row["note"] = "no request above p95"
            rows.append(row)
    frame = pd.DataFrame(rows, columns=TAIL_SUMMARY_COLUMNS)
    if len(frame):
        frame["slow_requests"] = frame["slow_requests"].astype("Int64")
    return frame


def format_counts(counts: Counter[str]) -> str:
    """``fits_beside: 3, hp_idle: 1``: most frequent first, ties by name; "" for none."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name}: {count}" for name, count in ordered)


def parse_counts(text: object) -> Counter[str]:
    """The inverse of :func:`format_counts` (empty or missing text is no counts)."""
    counts: Counter[str] = Counter()
    if not isinstance(text, str) or not text.strip():
        return counts
    for item in text.split(", "):
        name, _, count = item.rpartition(": ")
        counts[name] += int(count)
    return counts


def _client_slow_requests(
    run: RunData, client: ClientInfo, label: str, be: pd.DataFrame
) -> pd.DataFrame:
    requests = window_rows(run, client)
    latencies = requests["latency_ms"].to_numpy(dtype=float)
    if not latencies.size:
        return pd.DataFrame(columns=SLOW_REQUEST_COLUMNS)
    p95 = _percentile(latencies, SLOW_PERCENTILE)
    alone = service_alone_ms(latencies)
    slow = requests[requests["latency_ms"].astype(float) > p95]

    launch = be["launch_s"].to_numpy(dtype=float)
    end = be["end_s"].to_numpy(dtype=float)
    duration_ms = be["duration_ms"].to_numpy(dtype=float)
    names = be["kernel_name"].astype(str).to_numpy()
    reasons = be["reason"].astype(str).to_numpy()
    # Only launches this far before an arrival can still be running at it.
    longest_s = float((end - launch).max()) if launch.size else 0.0

    # Time-sliced contexts: BE work running at the arrival holds the GPU in its own context.
    sliced = time_sliced(run)
    rows = []
    for record in slow.to_dict("records"):
        arrival = float(record["arrival_s"])
        finish = float(record["end_s"])
        latency = float(record["latency_ms"])
        start = record.get("start_s")
        queue = max((float(start) - arrival) * 1e3, 0.0) if _finite(start) else 0.0

        lo = int(np.searchsorted(launch, arrival - longest_s, side="left"))
        hi = int(np.searchsorted(launch, arrival, side="left"))
        before = np.arange(lo, hi)
        running = before[end[before] > arrival]
        outstanding_ms = float((end[running] - arrival).sum() * 1e3)
        by_name: Counter[str] = Counter(names[running].tolist())
        held_ms: dict[str, float] = {}
        for i in running:
            held_ms[names[i]] = held_ms.get(names[i], 0.0) + (end[i] - arrival) * 1e3

        a_lo = hi
        a_hi = int(np.searchsorted(launch, finish, side="left"))
        admitted = np.arange(a_lo, max(a_hi, a_lo))
        admitted_ms = float(duration_ms[admitted].sum())

        switch_ms = context_switch_wait_ms(end[running], arrival) if sliced else 0.0
        split = split_latency(
            latency, alone, queue, 0.0 if sliced else outstanding_ms, admitted_ms, switch_ms
        )
        rows.append(
            {
                "run": label,
                "client": client.name,
                "request": record["request"],
                "arrival_s": arrival,
                "latency_ms": latency,
                "queue_ms": queue,
                "be_running_at_arrival_count": len(running),
                "be_outstanding_at_arrival_ms": outstanding_ms,
                "context_switch_ms": switch_ms,
                "be_admitted_count": len(admitted),
                "be_admitted_ms": admitted_ms,
                # The kernel that held the GPU longest after the arrival.
                "top_be_kernel": (
                    min(held_ms, key=lambda name: (-held_ms[name], name)) if held_ms else None
                ),
                "be_running_kernels": format_counts(
                    Counter(
                        dict(sorted(by_name.items(), key=lambda i: (-i[1], i[0]))[:TOP_KERNELS])
                    )
                ),
                "reasons": format_counts(Counter(reasons[admitted].tolist())),
                "service_alone_ms": alone,
                "part_be_outstanding_ms": split.be_outstanding_ms,
                "part_context_switch_ms": split.context_switch_ms,
                "part_be_admitted_ms": split.be_admitted_ms,
                "part_queue_ms": split.queue_ms,
                "part_rest_ms": split.rest_ms,
            }
        )
    return pd.DataFrame(rows, columns=SLOW_REQUEST_COLUMNS)


def _hp_clients(run: RunData) -> list[ClientInfo]:
    return [c for c in run.clients if c.role == "hp" and c.is_inference]


def _percentile(values: np.ndarray, q: float) -> float:
    data = values[np.isfinite(values)]
    if not data.size:
        return float("nan")
    return float(np.percentile(data, q, method=PERCENTILE_METHOD))


def _most_common(values: pd.Series) -> str | None:
    counts = Counter(values.astype(str).tolist())
    if not counts:
        return None
    return min(counts, key=lambda name: (-counts[name], name))


def _merge_counts(texts: pd.Series) -> str:
    total: Counter[str] = Counter()
    for text in texts:
        total.update(parse_counts(text))
    return format_counts(total)


def _num(value: object) -> float:
    return float(value) if _finite(value) else 0.0  # type: ignore[arg-type]


def _finite(value: object) -> bool:
    try:
        return value is not None and bool(np.isfinite(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
