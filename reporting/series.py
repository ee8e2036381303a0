"""Long-form time series behind the figures: request latencies, GPU samples, kernel launches.

Kept apart from the plots (HTA's habit, the other way round) so the CLI or a notebook can use
the same rows the figures show, and so the plots stay thin.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from reporting.metrics import client_window, run_labels, window_rows
from reporting.rundata import GPU_COLUMNS, RunData

LATENCY_COLUMNS = ["run", "policy", "client", "role", "arrival_s", "latency_ms", "in_window"]
GPU_SAMPLE_COLUMNS = ["run", "policy", *(column.name for column in GPU_COLUMNS), "in_window"]
GPU_CLOCK_COLUMNS = [
    "run",
    "policy",
    "samples",
    "sm_util_median_pct",
    "sm_clock_median_mhz",
    "sm_clock_min_mhz",
    "mem_clock_median_mhz",
]
KERNEL_COLUMNS = [
    "run",
    "client",
    "role",
    "seq",
    "kernel_name",
    "kernel_class",
    "sm_needed",
    "enqueue_s",
    "launch_s",
    "duration_ms",
    "wait_ms",
]
# A few hundred launches (a few ms of a ResNet-50 step per client) is about what a 10-inch-wide
# timeline can show as separate bars; thousands merge into solid blocks.
DEFAULT_MAX_KERNELS = 400


def request_latencies(runs: Sequence[RunData], role: str = "hp") -> pd.DataFrame:
    """Every completed request of the inference clients with ``role``, one row each.

    ``in_window`` marks the requests the summary counts (arrived inside the client's window);
    the others are kept so a plot can show warm-up and drain around the window.
    """
    frames = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        for info in run.clients:
            if info.role != role or not info.is_inference:
                continue
            table = run.tables[info.name]
            done = table[table["end_s"].notna()]
            latency = done["latency_ms"].fillna((done["end_s"] - done["arrival_s"]) * 1000.0)
            counted = window_rows(run, info).index
            frames.append(
                pd.DataFrame(
                    {
                        "run": label,
                        "policy": run.policy,
                        "client": info.name,
                        "role": info.role,
                        "arrival_s": done["arrival_s"].to_numpy(dtype=float),
                        "latency_ms": latency.to_numpy(dtype=float),
                        "in_window": done.index.isin(counted),
                    },
                    columns=LATENCY_COLUMNS,
                )
            )
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def gpu_samples(runs: Sequence[RunData]) -> pd.DataFrame:
    """The NVML samples of every run that has ``gpu.csv``, flagged by the run's window."""
    frames = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        if run.gpu is None or not len(run.gpu):
            continue
        gpu = run.gpu
        start, end = _run_window(run)
        frames.append(
            pd.DataFrame(
                {
                    "run": label,
                    "policy": run.policy,
                    "time_s": gpu["time_s"].to_numpy(dtype=float),
                    "sm_util_pct": gpu["sm_util_pct"].to_numpy(dtype=float),
                    "mem_util_pct": gpu["mem_util_pct"].to_numpy(dtype=float),
                    "mem_used_mib": gpu["mem_used_mib"].to_numpy(dtype=float),
                    "sm_clock_mhz": _column(gpu, "sm_clock_mhz"),
                    "mem_clock_mhz": _column(gpu, "mem_clock_mhz"),
                    "in_window": gpu["time_s"].between(start, end).to_numpy()
                    if start is not None and end is not None
                    else np.ones(len(gpu), dtype=bool),
                },
                columns=GPU_SAMPLE_COLUMNS,
            )
        )
    if not frames:
        return pd.DataFrame(columns=GPU_SAMPLE_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def gpu_clock_summary(runs: Sequence[RunData]) -> pd.DataFrame:
    """Per run, over its NVML samples inside the measurement window: how many, the median SM
    utilisation, the median and lowest SM clock and the median memory clock (``GPU_CLOCK_COLUMNS``).

    Why: the same kernels run slower at a lower clock, so two runs are comparable only at
    comparable clocks. A lower median says the GPU ran slower throughout (power or thermal
    limit, another tenant); a low minimum with a normal median says it throttled for a while,
    which can make one run's tail alone. Clocks are NaN for runs written before gpu.csv had
    them, and every value is NaN for a run without samples in its window.
    """
    samples = gpu_samples(runs)
    rows = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        mine = samples[(samples["run"] == label) & samples["in_window"].astype(bool)]
        rows.append(
            {
                "run": label,
                "policy": run.policy,
                "samples": len(mine),
                "sm_util_median_pct": _median(mine["sm_util_pct"]),
                "sm_clock_median_mhz": _median(mine["sm_clock_mhz"]),
                "sm_clock_min_mhz": _minimum(mine["sm_clock_mhz"]),
                "mem_clock_median_mhz": _median(mine["mem_clock_mhz"]),
            }
        )
    return pd.DataFrame(rows, columns=GPU_CLOCK_COLUMNS)


def kernel_slice(
    run: RunData,
    *,
    label: str | None = None,
    max_kernels: int = DEFAULT_MAX_KERNELS,
    start_s: float | None = None,
) -> pd.DataFrame:
    """A readable stretch of the kernel trace: at most ``max_kernels`` consecutive launches
    (all clients together) from ``start_s``, which defaults to the middle of the measurement
    window, where every client is in steady state. Empty without a trace.

    A 30 s trace holds millions of microsecond kernels, which no timeline can show; a short
    contiguous slice shows how the clients' kernels interleave, which is the point.
    """
    if run.trace is None or not len(run.trace):
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    trace = run.trace[run.trace["launch_s"].notna()].sort_values("launch_s", kind="stable")
    if start_s is None:
        start, end = _run_window(run)
        start_s = (start + end) / 2 if start is not None and end is not None else None
    if start_s is not None:
        after = trace[trace["launch_s"] >= start_s]
        # Too close to the end to fill the slice: take the last launches instead.
        trace = after if len(after) >= max_kernels else trace.iloc[-max_kernels:]
    trace = trace.iloc[: max(0, max_kernels)]
    roles = {c.name: c.role for c in run.clients}
    return pd.DataFrame(
        {
            "run": label if label is not None else run.policy,
            "client": trace["client"].astype(object).to_numpy(),
            "role": [roles.get(str(c), "?") for c in trace["client"]],
            "seq": trace["seq"].to_numpy(),
            "kernel_name": trace["kernel_name"].astype(object).to_numpy(),
            "kernel_class": trace["kernel_class"].astype(object).to_numpy(),
            "sm_needed": trace["sm_needed"].to_numpy(dtype=float),
            "enqueue_s": trace["enqueue_s"].to_numpy(dtype=float),
            "launch_s": trace["launch_s"].to_numpy(dtype=float),
            "duration_ms": trace["duration_ns"].to_numpy(dtype=float) / 1e6,
            "wait_ms": (trace["launch_s"] - trace["enqueue_s"]).to_numpy(dtype=float) * 1000.0,
        },
        columns=KERNEL_COLUMNS,
    )


def _median(values: pd.Series) -> float:
    data = pd.to_numeric(values, errors="coerce").dropna()
    return float(data.median()) if len(data) else float("nan")


def _minimum(values: pd.Series) -> float:
    data = pd.to_numeric(values, errors="coerce").dropna()
    return float(data.min()) if len(data) else float("nan")


def _column(table: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column as floats, all NaN when the table predates it."""
    if name not in table.columns:
        return np.full(len(table), np.nan)
    return pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float)


def _run_window(run: RunData) -> tuple[float | None, float | None]:
    """The run's window, or the union of its clients' windows when run.json has none."""
    if run.measure_start_s is not None and run.measure_end_s is not None:
        return run.measure_start_s, run.measure_end_s
    windows = [w for w in (client_window(run, c) for c in run.clients) if w is not None]
    if not windows:
        return None, None
    return min(w[0] for w in windows), max(w[1] for w in windows)
