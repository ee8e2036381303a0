"""Per-client figures of merit, and the same figures relative to a dedicated (alone) run.

Definitions (everything in the reports follows from these):

- Each client is measured over its own window ``[window_start_s, window_end_s]`` (closed), from
  ``run.json``; it falls back to the run's ``measure_start_s``/``measure_end_s``. In a
  ``dedicated`` run the clients run alone one after another, so their windows differ.
- Inference: the requests that *arrived* inside the window and completed (``end_s`` present).
  Latency is ``latency_ms`` (from arrival, so queueing counts). Throughput is those requests
  divided by the measured window's length; samples/s multiplies by the batch size.
- Training: the iterations whose ``end_s`` lies inside the window. The latency columns hold
  iteration-duration percentiles; throughput is iterations (samples) per second of measured
  window.
- The measured window (:func:`measured_window`, ``window_s``) is the window itself, except in a
  run whose runner was stopped before the end (status ``incomplete``, or ``running`` when it was
  killed): there it ends where the run stopped, the latest moment any client recorded, since
  nothing was measured after it. Dividing by the planned length would count the time never run
  as time with no work done (a ``dedicated`` run stopped 12 s into its 20 s BE phase reported
  409 iterations / 20 s = 20.45 it/s for a job doing 409 / 12.06 s = 33.9 it/s).
- Percentiles use numpy's default linear interpolation (``numpy.percentile(..., method="linear")``):
  for n sorted values the q-th percentile sits at rank ``q/100 * (n - 1)``, interpolated.
- Against a dedicated run: ``hp_p99_slowdown = p99_shared / p99_alone`` (HP clients) and
  ``throughput_fraction = throughput_shared / throughput_alone`` (every client), matching
  clients by name, workload, mode, batch size and dtype.
- Headline per run: the HP slowdown (the worst HP client when there are several) and the BE
  throughput fraction, defined as the *mean of the per-BE-client fractions* (so each BE job
  counts equally, whatever its absolute speed). The target is met when
  ``hp_p99_slowdown <= 1.05`` and ``be_throughput_fraction >= 0.90``.
- Intervals (``*_ci_lo*``/``*_ci_hi*``, 95 %, ``reporting.stats``): an HP p99 from the percentile
  bootstrap of the client's in-window latencies; the slowdown from the bootstrap of the ratio
  of the two runs' p99s; a BE fraction from the bootstrap of the ratio of the two runs'
  throughputs, where a resample's throughput is its summed samples over its summed iteration
  durations. That ratio equals the window-based fraction up to the idle gaps between
  iterations; the interval shown is its relative spread (bounds over bootstrap point) applied
  to the window-based fraction, so it always brackets the number it belongs to. Training
  clients and closed-loop inference clients (a request's duration is its latency, the
  previous request's end being its arrival); an open-loop inference client's throughput is its
  arrival rate, nothing to resample. A headline interval is that of the client its value
  comes from; a BE fraction averaged over several BE clients has none.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from orion_common.run_format import GATING_POLICIES, GRAPH_GATING_POLICIES
from reporting.rundata import ClientInfo, RunData
from reporting.stats import (
    PERCENTILE_METHOD,
    Interval,
    bootstrap_percentile_ci,
    percentile_statistic,
    ratio_over_rounds_ci,
    throughput_statistic,
)
from scheduler_core.profile_sources import SOURCES, profile_sources
from scheduler_core.run_state import BE_GRAPH_GATES
from scheduler_core.sharing import DEFAULT_RUN_BE_GRAPH_GATE

POLICY_DEDICATED = "dedicated"
HP_P99_SLOWDOWN_MAX = 1.05
BE_FRACTION_MIN = 0.90
HP_QUANTILE = 99.0
# Ratios exactly on a limit count as meeting it; this absorbs float round-off (1.05 computed as
# 1.0500000000000003) and nothing a measurement could resolve.
LIMIT_TOLERANCE = 1e-9
UNDECIDED = "undecided"
"""``target_met`` when the 95% intervals cannot tell yes from no (an interval across a bound, or
a baseline too noisy to judge the target)."""
BASELINE_P99_TOLERANCE = 0.05
"""A ``dedicated`` run whose HP p99 interval reaches beyond ±5% of its p99 cannot judge a 5%
target."""

CLIENT_SUMMARY_COLUMNS = [
    "run",
    "policy",
    "complete",
    "client",
    "role",
    "workload",
    "mode",
    "batch_size",
    "dtype",
    "window_s",
    "count",
    "unfinished",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "mean_ms",
    "throughput_per_s",
    "samples_per_s",
    "offered_per_s",
    "exit_code",
    "errors",
]

RELATIVE_COLUMNS = [
    "run",
    "policy",
    "complete",
    "baseline",
    "client",
    "role",
    "workload",
    "mode",
    "batch_size",
    "matched",
    "p99_ms",
    "p99_alone_ms",
    "hp_p99_ci_lo_ms",
    "hp_p99_ci_hi_ms",
    "hp_p99_slowdown",
    "hp_p99_slowdown_ci_lo",
    "hp_p99_slowdown_ci_hi",
    "throughput_per_s",
    "throughput_alone_per_s",
    "throughput_fraction",
    "throughput_fraction_ci_lo",
    "throughput_fraction_ci_hi",
    "samples_per_s",
    "samples_alone_per_s",
]

HEADLINE_COLUMNS = [
    "run",
    "policy",
    "complete",
    "is_baseline",
    "baseline",
    "hp_clients",
    "hp_p99_ms",
    "hp_p99_ci_lo_ms",
    "hp_p99_ci_hi_ms",
    "hp_p99_alone_ms",
    "hp_p99_slowdown",
    "hp_p99_slowdown_ci_lo",
    "hp_p99_slowdown_ci_hi",
    "be_clients",
    "be_throughput_per_s",
    "be_throughput_fraction",
    "be_throughput_fraction_ci_lo",
    "be_throughput_fraction_ci_hi",
    "hp_target_met",
    "be_target_met",
    "target_met",
    "hp_slowdown_excess",
    "be_fraction_shortfall",
]

SCHEDULER_COLUMNS = [
    "run",
    "policy",
    "client",
    "launches",
    "unknown_launches",
    "offline_share",
    "online_share",
    "unknown_share",
    "blocked_launches",
    "blocked_ms",
]
"""``*_share``: the share of the client's tracked launches gated with its offline profile, with
kernels it learned online, or as unknown work (:mod:`scheduler_core.profile_sources`)."""


def time_sliced(run: RunData) -> bool:
    """The run's clients had contexts of their own that the driver switched the GPU between:
    the ``timeslice`` policy, or a policy told ``run.sharing: "timeslice"``."""
    run_section = run.config.get("run")
    sharing = run_section.get("sharing") if isinstance(run_section, dict) else None
    return run.policy == "timeslice" or sharing == "timeslice"


def sharing_setting(run: RunData) -> str | None:
    """``"timeslice"`` when a policy that shares through MPS by default ran time-sliced: a knob
    of the run, named in its label; None otherwise (the ``timeslice`` policy is so by name)."""
    return "timeslice" if time_sliced(run) and run.policy != "timeslice" else None


def policy_label(run: RunData) -> str:
    """The policy with the knob settings the run made: the BE queue bound (``orion@500us``), where
    held BE launches wait when the jobs file says (``orion@gpu-gate``), graphs admitted whole
    held otherwise than their sharing mode's default (``orion@whole-graphs`` under MPS,
    ``orion@inside-graphs@timeslice``), time-sliced contexts instead of MPS
    (``orion@timeslice``), per-client SM shares (``mps-share@be50``, client name then percent)
    and clients learned online (``orion@online``). Runs of one policy that differ only in a knob
    are a sweep and must be told apart by it."""
    run_section = run.config.get("run")
    thresholds = (run_section.get("thresholds") if isinstance(run_section, dict) else None) or {}
    limit = thresholds.get("queue_limit_us") if isinstance(thresholds, dict) else None
    label = run.policy
    if _is_number(limit):
        label += f"@{limit:g}us"
    gate = run_section.get("be_gate") if isinstance(run_section, dict) else None
    if isinstance(gate, str) and run.policy in GATING_POLICIES:
        label += f"@{gate}-gate"
    if graph_gate_setting(run) is not None:
        label += f"@{graph_gate_setting(run)}-graphs"
    if sharing_setting(run) is not None:
        label += f"@{sharing_setting(run)}"
    clients = run.config.get("clients")
    shares = [
        f"{client.get('name')}{client['sm_percent']:g}"
        for client in (clients if isinstance(clients, list) else [])
        if isinstance(client, dict) and _is_number(client.get("sm_percent"))
    ]
    if shares:
        label += "@" + "+".join(shares)
    if any(
        isinstance(client, dict) and client.get("profile_source") == "online"
        for client in (clients if isinstance(clients, list) else [])
    ):
        label += "@online"
    if hp_alone(run):
        label += "@hp-alone"
    return label


def graph_gate_setting(run: RunData) -> str | None:
    """How a policy that holds BE graphs held them (``run.be_graph_gate``) when that differs from
    the default (``DEFAULT_RUN_BE_GRAPH_GATE``, segments), a knob named in the label:
    ``"whole"`` (admitted whole behind their launch's gate), ``"inside"`` (wait nodes inside
    them). None otherwise, and for a run that does not record it."""
    run_section = run.config.get("run")
    setting = run_section.get("be_graph_gate") if isinstance(run_section, dict) else None
    if run.policy not in GRAPH_GATING_POLICIES or setting not in BE_GRAPH_GATES:
        return None
    return None if setting == DEFAULT_RUN_BE_GRAPH_GATE else setting


def hp_alone(run: RunData) -> bool:
    """A run of a sharing policy with the HP client and nothing beside it (``mps@hp-alone``):
    what the policy's mechanism alone costs the HP, against a dedicated GPU."""
    clients = run.config.get("clients")
    return (
        run.policy != POLICY_DEDICATED
        and isinstance(clients, list)
        and bool(clients)
        and all(isinstance(client, dict) and client.get("role") == "hp" for client in clients)
    )


def run_labels(runs: Sequence[RunData]) -> list[str]:
    """A short, unique name per run: the label its loader gave it (``RunData.label``), else its
    policy label (:func:`policy_label`) when no other run shares it, else its dir name."""
    by_policy = [policy_label(r) for r in runs]
    policies = Counter(by_policy)
    labels = [
        r.label or (label if policies[label] == 1 else r.name)
        for r, label in zip(runs, by_policy, strict=True)
    ]
    totals = Counter(labels)
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        if totals[label] > 1:
            seen[label] += 1
            label = f"{label} ({seen[label]})"
        unique.append(label)
    return unique


def client_window(run: RunData, client: ClientInfo) -> tuple[float, float] | None:
    """The client's measurement window, falling back to the run's; None when neither is known."""
    start = client.window_start_s if client.window_start_s is not None else run.measure_start_s
    end = client.window_end_s if client.window_end_s is not None else run.measure_end_s
    if start is None or end is None or end <= start:
        return None
    return start, end


def measured_window(run: RunData, client: ClientInfo) -> tuple[float, float] | None:
    """The part of the client's window that was actually measured: what its throughput is per.

    A run that went through its schedule (``complete``, or ``failed``) measured every window to
    its planned end, so this is :func:`client_window`, and such a run's figures are per planned
    window as always (a client that failed mid-window included: the time it lost counts
    against it). A run whose runner was stopped (Ctrl-C or a timeout: ``incomplete``) or killed
    (``running``) measured only up to the stop, and ``run.json`` keeps the planned ends, not the
    stop, so the window ends at :func:`_stopped_at` if that is earlier. That moment is the
    run's, not the client's own last row: clients measuring together are stopped together, so
    a client that was slow or starved just before the stop is not given a shorter window than
    its neighbours (as in a complete run), and a ``dedicated`` phase that a later one followed
    keeps its whole window. The end is never after the planned one (rows written while draining
    past it do not stretch it); a window in which nothing was recorded has length 0, so its
    throughput is unknown rather than 0.

    Only the length changes: rows are still chosen by :func:`client_window`, and none lies
    after the stop, so counts and latencies are the same either way.
    """
    window = client_window(run, client)
    if window is None or not run.stopped_early:
        return window
    start, end = window
    return start, min(end, _stopped_at(run, start))


def _stopped_at(run: RunData, start: float) -> float:
    """The latest run-clock moment the run is known to have been measuring, at least ``start``
    (a window's own start): the latest time in any client table (an arrival, a start or an end;
    an unserved request's row has only its arrival, which still shows its client was measuring
    then) or the start of any client's window (a phase that began shows that the one before it
    ran to its end). ``gpu.csv`` does not count: its monitor samples on while the clients are
    being stopped."""
    times = [_last_recorded_s(table) for table in run.tables.values()]
    times += [w[0] for w in (client_window(run, c) for c in run.clients) if w is not None]
    return max([start, *(t for t in times if t is not None)])


def window_rows(run: RunData, client: ClientInfo) -> pd.DataFrame:
    """The rows that count for ``client``: completed requests that arrived in the window, or
    iterations that ended in it. Inference rows get ``latency_ms`` filled from the timestamps
    where the writer left it empty."""
    table = run.tables[client.name]
    window = client_window(run, client)
    if client.is_inference:
        table = _with_latency(table)
        done = table["end_s"].notna() & table["latency_ms"].notna()
        if window is None:
            return table[done]
        inside = table["arrival_s"].between(window[0], window[1], inclusive="both")
        return table[done & inside]
    done = table["end_s"].notna()
    if window is None:
        return table[done]
    return table[done & table["end_s"].between(window[0], window[1], inclusive="both")]


def percentile_summary(values: Sequence[float] | np.ndarray | pd.Series) -> dict[str, float]:
    """p50/p95/p99 (numpy linear interpolation), max and mean; NaN for no values."""
    data = np.asarray(values, dtype=float)
    data = data[~np.isnan(data)]
    if data.size == 0:
        return {k: float("nan") for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms")}
    p50, p95, p99 = np.percentile(data, [50, 95, 99], method=PERCENTILE_METHOD)
    return {
        "p50_ms": float(p50),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "max_ms": float(data.max()),
        "mean_ms": float(data.mean()),
    }


def latency_sample(run: RunData, client: ClientInfo) -> np.ndarray:
    """The in-window request latencies (ms) of an inference client: what its p99 is taken of
    and what its interval resamples."""
    if not client.is_inference:
        raise ValueError(f"client {client.name!r} is not an inference client")
    return window_rows(run, client)["latency_ms"].to_numpy(dtype=float)


def work_sample(run: RunData, client: ClientInfo) -> np.ndarray | None:
    """Rows ``(duration_s, samples)`` of a client's in-window units of work, for
    :func:`reporting.stats.throughput_statistic`: a training client's iterations, a closed-loop
    inference client's requests (latency from arrival, which is when the previous one ended);
    None for an open-loop inference client, whose throughput is its arrival rate (see the module
    docstring)."""
    if client.is_inference and not client.is_closed_loop:
        return None
    rows = window_rows(run, client)
    if client.is_inference:
        durations_ms = rows["latency_ms"].to_numpy(dtype=float)
        samples = np.full(len(rows), float(client.batch_size or 1))
    else:
        durations_ms = rows["duration_ms"].to_numpy(dtype=float)
        column = rows["samples"]
        if client.batch_size is not None:
            column = column.fillna(client.batch_size)
        samples = column.to_numpy(dtype=float)
    return np.column_stack([durations_ms / 1000.0, samples])


def hp_p99_interval(run: RunData, client: ClientInfo) -> Interval:
    """The client's p99 with its 95 % bootstrap interval, computed once per run and client
    (tables are built from several calls, and each bootstrap costs a fraction of a second)."""
    cache = _P99_INTERVALS.setdefault(run, {})
    if client.name not in cache:
        cache[client.name] = bootstrap_percentile_ci(latency_sample(run, client), q=HP_QUANTILE)
    return cache[client.name]


_P99_INTERVALS: weakref.WeakKeyDictionary[RunData, dict[str, Interval]] = (
    weakref.WeakKeyDictionary()
)


def client_summary(run: RunData, label: str | None = None) -> pd.DataFrame:
    """One row per client of ``run`` (columns: ``CLIENT_SUMMARY_COLUMNS``).

    ``label`` names the run in the ``run`` column; alone, a run is labelled by its policy.
    """
    label = label if label is not None else run.policy
    rows = [_client_row(run, info, label) for info in run.clients]
    return pd.DataFrame(rows, columns=CLIENT_SUMMARY_COLUMNS)


def compare_runs(runs: Sequence[RunData]) -> pd.DataFrame:
    """Every client of every run, one row each; rows of one client are adjacent (HP clients
    first, then by name), and within a client the runs keep the order they were given, so the
    same job under each policy reads side by side."""
    labels = run_labels(runs)
    frames = [client_summary(run, label) for run, label in zip(runs, labels, strict=True)]
    rows = [row for frame in frames for row in frame.to_dict("records")]
    if not rows:
        return pd.DataFrame(columns=CLIENT_SUMMARY_COLUMNS)
    run_order = {label: i for i, label in enumerate(labels)}
    first_seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        first_seen.setdefault(row["client"], i)
    rows.sort(
        key=lambda r: (
            0 if r["role"] == "hp" else 1,
            first_seen[r["client"]],
            run_order[r["run"]],
        )
    )
    return pd.DataFrame(rows, columns=CLIENT_SUMMARY_COLUMNS).reset_index(drop=True)


def find_baseline(runs: Sequence[RunData]) -> RunData | None:
    """The first run with policy ``dedicated``, which every other run is compared against."""
    return next((r for r in runs if r.policy == POLICY_DEDICATED), None)


def round_baselines(
    runs: Sequence[RunData], baseline: RunData | None = None
) -> list[RunData | None]:
    """Each run's ``dedicated`` reference, aligned with ``runs``.

    With ``baseline`` given, or at most one ``dedicated`` run, every run is compared with that
    one. With several (interleaved rounds, as ``benchmarks/matrix.py`` runs them: each round's
    ``dedicated`` first, then the policies), each run is compared with its own round's: the last
    ``dedicated`` run that started before it. A ``dedicated`` run is its own reference (it is
    not graded against another round's), and a run that started before every ``dedicated`` run,
    or whose start time is not recorded, has none: it cannot be judged.
    """
    dedicated = [run for run in runs if run.policy == POLICY_DEDICATED]
    if baseline is not None or len(dedicated) <= 1:
        reference = baseline if baseline is not None else (dedicated[0] if dedicated else None)
        return [reference for _ in runs]
    starts = [(run.started_utc or "", run) for run in dedicated if run.started_utc]
    starts.sort(key=lambda item: item[0])
    out: list[RunData | None] = []
    for run in runs:
        if run.policy == POLICY_DEDICATED:
            out.append(run)
            continue
        before = [ref for start, ref in starts if run.started_utc and start <= run.started_utc]
        out.append(before[-1] if before else None)
    return out


def relative_to_dedicated(runs: Sequence[RunData], baseline: RunData | None = None) -> pd.DataFrame:
    """Each client of each non-baseline run against the same client alone (``RELATIVE_COLUMNS``).

    Each run is compared with its reference (:func:`round_baselines`: ``baseline``, the one
    ``dedicated`` run, or the run's own round's); a run without one has no rows. A client with
    no counterpart in the reference gets ``matched=False`` and NaN ratios.
    """
    references = round_baselines(runs, baseline)
    labels = run_labels(runs)
    rows: list[dict[str, Any]] = []
    summaries: dict[int, dict[str, dict[str, Any]]] = {}
    for run, label, baseline in zip(runs, labels, references, strict=True):
        if baseline is None or run is baseline:
            continue
        base_label = labels[_index_of(runs, baseline)]
        if id(baseline) not in summaries:
            summaries[id(baseline)] = {
                row["client"]: row
                for row in client_summary(baseline, base_label).to_dict("records")
            }
        base_rows = summaries[id(baseline)]
        for row in client_summary(run, label).to_dict("records"):
            alone = base_rows.get(row["client"])
            matched = alone is not None and all(
                _same(row[k], alone[k]) for k in ("workload", "mode", "batch_size", "dtype")
            )
            nan = float("nan")
            p99_alone = alone["p99_ms"] if matched else nan
            tput_alone = alone["throughput_per_s"] if matched else nan
            samples_alone = alone["samples_per_s"] if matched else nan
            fraction = _ratio(row["throughput_per_s"], tput_alone)
            intervals = _client_intervals(
                run, baseline if matched else None, row["client"], fraction
            )
            rows.append(
                {
                    "run": label,
                    "policy": run.policy,
                    "complete": run.complete,
                    "baseline": base_label,
                    "client": row["client"],
                    "role": row["role"],
                    "workload": row["workload"],
                    "mode": row["mode"],
                    "batch_size": row["batch_size"],
                    "matched": matched,
                    "p99_ms": row["p99_ms"],
                    "p99_alone_ms": p99_alone,
                    "hp_p99_ci_lo_ms": intervals["p99"][1],
                    "hp_p99_ci_hi_ms": intervals["p99"][2],
                    "hp_p99_slowdown": _ratio(row["p99_ms"], p99_alone)
                    if row["role"] == "hp"
                    else nan,
                    "hp_p99_slowdown_ci_lo": intervals["slowdown"][1] if matched else nan,
                    "hp_p99_slowdown_ci_hi": intervals["slowdown"][2] if matched else nan,
                    "throughput_per_s": row["throughput_per_s"],
                    "throughput_alone_per_s": tput_alone,
                    "throughput_fraction": fraction,
                    "throughput_fraction_ci_lo": intervals["fraction"][1] if matched else nan,
                    "throughput_fraction_ci_hi": intervals["fraction"][2] if matched else nan,
                    "samples_per_s": row["samples_per_s"],
                    "samples_alone_per_s": samples_alone,
                }
            )
    return pd.DataFrame(rows, columns=RELATIVE_COLUMNS)


def headline(
    runs: Sequence[RunData],
    baseline: RunData | None = None,
    *,
    hp_slowdown_max: float = HP_P99_SLOWDOWN_MAX,
    be_fraction_min: float = BE_FRACTION_MIN,
    relative: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per run: HP p99 slowdown, BE throughput fraction and whether the target is met,
    each with its 95 % interval (module docstring).

    ``relative`` is ``relative_to_dedicated(runs, baseline)`` when the caller has it already
    (its intervals are the costly part).

    The baseline run itself is included (slowdown and fraction 1 by definition,
    ``is_baseline=True``, target not judged). Without a baseline the ratios are NaN and the
    target columns are None ("cannot be judged"). A side with no client of that role (say, no BE
    job) does not count against the target; a side whose ratio is unknown (no completed HP
    request, no matching dedicated client) makes the verdict None.
    """
    references = round_baselines(runs, baseline)
    labels = run_labels(runs)
    if relative is None:
        relative = relative_to_dedicated(runs, baseline)
    rows = []
    for run, label, baseline in zip(runs, labels, references, strict=True):
        base_label = labels[_index_of(runs, baseline)] if baseline is not None else None
        base_summary = (
            client_summary(baseline, base_label) if baseline is not None else pd.DataFrame()
        )
        summary = client_summary(run, label)
        hp = summary[summary["role"] == "hp"]
        be = summary[summary["role"] != "hp"]
        row: dict[str, Any] = {
            "run": label,
            "policy": run.policy,
            "complete": run.complete,
            "is_baseline": run is baseline,
            "baseline": base_label,
            "hp_clients": ", ".join(hp["client"]),
            "hp_p99_ms": _nanmax(hp["p99_ms"]),
            **_headline_p99_interval(run, hp),
            "be_clients": len(be),
            "be_throughput_per_s": float(be["throughput_per_s"].sum(min_count=1)),
        }
        if run is baseline:
            row.update(
                hp_p99_alone_ms=row["hp_p99_ms"],
                # 1 by definition, where there is something measured to compare with.
                hp_p99_slowdown=1.0 if row["hp_p99_ms"] > 0 else float("nan"),
                be_throughput_fraction=1.0 if row["be_throughput_per_s"] > 0 else float("nan"),
                hp_target_met=None,
                be_target_met=None,
                target_met=None,
            )
        else:
            mine = relative[relative["run"] == label] if len(relative) else relative
            row.update(_headline_ratio_intervals(mine))
            row.update(
                _judge(
                    mine,
                    has_hp=len(hp) > 0,
                    has_be=len(be) > 0,
                    have_baseline=baseline is not None,
                    base_hp_p99=_nanmax(
                        base_summary.loc[base_summary["role"] == "hp", "p99_ms"]
                        if len(base_summary)
                        else pd.Series(dtype=float)
                    ),
                    hp_slowdown_max=hp_slowdown_max,
                    be_fraction_min=be_fraction_min,
                )
            )
        if run is not baseline:
            row["target_met"] = _decided(row, hp_slowdown_max, be_fraction_min)
        slowdown = row["hp_p99_slowdown"]
        fraction = row["be_throughput_fraction"]
        row["hp_slowdown_excess"] = _excess(slowdown, hp_slowdown_max)
        row["be_fraction_shortfall"] = _excess(be_fraction_min, fraction)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=HEADLINE_COLUMNS)
    for column in ("hp_target_met", "be_target_met", "target_met"):
        frame[column] = frame[column].astype(object)
    _undecided_by_noisy_baselines(frame)
    return frame


def _straddles(lo: float, hi: float, bound: float) -> bool:
    """The 95% interval [lo, hi] has values on both sides of ``bound``."""
    return bool(np.isfinite(lo) and np.isfinite(hi) and lo <= bound < hi)


def _decided(row: dict[str, Any], hp_slowdown_max: float, be_fraction_min: float) -> Any:
    """``target_met`` as yes (True), no (False), ``UNDECIDED`` when a side's 95% interval
    reaches across its bound (the point estimate alone would be a coin flip), or None when it
    cannot be judged at all. A side whose whole interval is out of bounds is a "no" either way."""
    verdict = row["target_met"]
    if verdict is None:
        return None
    hp_lo, hp_hi = (
        row.get("hp_p99_slowdown_ci_lo", np.nan),
        row.get("hp_p99_slowdown_ci_hi", np.nan),
    )
    be_lo = row.get("be_throughput_fraction_ci_lo", np.nan)
    be_hi = row.get("be_throughput_fraction_ci_hi", np.nan)
    # a side whose interval is unknown (a mean over several BE clients) is judged by its value
    hp_out = row.get("hp_target_met") is False and not np.isfinite(hp_lo)
    be_out = row.get("be_target_met") is False and not np.isfinite(be_hi)
    hp_out = hp_out or (np.isfinite(hp_lo) and hp_lo > hp_slowdown_max + LIMIT_TOLERANCE)
    be_out = be_out or (np.isfinite(be_hi) and be_hi < be_fraction_min - LIMIT_TOLERANCE)
    if hp_out or be_out:
        return False
    if _straddles(hp_lo, hp_hi, hp_slowdown_max + LIMIT_TOLERANCE) or _straddles(
        be_lo, be_hi, be_fraction_min - LIMIT_TOLERANCE
    ):
        return UNDECIDED
    return verdict


def _undecided_by_noisy_baselines(frame: pd.DataFrame) -> None:
    """A verdict against a ``dedicated`` run whose own HP p99 is not known to within
    ±``BASELINE_P99_TOLERANCE`` cannot be a yes or a no: the report warns that this baseline is
    too noisy to judge the target, so a "yes" must not claim otherwise (a "no" whose whole
    interval is out of bounds stands: the ratio's interval already carries the baseline's
    noise)."""
    noisy = set()
    for row in frame[frame["is_baseline"].astype(bool)].to_dict("records"):
        p99, lo, hi = row["hp_p99_ms"], row.get("hp_p99_ci_lo_ms"), row.get("hp_p99_ci_hi_ms")
        if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in (p99, lo, hi)):
            continue
        if p99 > 0 and (
            lo < (1 - BASELINE_P99_TOLERANCE) * p99 or hi > (1 + BASELINE_P99_TOLERANCE) * p99
        ):
            noisy.add(row["run"])
    for index, row in frame.iterrows():
        if not row["is_baseline"] and row["baseline"] in noisy and row["target_met"] is True:
            frame.at[index, "target_met"] = UNDECIDED


def _client_intervals(
    run: RunData, baseline: RunData | None, name: str, fraction: float
) -> dict[str, Interval]:
    """The client's p99 interval (HP inference clients), and its slowdown and throughput
    fraction intervals against the same-named client of ``baseline`` (module docstring);
    ``fraction`` is the window-based throughput fraction the interval is placed around."""
    nan: Interval = (float("nan"),) * 3
    out = {"p99": nan, "slowdown": nan, "fraction": nan}
    info = run.client(name)
    alone = None
    if baseline is not None:
        alone = next((c for c in baseline.clients if c.name == name), None)
    if info.role == "hp" and info.is_inference:
        out["p99"] = hp_p99_interval(run, info)
        if baseline is not None and alone is not None and alone.is_inference:
            pair = (latency_sample(run, info), latency_sample(baseline, alone))
            out["slowdown"] = ratio_over_rounds_ci([pair], percentile_statistic(HP_QUANTILE))
    if baseline is not None and alone is not None:
        shared_work, alone_work = work_sample(run, info), work_sample(baseline, alone)
        if shared_work is not None and alone_work is not None:
            pair = (shared_work, alone_work)
            point, lo, hi = ratio_over_rounds_ci([pair], throughput_statistic)
            scale = fraction / point if point > 0 else float("nan")
            out["fraction"] = (fraction, lo * scale, hi * scale)
    return out


def _headline_p99_interval(run: RunData, hp: pd.DataFrame) -> dict[str, float]:
    """The interval of the HP client with the highest p99, the one ``hp_p99_ms`` shows."""
    nan = float("nan")
    p99 = pd.to_numeric(hp["p99_ms"], errors="coerce")
    if not p99.notna().any():
        return {"hp_p99_ci_lo_ms": nan, "hp_p99_ci_hi_ms": nan}
    info = run.client(str(hp.loc[p99.idxmax(), "client"]))
    if not info.is_inference:
        return {"hp_p99_ci_lo_ms": nan, "hp_p99_ci_hi_ms": nan}
    _, lo, hi = hp_p99_interval(run, info)
    return {"hp_p99_ci_lo_ms": lo, "hp_p99_ci_hi_ms": hi}


def _headline_ratio_intervals(relative: pd.DataFrame) -> dict[str, float]:
    """The slowdown interval of the worst HP client, and the BE fraction interval when one BE
    client makes the fraction (a mean over several has none)."""
    nan = float("nan")
    out = {
        "hp_p99_slowdown_ci_lo": nan,
        "hp_p99_slowdown_ci_hi": nan,
        "be_throughput_fraction_ci_lo": nan,
        "be_throughput_fraction_ci_hi": nan,
    }
    if not len(relative):
        return out
    hp = relative[relative["role"] == "hp"]
    slowdowns = pd.to_numeric(hp["hp_p99_slowdown"], errors="coerce")
    if slowdowns.notna().any():
        worst = hp.loc[slowdowns.idxmax()]
        out["hp_p99_slowdown_ci_lo"] = float(worst["hp_p99_slowdown_ci_lo"])
        out["hp_p99_slowdown_ci_hi"] = float(worst["hp_p99_slowdown_ci_hi"])
    be = relative[relative["role"] != "hp"]
    if len(be) == 1:
        out["be_throughput_fraction_ci_lo"] = float(be["throughput_fraction_ci_lo"].iloc[0])
        out["be_throughput_fraction_ci_hi"] = float(be["throughput_fraction_ci_hi"].iloc[0])
    return out


def scheduler_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """The preload library's per-client counters, one row per (run, client) that has them.

    Known counters come first (``SCHEDULER_COLUMNS``); any other numeric counter the library
    wrote is kept as an extra column rather than dropped.
    """
    rows = []
    extra: list[str] = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        for client, stats in (run.scheduler or {}).items():
            row: dict[str, Any] = {"run": label, "policy": run.policy, "client": client}
            if "tracked_launches" in stats:
                shares = profile_sources(stats)["launch_share"]
                row.update({f"{source}_share": shares[source] for source in SOURCES})
            for key, value in stats.items():
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                row[key] = value
                if key not in SCHEDULER_COLUMNS and key not in extra:
                    extra.append(key)
            rows.append(row)
    return pd.DataFrame(rows, columns=SCHEDULER_COLUMNS + extra)


def _client_row(run: RunData, info: ClientInfo, label: str) -> dict[str, Any]:
    window = client_window(run, info)
    measured = measured_window(run, info)
    window_s = measured[1] - measured[0] if measured is not None else float("nan")
    rows = window_rows(run, info)
    count = len(rows)
    if info.is_inference:
        stats = percentile_summary(rows["latency_ms"])
        samples = count * info.batch_size if info.batch_size is not None else float("nan")
        table = run.tables[info.name]
        arrived = (
            table["arrival_s"].between(window[0], window[1], inclusive="both")
            if window is not None
            else pd.Series(True, index=table.index)
        )
        unfinished = int((arrived & table["end_s"].isna()).sum())
    else:
        stats = percentile_summary(rows["duration_ms"])
        per_iteration = rows["samples"]
        if info.batch_size is not None:
            per_iteration = per_iteration.fillna(info.batch_size)
        samples = float(per_iteration.sum()) if count else 0.0
        unfinished = 0
    return {
        "run": label,
        "policy": run.policy,
        "complete": run.complete,
        "client": info.name,
        "role": info.role,
        "workload": info.workload,
        "mode": info.mode,
        "batch_size": info.batch_size,
        "dtype": info.dtype,
        "window_s": window_s,
        "count": count,
        "unfinished": unfinished,
        **stats,
        "throughput_per_s": _ratio(count, window_s),
        "samples_per_s": _ratio(samples, window_s),
        "offered_per_s": info.offered_rate_per_s
        if info.offered_rate_per_s is not None
        else float("nan"),
        "exit_code": info.exit_code,
        "errors": _error_text(info),
    }


def _judge(
    relative: pd.DataFrame,
    *,
    has_hp: bool,
    has_be: bool,
    have_baseline: bool,
    base_hp_p99: float,
    hp_slowdown_max: float,
    be_fraction_min: float,
) -> dict[str, Any]:
    nan = float("nan")
    if not have_baseline:
        return {
            "hp_p99_alone_ms": nan,
            "hp_p99_slowdown": nan,
            "be_throughput_fraction": nan,
            "hp_target_met": None,
            "be_target_met": None,
            "target_met": None,
        }
    hp = relative[relative["role"] == "hp"]
    be = relative[relative["role"] != "hp"]
    slowdowns = hp["hp_p99_slowdown"].to_numpy(dtype=float)
    # The worst HP client decides; an HP client with an unknown ratio makes the HP side unknown.
    slowdown = float(slowdowns.max()) if len(slowdowns) and not np.isnan(slowdowns).any() else nan
    fractions = be["throughput_fraction"].to_numpy(dtype=float)
    fraction = float(fractions.mean()) if len(fractions) and not np.isnan(fractions).any() else nan
    hp_met = (
        (slowdown <= hp_slowdown_max + LIMIT_TOLERANCE if not np.isnan(slowdown) else None)
        if has_hp
        else True
    )
    be_met = (
        (fraction >= be_fraction_min - LIMIT_TOLERANCE if not np.isnan(fraction) else None)
        if has_be
        else True
    )
    verdict = None if hp_met is None or be_met is None else bool(hp_met and be_met)
    return {
        "hp_p99_alone_ms": base_hp_p99,
        "hp_p99_slowdown": slowdown,
        "be_throughput_fraction": fraction,
        "hp_target_met": hp_met if has_hp else None,
        "be_target_met": be_met if has_be else None,
        "target_met": verdict,
    }


def _excess(value: float, limit: float) -> float:
    """How far ``value`` is above ``limit`` (0 when within it, round-off included)."""
    if np.isnan(value) or np.isnan(limit):
        return float("nan")
    over = value - limit
    return over if over > LIMIT_TOLERANCE else 0.0


_TIME_COLUMNS = ("arrival_s", "start_s", "end_s")


def _last_recorded_s(table: pd.DataFrame) -> float | None:
    """The latest run-clock time in a client table; None when it has none."""
    times = [
        pd.to_numeric(table[column], errors="coerce").max()
        for column in _TIME_COLUMNS
        if column in table.columns
    ]
    times = [float(t) for t in times if pd.notna(t)]
    return max(times) if times else None


def _with_latency(table: pd.DataFrame) -> pd.DataFrame:
    if not table["latency_ms"].isna().any():
        return table
    table = table.copy()
    derived = (table["end_s"] - table["arrival_s"]) * 1000.0
    table["latency_ms"] = table["latency_ms"].fillna(derived)
    return table


def _error_text(info: ClientInfo) -> str | None:
    parts = []
    if info.error:
        parts.append(info.error)
    if info.exit_code not in (None, 0):
        parts.append(f"exit code {info.exit_code}")
    return "; ".join(parts) or None


def _ratio(numerator: float, denominator: float) -> float:
    try:
        num, den = float(numerator), float(denominator)
    except (TypeError, ValueError):
        return float("nan")
    if np.isnan(num) or np.isnan(den) or den == 0:
        return float("nan")
    return num / den


def _nanmax(values: pd.Series) -> float:
    data = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    data = data[~np.isnan(data)]
    return float(data.max()) if data.size else float("nan")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    missing_a = a is None or (isinstance(a, float) and np.isnan(a))
    missing_b = b is None or (isinstance(b, float) and np.isnan(b))
    if missing_a or missing_b:
        return missing_a and missing_b
    return a == b


def _index_of(runs: Sequence[RunData], run: RunData | None) -> int:
    for i, candidate in enumerate(runs):
        if candidate is run:
            return i
    raise ValueError("the baseline must be one of the runs")
