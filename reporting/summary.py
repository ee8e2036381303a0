"""The report: a Markdown file with its figures (``write_report``) and the same numbers as plain
JSON (``report_json``, for ``orion report --json``).

Both are built from the one set of DataFrames in :func:`report_tables`, so the Markdown, the
JSON and whatever the CLI prints cannot disagree.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError
from orion_common.output_paths import make_folder
from reporting import plots
from reporting.memory import memory_series, memory_summary, with_limits_text
from reporting.metrics import (
    BASELINE_P99_TOLERANCE,
    BE_FRACTION_MIN,
    HP_P99_SLOWDOWN_MAX,
    PERCENTILE_METHOD,
    UNDECIDED,
    compare_runs,
    find_baseline,
    headline,
    relative_to_dedicated,
    run_labels,
    scheduler_table,
)
from reporting.request_parts import request_parts
from reporting.rundata import RunData
from reporting.series import (
    DEFAULT_MAX_KERNELS,
    gpu_clock_summary,
    gpu_samples,
    kernel_slice,
    request_latencies,
)
from reporting.shares import SHARE_PERCENTILE, shares_series, shares_summary
from reporting.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from reporting.tail import SLOW_PERCENTILE, slow_requests, tail_summary

REPORT_FORMAT = "orion-report"
REPORT_VERSION = 1
REPORT_FILE = "report.md"

# Columns shown in the Markdown tables (the DataFrames and the JSON keep all of them).
_CLIENT_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("role", "role"),
    ("workload", "workload"),
    ("mode", "mode"),
    ("batch_size", "batch"),
    ("count", "count"),
    ("p50_ms", "p50 ms"),
    ("p95_ms", "p95 ms"),
    ("p99_ms", "p99 ms"),
    ("max_ms", "max ms"),
    ("throughput_per_s", "per s"),
    ("samples_per_s", "samples/s"),
    ("errors", "errors"),
]
_HEADLINE_VIEW = [
    ("run", "run"),
    ("policy", "policy"),
    ("complete", "complete"),
    ("hp_p99_ms", "HP p99 ms [95% CI]"),
    ("hp_p99_slowdown", "HP p99 slowdown × [95% CI]"),
    ("be_throughput_per_s", "BE per s"),
    ("be_throughput_fraction", "BE fraction [95% CI]"),
    ("target_met", "target met"),
]
_RELATIVE_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("role", "role"),
    ("matched", "matched"),
    ("p99_ms", "p99 ms"),
    ("p99_alone_ms", "p99 alone ms"),
    ("hp_p99_slowdown", "p99 slowdown × [95% CI]"),
    ("throughput_per_s", "per s"),
    ("throughput_alone_per_s", "alone per s"),
    ("throughput_fraction", "fraction [95% CI]"),
]
_PARTS_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("requests", "requests"),
    ("queue_p50_ms", "queueing p50 ms"),
    ("queue_p99_ms", "queueing p99 ms"),
    ("launch_p50_ms", "launch p50 ms"),
    ("after_launch_p50_ms", "after launch p50 ms"),
    ("after_launch_p99_ms", "after launch p99 ms"),
    ("slowed_share", "slowed share"),
    ("slowed_extra_ms", "slowed by, median ms"),
]
_GPU_VIEW = [
    ("run", "run"),
    ("samples", "samples"),
    ("sm_util_median_pct", "SM util median %"),
    ("sm_clock_median_mhz", "SM clock median MHz"),
    ("sm_clock_min_mhz", "SM clock min MHz"),
    ("mem_clock_median_mhz", "memory clock median MHz"),
]
_TAIL_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("slow_requests", "slow requests"),
    ("p95_ms", "p95 ms"),
    ("service_alone_ms", "alone ms"),
    ("mean_latency_ms", "mean slow ms"),
    ("be_outstanding_ms", "BE outstanding at arrival ms"),
    ("share_be_outstanding", "share"),
    ("context_switch_ms", "context switch wait ms"),
    ("share_context_switch", "share"),
    ("be_admitted_ms", "BE admitted beside ms"),
    ("share_be_admitted", "share"),
    ("queue_ms", "HP queueing ms"),
    ("share_queue", "share"),
    ("rest_ms", "rest ms"),
    ("share_rest", "share"),
    ("top_be_kernel", "top BE kernel at arrival"),
    ("reasons", "admitted-beside reasons"),
]
_MEMORY_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("role", "role"),
    ("peak_used_gib", "peak in use GiB"),
    ("limits_text", "limit GiB"),
    ("refused", "refused allocations"),
]
_SHARES_VIEW = [
    ("run", "run"),
    ("client", "client"),
    ("role", "role"),
    ("window_s", "window s"),
    ("samples", "samples"),
    ("mean_share", "mean share"),
    ("p95_share", f"p{SHARE_PERCENTILE:g} share"),
    ("min_util", "min_util at end"),
    ("max_util", "max_util at end"),
    ("share_changes", "changes"),
]
_SHARE_COLUMNS = (
    "share_be_outstanding",
    "share_context_switch",
    "share_be_admitted",
    "share_queue",
    "share_rest",
)
# Value columns shown as `value [lo, hi]` in the Markdown tables: value -> (lo, hi) columns.
_INTERVAL_COLUMNS = {
    "hp_p99_ms": ("hp_p99_ci_lo_ms", "hp_p99_ci_hi_ms"),
    "hp_p99_slowdown": ("hp_p99_slowdown_ci_lo", "hp_p99_slowdown_ci_hi"),
    "be_throughput_fraction": ("be_throughput_fraction_ci_lo", "be_throughput_fraction_ci_hi"),
    "throughput_fraction": ("throughput_fraction_ci_lo", "throughput_fraction_ci_hi"),
}


@dataclass(frozen=True)
class ReportTables:
    """Every table of one report, computed once."""

    labels: list[str]
    clients: pd.DataFrame
    relative: pd.DataFrame
    headline: pd.DataFrame
    scheduler: pd.DataFrame
    verdicts: list[str]
    warnings: list[str]
    gpu: pd.DataFrame
    """Per run: median and lowest SM clock, median memory clock in the window
    (``series.gpu_clock_summary``)."""
    tail: pd.DataFrame
    """Per run and HP client: the slow requests' latency split by cause (``tail.tail_summary``);
    runs without a trace have a row saying the attribution needs one."""
    slow_requests: pd.DataFrame
    """One row per slow HP request of the traced runs (``tail.slow_requests``)."""
    request_parts: pd.DataFrame
    """Per run and HP client: queueing, launch and after-launch parts of its requests, and the
    share of requests sharing slowed (``request_parts.request_parts``); no trace needed."""
    memory: pd.DataFrame
    """Per client of each run with ``memory.csv``: peak in use, limits, refused allocations
    (``memory.memory_summary``); no rows when no run recorded memory."""
    shares: pd.DataFrame
    """Per client of each run with ``shares.csv``: mean and p95 share of GPU time, min/max shares
    at the end, share changes (``shares.shares_summary``); no rows when no run recorded shares."""


def report_tables(runs: Sequence[RunData]) -> ReportTables:
    """All tables, the verdict sentences and the warnings for ``runs`` (at least one)."""
    if not runs:
        raise OrionError("no runs to report on", hint="pass one or more RUN_DIR paths")
    relative = relative_to_dedicated(runs)
    head = headline(runs, relative=relative)
    slow = slow_requests(runs)
    return ReportTables(
        labels=run_labels(runs),
        clients=compare_runs(runs),
        relative=relative,
        headline=head,
        scheduler=scheduler_table(runs),
        verdicts=verdicts(head),
        warnings=run_warnings(runs, head),
        gpu=gpu_clock_summary(runs),
        tail=tail_summary(runs, slow),
        slow_requests=slow,
        request_parts=request_parts(runs),
        memory=memory_summary(runs),
        shares=shares_summary(runs),
    )


def verdicts(head: pd.DataFrame) -> list[str]:
    """One plain sentence per non-baseline run: is the target met, and by how much it misses."""
    return [_verdict(row) for row in head.to_dict("records") if not row["is_baseline"]]


def run_warnings(runs: Sequence[RunData], head: pd.DataFrame | None = None) -> list[str]:
    """What a reader must know before trusting the numbers: incomplete runs, failed clients,
    dropped lines, a missing baseline, a baseline too uncertain to judge a 5 % target. Each
    line about one run starts with its label. ``head`` is ``headline(runs)`` when the caller
    has it already."""
    lines = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        lines.extend(f"{label}: {note}" for note in run.notes)
    if find_baseline(runs) is None:
        lines.append(
            "no dedicated run among these: slowdowns and throughput fractions cannot be computed"
        )
        return lines
    head = head if head is not None else headline(runs)
    for row in head[head["is_baseline"].astype(bool)].to_dict("records"):
        warning = baseline_interval_warning(
            row["hp_p99_ms"], row["hp_p99_ci_lo_ms"], row["hp_p99_ci_hi_ms"]
        )
        if warning:
            lines.append(f"{row['run']}: {warning}")
    return lines


def baseline_interval_warning(p99_ms: float, lo_ms: float, hi_ms: float) -> str | None:
    """The warning for a dedicated run whose HP p99 interval reaches beyond ±5 % of the p99
    (``lo < 0.95·p99`` or ``hi > 1.05·p99``); None when it does not or nothing is known."""
    if not (_finite(p99_ms) and _finite(lo_ms) and _finite(hi_ms)) or p99_ms <= 0:
        return None
    low, high = (1 - BASELINE_P99_TOLERANCE) * p99_ms, (1 + BASELINE_P99_TOLERANCE) * p99_ms
    if lo_ms >= low and hi_ms <= high:
        return None
    return (
        f"the dedicated HP p99 is {p99_ms:.2f} ms with a 95% interval of "
        f"[{lo_ms:.2f}, {hi_ms:.2f}] ms, wider than ±{BASELINE_P99_TOLERANCE:.0%} of it: the run "
        f"is too short or too noisy to judge a {BASELINE_P99_TOLERANCE:.0%} target "
        "(measure longer, or find the noise)"
    )


def write_report(
    runs: Sequence[RunData],
    out_dir: str | Path,
    *,
    max_kernels: int = DEFAULT_MAX_KERNELS,
    preface: Sequence[str] = (),
) -> Path:
    """Write the figures and ``report.md`` (which embeds them) into ``out_dir``; return the
    Markdown file's path. Figures with nothing to show are left out, and the report says so.

    ``preface``: Markdown lines put before the per-run sections, for what the runs were run to
    test (a plan run's "measured against predicted", ``reporting.plan_check``), which a reader
    of such a report looks for first.

    The report is its sections in reading order, each built by a function of its own below
    (what a reader needs first, the verdict, before the detail that explains it), so a section
    changes without reading the others; every table is computed once (:func:`report_tables`)
    and handed to the sections that show it."""
    out = make_folder(out_dir, "report folder")
    tables = report_tables(runs)
    labels = tables.labels
    lines = _title_lines(runs, labels)
    lines += list(preface)
    lines += _tradeoff_lines(tables, out)
    lines += _verdict_lines(runs, tables)
    lines += _client_lines(tables)
    lines += _latency_lines(runs, tables, out)
    lines += _gpu_lines(runs, tables, out)
    lines += memory_lines(runs, tables.memory, out, labels)
    lines += shares_lines(runs, tables.shares, out, labels)
    lines += _timeline_lines(runs, labels, out, max_kernels)
    lines += tail_lines(tables.tail, out, labels)
    lines += _closing_lines(runs, tables, out)
    report = out / REPORT_FILE
    write_text_atomic(report, "\n".join(lines).rstrip() + "\n")
    return report


def _title_lines(runs: Sequence[RunData], labels: Sequence[str]) -> list[str]:
    """The title, which runs and when, and a warning box per incomplete run: before any number,
    so nobody reads a run that stopped early as a whole one."""
    lines: list[str] = ["# orion run report", ""]
    lines.append(
        f"Runs: {', '.join(f'`{label}`' for label in labels)}. "
        f"Generated {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}."
    )
    lines.append("")
    for run, label in zip(runs, labels, strict=True):
        if not run.complete:
            lines.append(
                f"> **Incomplete run `{label}`** (status `{run.status}`): the run did not finish "
                "cleanly, so its numbers cover only what was written before it stopped."
            )
            lines.append("")
    return lines


def _tradeoff_lines(tables: ReportTables, out: Path) -> list[str]:
    """The "Trade-off" section: HP p99 against BE throughput per run, the one figure that shows
    whether a policy meets the target; drawn only when some run has both an HP and a BE
    measurement."""
    has_points = tables.headline[["hp_p99_ms", "be_throughput_per_s"]].notna().all(axis=1).any()
    lines = ["## Trade-off", ""]
    lines += _figure_lines(
        "Trade-off",
        plots.plot_tradeoff(tables.headline, out / "tradeoff.png", order=tables.labels)
        if has_points
        else None,
        "no run has both an HP client and a BE client with measurements",
    )
    lines.append(
        "One point per run; bars are 95% bootstrap intervals; the shaded region meets the target."
    )
    lines.append("")
    return lines


def _verdict_lines(runs: Sequence[RunData], tables: ReportTables) -> list[str]:
    """The "Verdict" section: a sentence per run and the headline table with its intervals;
    without a dedicated run it says why nothing can be judged rather than showing empty ratios."""
    lines = ["## Verdict", ""]
    if find_baseline(runs) is None:
        lines.append(
            "No `dedicated` run was given, so the target (HP p99 within "
            f"{HP_P99_SLOWDOWN_MAX:g}× of dedicated, BE throughput at least "
            f"{BE_FRACTION_MIN:.0%} of dedicated) cannot be judged."
        )
    lines += [f"- {sentence}" for sentence in tables.verdicts]
    shown = with_intervals(tables.headline)
    if "target_met" in shown.columns:
        shown["target_met"] = [target_met_text(v) for v in shown["target_met"]]
    lines += ["", markdown_table(shown, _HEADLINE_VIEW), ""]
    lines.append(
        f"[lo, hi]: {DEFAULT_CONFIDENCE:.0%} percentile-bootstrap intervals "
        f"({DEFAULT_RESAMPLES} resamples): of the p99 from the run's own requests, of a ratio "
        "from both runs' samples (BE: summed samples over summed iteration durations)."
    )
    lines.append("")
    return lines


def _client_lines(tables: ReportTables) -> list[str]:
    """The "Clients" and "Relative to dedicated" sections: every client's own numbers, then its
    ratios to the dedicated run, each with how it was measured, since a number is only as good
    as its definition."""
    lines = ["## Clients", "", markdown_table(tables.clients, _CLIENT_VIEW), ""]
    lines.append(
        "Inference: requests that arrived in the client's measurement window and completed; "
        "latency from arrival. Training: iterations that ended in the window; latency columns "
        f"are iteration durations. Percentiles: numpy `{PERCENTILE_METHOD}` interpolation. "
        "Throughput: count / window length; in a run that stopped early, the window ends at "
        "the last moment its clients recorded."
    )
    lines.append("")
    if len(tables.relative):
        lines += ["## Relative to dedicated", ""]
        lines += [markdown_table(with_intervals(tables.relative), _RELATIVE_VIEW), ""]
        lines.append(
            "Slowdown = p99 shared / p99 alone (HP clients); fraction = throughput shared / "
            "throughput alone. The BE fraction of a run is the mean over its BE clients."
        )
        lines.append("")
    return lines


def _latency_lines(runs: Sequence[RunData], tables: ReportTables, out: Path) -> list[str]:
    """The "HP latency" section: the CDF and the latency over time (where a p99 came from), then
    where the requests' time went (queueing, launch, after launch), which says what sharing
    slowed."""
    latencies = request_latencies(runs)
    labels = tables.labels
    lines = ["## HP latency", ""]
    has_latency = len(latencies) > 0
    lines += _figure_lines(
        "HP latency CDF",
        plots.plot_latency_cdf(
            latencies,
            out / "hp_latency_cdf.png",
            order=labels,
            target_ms=_target_ms(tables.headline),
        )
        if has_latency
        else None,
        "no HP inference client completed a request",
    )
    lines += _figure_lines(
        "HP latency over time",
        plots.plot_latency_over_time(latencies, out / "hp_latency_over_time.png", order=labels)
        if has_latency
        else None,
        "no HP inference client completed a request",
    )
    if len(tables.request_parts):
        lines += ["### Where the HP requests' time goes", ""]
        lines += [markdown_table(tables.request_parts, _PARTS_VIEW), ""]
        lines.append(
            "Queueing: start - arrival (behind the client's previous request). Launch: the host's "
            "launch call. After launch: end - start - launch (the GPU work, anything it waited "
            "for on the GPU, the wake-up). Slowed: the share of requests whose after-launch part "
            "is above the `dedicated` run's p99, and their median less its median (MPS slows "
            "every request; a time-sliced context only those that find BE on the GPU)."
        )
        lines.append("")
    return lines


def _gpu_lines(runs: Sequence[RunData], tables: ReportTables, out: Path) -> list[str]:
    """The "GPU utilisation" section: the NVML samples and the clocks, which must match before
    two runs' latencies can be compared at all."""
    gpu = gpu_samples(runs)
    lines = ["## GPU utilisation", ""]
    lines += _figure_lines(
        "GPU utilisation",
        plots.plot_gpu_utilisation(gpu, out / "gpu_utilisation.png", order=tables.labels)
        if len(gpu)
        else None,
        "no run has GPU samples (gpu.csv)",
    )
    if len(gpu):
        lines += [markdown_table(tables.gpu, _GPU_VIEW), ""]
        lines.append(
            "Over the NVML samples in each run's measurement window. Compare clocks before "
            "comparing runs: a lower SM clock slows every kernel, whatever the policy."
        )
        lines.append("")
    return lines


def _timeline_lines(
    runs: Sequence[RunData], labels: Sequence[str], out: Path, max_kernels: int
) -> list[str]:
    """The "Kernel timelines" section: a slice of each traced run's launches from mid-window (a
    whole trace is too many bars to read), with how long launches waited to be let onto the GPU."""
    traced = [(r, label) for r, label in zip(runs, labels, strict=True) if r.trace is not None]
    if not traced:
        return []
    lines = ["## Kernel timelines", ""]
    used: set[str] = set()
    for run, label in traced:
        kernels = kernel_slice(run, label=label, max_kernels=max_kernels)
        total = len(run.trace) if run.trace is not None else 0
        name = _unique_name(f"kernel_timeline_{_slug(label)}.png", used)
        title = f"Kernel timeline, {label}: {len(kernels)} of {total} launches"
        lines += _figure_lines(
            f"Kernel timeline ({label})",
            plots.plot_kernel_timeline(kernels, out / name, title=title) if len(kernels) else None,
            f"the trace of `{label}` is empty",
        )
        if len(kernels):
            lines += _timeline_caption(label, kernels)
    return lines


def _timeline_caption(label: str, kernels: pd.DataFrame) -> list[str]:
    """What one timeline shows, and the enqueue-to-launch waits of its launches."""
    waits = kernels["wait_ms"].to_numpy(dtype=float)
    waits = waits[np.isfinite(waits)]
    wait_text = (
        f"; enqueue-to-launch wait mean {waits.mean():.3f} ms, max {waits.max():.3f} ms"
        if waits.size
        else ""
    )
    return [
        f"`{label}`: {len(kernels)} consecutive launches from mid-window, bar = "
        f"profiled kernel duration{wait_text}.",
        "",
    ]


def _closing_lines(runs: Sequence[RunData], tables: ReportTables, out: Path) -> list[str]:
    """The reference sections at the end: the scheduler's counters, the environment each run
    had (GPU, driver, versions) and the warnings a reader must weigh before trusting numbers."""
    lines: list[str] = []
    if len(tables.scheduler):
        lines += ["## Scheduler statistics", ""]
        view = [(c, c) for c in tables.scheduler.columns if c != "policy"]
        lines += [markdown_table(tables.scheduler, view), ""]
    lines += ["## Environment", "", markdown_table(environment_table(runs, out), None), ""]
    if tables.warnings:
        lines += ["## Warnings", ""]
        lines += [f"- {line}" for line in tables.warnings]
        lines.append("")
    return lines


def memory_lines(
    runs: Sequence[RunData], summary: pd.DataFrame, out: Path, order: Sequence[str]
) -> list[str]:
    """The report's "GPU memory" section: the memory-over-time figure (when some run has
    samples) and the per-client peak, limit and refused allocations. Empty when no run has a
    ``memory.csv`` (runs from before it, policies without orion's library), so such reports
    read as they always did."""
    if not any(run.memory_recorded for run in runs):
        return []
    series = memory_series(runs)
    return _client_section(
        "GPU memory",
        plots.plot_memory_over_time(series, out / "memory_over_time.png", order=order)
        if len(series)
        else None,
        "no run's memory.csv has samples",
        caption="Per run, each client's GPU memory in use (solid) and the limit in force "
        "(dashed, same colour; markers where `orion quota` changed it while the run was live), "
        "as orion's library counts it: every allocation route of the client, not its CUDA "
        "context.",
        table=markdown_table(with_limits_text(summary), _MEMORY_VIEW),
        note="Peak: the most memory in use the whole run recorded (its samples, and what it "
        "held at each limit change; GiB = 2^30 bytes). "
        "Limit: each limit that held, in order (→: changed while the run was live; -: none). "
        "Refused allocations: those the library refused for the limit by the end of the run.",
    )


def shares_lines(
    runs: Sequence[RunData], summary: pd.DataFrame, out: Path, order: Sequence[str]
) -> list[str]:
    """The report's "GPU time shares" section: the shares-over-time figure (when some run has
    samples) and the per-client mean and p95 share with the min/max in force. Empty when no run
    has a ``shares.csv`` (runs without GPU-time shares, older runs), so such reports read as
    they always did."""
    if not any(run.shares_recorded for run in runs):
        return []
    return _client_section(
        "GPU time shares",
        plots.plot_gpu_shares_over_time(
            shares_series(runs), out / "gpu_shares_over_time.png", order=order
        )
        if any(len(run.shares) for run in runs)
        else None,
        "no run's shares.csv has samples",
        caption="Per run, each client's share of GPU time (solid): its GPU time over the "
        "sliding quota window as orion's gate keeper measures it (time with work on the GPU "
        "and its gate open or draining). Same colour: the max_util in force (dashed) and the "
        "min_util (dotted) where they are not the defaults 1 and 0; markers where "
        "`orion quota` changed one while the run was live.",
        table=markdown_table(summary, _SHARES_VIEW),
        note=f"Mean and p{SHARE_PERCENTILE:g} share: over the samples (about every 0.5 s) taken "
        "at least one quota window (`run.quota_window_s`) after the run's first, when the "
        "window is full. min_util / max_util at end: the promised and capped shares in force "
        "when the run ended. Changes: min_util / max_util changes made with `orion quota` "
        "while the run was live.",
    )


def _client_section(
    heading: str, figure: Path | None, left_out: str, *, caption: str, table: str, note: str
) -> list[str]:
    """A per-client series section (memory, shares), laid out alike: the heading, the figure
    with its caption (or why it was left out), the table and the note under it."""
    lines = [f"## {heading}", ""]
    lines += _figure_lines(f"{heading} over time", figure, left_out)
    if figure is not None:
        lines += [caption, ""]
    return [*lines, table, "", note, ""]


def tail_lines(tail: pd.DataFrame, out: Path, order: Sequence[str]) -> list[str]:
    """The report's "Where the HP tail comes from" section: the stacked-bar figure and the table
    for the traced runs, one line for each run whose attribution needs a trace. Empty when no
    run has an HP inference client (nothing to attribute)."""
    if not len(tail):
        return []
    lines = ["## Where the HP tail comes from", ""]
    traced = tail[tail["traced"].astype(bool)]
    if len(traced):
        has_slow = bool(traced["mean_latency_ms"].notna().any())
        lines += _figure_lines(
            "Where the HP tail comes from",
            plots.plot_tail_attribution(traced, out / "hp_tail_attribution.png", order=order)
            if has_slow
            else None,
            "no traced run has requests above its p95",
        )
        shown = traced.copy()
        for column in _SHARE_COLUMNS:
            shown[column] = [
                f"{float(v):.0%}" if _finite(v) else "–" for v in shown[column].tolist()
            ]
        lines += [markdown_table(shown, _TAIL_VIEW), ""]
        lines.append(
            f"Slow requests: in-window HP requests above their run's p{SLOW_PERCENTILE:g}. "
            "BE outstanding at arrival: BE kernels launched before the request arrived and, by "
            "their profiled duration, still running then (time left summed); BE admitted beside: "
            "BE kernels launched while the request was served (profiled durations summed; "
            "reasons from the trace); HP queueing: start minus arrival. The latency is split so "
            "the parts add up to it: the delay over the service alone (median latency of the "
            "requests below p50) goes to HP queueing, then BE outstanding, then BE admitted, "
            "each capped by what is left; rest = service alone plus unexplained delay. Share: "
            "mean over the slow requests of part / latency."
        )
        lines.append("")
    for row in tail[~tail["traced"].astype(bool)].to_dict("records"):
        lines.append(f"- `{row['run']}` ({row['client']}): {row['note']}.")
    if not tail["traced"].astype(bool).all():
        lines.append("")
    return lines


def environment_table(runs: Sequence[RunData], relative_to: Path | None = None) -> pd.DataFrame:
    """Where and with what each run was measured, one row per run. With ``relative_to`` (the
    report's folder) run paths are written relative to it, so a report moved or committed
    together with its runs still points at them."""
    rows = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        env = run.environment
        rows.append(
            {
                "run": label,
                "policy": run.policy,
                "status": run.status,
                "GPU": env.gpu_name,
                "SMs": env.sm_count,
                "driver": env.driver_version,
                "CUDA": env.cuda_version,
                "torch": env.torch_version,
                "cuDNN": env.cudnn_version,
                "orion": run.orion_version,
                "git": run.git_revision,
                "started (UTC)": run.started_utc,
                "path": (
                    os.path.relpath(run.path, relative_to)
                    if relative_to is not None
                    else str(run.path)
                ),
            }
        )
    return pd.DataFrame(rows)


def report_json(runs: Sequence[RunData]) -> dict[str, Any]:
    """The report's numbers as plain JSON types (NaN and missing values become ``None``)."""
    tables = report_tables(runs)
    run_entries = []
    for run, label in zip(runs, tables.labels, strict=True):
        run_entries.append(
            {
                "label": label,
                "path": str(run.path),
                "policy": run.policy,
                "status": run.status,
                "complete": run.complete,
                "orion_version": run.orion_version,
                "git_revision": run.git_revision,
                "started_utc": run.started_utc,
                "ended_utc": run.ended_utc,
                "measure_start_s": run.measure_start_s,
                "measure_end_s": run.measure_end_s,
                "environment": asdict(run.environment),
                "has_trace": run.trace is not None,
                "notes": list(run.notes),
            }
        )
    baseline = find_baseline(runs)
    return to_jsonable(
        {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "baseline": tables.labels[list(runs).index(baseline)] if baseline is not None else None,
            "target": {
                "hp_p99_slowdown_max": HP_P99_SLOWDOWN_MAX,
                "be_throughput_fraction_min": BE_FRACTION_MIN,
                "be_fraction_definition": "mean of per-BE-client throughput fractions",
            },
            "percentile_method": PERCENTILE_METHOD,
            "runs": run_entries,
            "headline": tables.headline.to_dict("records"),
            "clients": tables.clients.to_dict("records"),
            "relative": tables.relative.to_dict("records"),
            "scheduler": tables.scheduler.to_dict("records"),
            "gpu_clocks": tables.gpu.to_dict("records"),
            "hp_tail": tables.tail.to_dict("records"),
            "hp_tail_requests": tables.slow_requests.to_dict("records"),
            "hp_request_parts": tables.request_parts.to_dict("records"),
            "memory": tables.memory.to_dict("records"),
            "gpu_shares": tables.shares.to_dict("records"),
            "intervals": {
                "confidence": DEFAULT_CONFIDENCE,
                "resamples": DEFAULT_RESAMPLES,
                "method": "percentile bootstrap (reporting/stats.py)",
            },
            "verdicts": tables.verdicts,
            "warnings": tables.warnings,
        }
    )


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy/pandas scalars made plain and NaN, inf, NA and NaT made ``None``."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, pd.Timestamp | datetime):
        return None if pd.isna(value) else value.isoformat()
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return None
    return str(value)


def markdown_table(frame: pd.DataFrame, view: Sequence[tuple[str, str]] | None) -> str:
    """``frame`` as a GitHub Markdown table; ``view`` picks (column, header) pairs."""
    pairs = list(view) if view is not None else [(c, c) for c in frame.columns]
    pairs = [(c, h) for c, h in pairs if c in frame.columns]
    if not pairs:
        return ""
    out = ["| " + " | ".join(h for _, h in pairs) + " |"]
    out.append("|" + "|".join("---:" if _numeric(frame[c]) else "---" for c, _ in pairs) + "|")
    for record in frame.to_dict("records"):
        out.append("| " + " | ".join(_cell(record[c]) for c, _ in pairs) + " |")
    return "\n".join(out)


def with_intervals(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` for display, each value that has an interval written
    ``value [lo, hi]`` (``_INTERVAL_COLUMNS``); values without one are left as they are."""
    shown = frame.copy()
    for column, (lo_col, hi_col) in _INTERVAL_COLUMNS.items():
        if not {column, lo_col, hi_col} <= set(frame.columns):
            continue
        shown[column] = [
            format_interval(value, lo, hi)
            for value, lo, hi in zip(frame[column], frame[lo_col], frame[hi_col], strict=True)
        ]
    return shown


def format_interval(value: Any, lo: Any, hi: Any) -> str:
    """``12.345 [12.001, 12.790]``; the bare value when the interval is unknown."""
    if not _finite(value):
        return "–"
    if not (_finite(lo) and _finite(hi)):
        return _cell(value)
    return f"{_cell(value)} [{_cell(lo)}, {_cell(hi)}]"


def _verdict(row: dict[str, Any]) -> str:
    label = f"`{row['run']}`"
    caveat = " (incomplete run: read with care)" if not row["complete"] else ""
    slowdown, fraction = row["hp_p99_slowdown"], row["be_throughput_fraction"]
    if row["baseline"] is None:
        parts = []
        if _finite(row["hp_p99_ms"]):
            parts.append(f"HP p99 {row['hp_p99_ms']:.2f} ms")
        if _finite(row["be_throughput_per_s"]):
            parts.append(f"BE {row['be_throughput_per_s']:.2f} per s")
        measured = f" ({', '.join(parts)})" if parts else ""
        return (
            f"{label}: no dedicated run to compare with, so the target cannot be judged"
            f"{measured}{caveat}."
        )

    hp_part = _hp_clause(row, slowdown)
    be_part = _be_clause(row, fraction)
    clauses = "; ".join(p for p in (hp_part, be_part) if p)
    if row["target_met"] is True:
        head = "target met"
    elif row["target_met"] is False:
        head = "target missed"
    elif row["target_met"] == UNDECIDED:
        head = (
            "target undecided (a 95% interval reaches across a limit, or the dedicated run "
            "is too noisy to judge it)"
        )
    else:
        head = "target cannot be judged"
    return f"{label}: {head}: {clauses}{caveat}."


def _digits_apart(value: float, bound: float, digits: int) -> int:
    """The fewest decimals, from ``digits`` up to three more, at which ``value`` and ``bound``
    read differently: a verdict that says a figure is past its bound must show it past (1.051
    is not "1.05×, 0.00× over the 1.05× limit")."""
    for more in range(digits, digits + 4):
        if f"{value:.{more}f}" != f"{bound:.{more}f}":
            return more
    return digits + 3


def _hp_clause(row: dict[str, Any], slowdown: float) -> str:
    if row["hp_target_met"] is None and not row["hp_clients"]:
        return "no HP client"
    if not _finite(slowdown):
        return "HP p99 slowdown unknown (no completed HP requests or no matching dedicated client)"
    if row["hp_target_met"]:
        return f"HP p99 is {slowdown:.2f}× dedicated (limit {HP_P99_SLOWDOWN_MAX:g}×)"
    digits = _digits_apart(slowdown, HP_P99_SLOWDOWN_MAX, 2)
    return (
        f"HP p99 is {slowdown:.{digits}f}× dedicated, {row['hp_slowdown_excess']:.{digits}f}× "
        f"over the {HP_P99_SLOWDOWN_MAX:g}× limit"
    )


def _be_clause(row: dict[str, Any], fraction: float) -> str:
    if row["be_target_met"] is None and not row["be_clients"]:
        return "no BE client"
    if not _finite(fraction):
        return "BE throughput fraction unknown (no matching dedicated client)"
    if row["be_target_met"]:
        return f"BE throughput is {fraction:.0%} of dedicated (floor {BE_FRACTION_MIN:.0%})"
    digits = _digits_apart(fraction * 100, BE_FRACTION_MIN * 100, 0)
    shortfall = row["be_fraction_shortfall"] * 100
    return (
        f"BE throughput is {fraction:.{digits}%} of dedicated, {shortfall:.{digits}f} "
        f"percentage points under the {BE_FRACTION_MIN:.0%} floor"
    )


def _target_ms(head: pd.DataFrame) -> float | None:
    base = head[head["is_baseline"].astype(bool)]
    if not len(base) or not _finite(base["hp_p99_ms"].iloc[0]):
        return None
    return float(base["hp_p99_ms"].iloc[0]) * HP_P99_SLOWDOWN_MAX


def target_met_text(value: Any) -> str:
    """The ``target met`` cell, worded alike in the terminal and in report.md:
    ``yes``, ``no``, ``undecided`` (the intervals cannot tell), or ``-`` when it cannot be
    judged (no dedicated baseline, no HP client)."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == UNDECIDED:
        return UNDECIDED
    return "yes" if bool(value) else "no"


def _figure_lines(title: str, path: Path | None, reason: str) -> list[str]:
    if path is None:
        return [f"*{title}: figure left out ({reason}).*", ""]
    return [f"![{title}]({path.name})", ""]


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        number = float(value)
        if not math.isfinite(number):
            return "–"
        return f"{number:.3f}" if abs(number) < 1000 else f"{number:.1f}"
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "–"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"


def _unique_name(name: str, used: set[str]) -> str:
    stem, suffix = name.rsplit(".", 1)
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{stem}_{n}.{suffix}"
    used.add(candidate)
    return candidate
