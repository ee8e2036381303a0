"""Each client's GPU memory over the run (``memory.csv``) and its limits (``limits.csv``).

Why a series of its own: ``gpu.csv`` (NVML) sees the whole device, CUDA contexts and other
processes included, so it cannot say which client grew or whether a client stayed under its
limit. ``memory.csv`` is orion's library's own count per client (every allocation route, not the
CUDA context), which is what a limit is enforced against; the report shows that, not NVML.

Limit changes made while the run was live (``orion quota``) are merged into the same series as
rows of their own, at the moment they were made: the half-second samples alone would draw a
change up to a sample late and miss a limit that held for less than a sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from reporting.per_client import (
    client_series,
    client_summary,
    held_in_order,
    live_changes,
    numbers,
)
from reporting.rundata import RunData

GIB = float(2**30)
MEMORY_LIMIT_FIELD = "memory_limit"
"""``limits.csv``'s ``field`` for the memory limit (the only limit there so far)."""

MEMORY_SERIES_COLUMNS = [
    "run",
    "policy",
    "client",
    "role",
    "time_s",
    "used_gib",
    "limit_gib",
    "refused",
    "limit_change",
    "old_limit_gib",
]
"""One row per memory.csv sample and per limits.csv change (``limit_change`` true: ``used_gib``
is what the client held then, ``limit_gib`` the new limit, ``old_limit_gib`` the one before).
``limit_gib`` is NaN where the client had no limit."""
MEMORY_SUMMARY_COLUMNS = [
    "run",
    "policy",
    "client",
    "role",
    "samples",
    "peak_used_gib",
    "peak_s",
    "limit_gib",
    "limits_gib",
    "limit_changes",
    "refused",
]
"""Per run that recorded memory and per client: the peak in use (and when), the limit in force
at the end (NaN: none), every limit that held in order (``limits_gib``, NaN for "none"), how
many times ``orion quota`` changed it, and the allocations refused by the end."""


def memory_series(runs: Sequence[RunData]) -> pd.DataFrame:
    """Every run's memory samples and limit changes in one long table, by run, client, time."""
    return client_series(runs, lambda run: (_samples(run), _changes(run)), MEMORY_SERIES_COLUMNS)


def memory_summary(runs: Sequence[RunData], series: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per client of each run that has ``memory.csv`` (``MEMORY_SUMMARY_COLUMNS``); runs without
    one have no rows. The peak is over the whole run, not the measurement window: running out of
    memory at warm-up fails a client as surely as in the window. ``series`` is
    ``memory_series(runs)`` when the caller has it already."""
    return client_summary(
        runs,
        memory_series(runs) if series is None else series,
        recorded=lambda run: run.memory_recorded,
        summarise=lambda _run, rows: _client_summary(rows),
        columns=MEMORY_SUMMARY_COLUMNS,
    )


def with_limits_text(summary: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``memory_summary(...)`` with ``limits_text`` (:func:`limits_text` of each row's
    limits), the cell both report.md and the terminal show, so they word it alike."""
    return summary.assign(limits_text=[limits_text(v) for v in summary["limits_gib"]])


def limits_text(limits: Any, digits: int = 2) -> str:
    """The limits a client had, in order, for a table cell: ``8.00``, ``8.00 → 4.00``, ``- →
    4.00`` (a limit set during the run); ``-`` for a client that never had one."""
    values = list(limits) if isinstance(limits, list | tuple | np.ndarray) else [limits]
    if not values or all(not _finite(v) for v in values):
        return "-"
    return " → ".join(f"{float(v):.{digits}f}" if _finite(v) else "-" for v in values)


def _samples(run: RunData) -> pd.DataFrame:
    table = run.memory
    limit = numbers(table["limit_bytes"])
    return pd.DataFrame(
        {
            "client": table["client"].astype(object).to_numpy(),
            "time_s": numbers(table["time_s"]),
            "used_gib": _gib(table["used_bytes"]),
            "limit_gib": np.where(limit > 0, limit / GIB, np.nan),
            "refused": numbers(table["refused"]),
            "limit_change": np.zeros(len(table), dtype=bool),
            "old_limit_gib": np.full(len(table), np.nan),
        }
    )


def _changes(run: RunData) -> pd.DataFrame:
    table = live_changes(run, [MEMORY_LIMIT_FIELD])
    return pd.DataFrame(
        {
            "client": table["client"].astype(object).to_numpy(),
            "time_s": numbers(table["time_s"]),
            "used_gib": _gib(table["in_use"]),
            "limit_gib": _gib(table["new"], none_at_zero=True),
            "refused": np.full(len(table), np.nan),
            "limit_change": np.ones(len(table), dtype=bool),
            "old_limit_gib": _gib(table["old"], none_at_zero=True),
        }
    )


def _client_summary(rows: pd.DataFrame) -> dict[str, Any]:
    """One client's rows of ``memory_series`` (time order) boiled down to its summary row."""
    samples = rows[~rows["limit_change"].astype(bool)]
    used = rows["used_gib"].to_numpy(dtype=float)
    measured = ~np.isnan(used)
    peak_at = int(np.nanargmax(used)) if measured.any() else None
    limits = rows["limit_gib"].to_numpy(dtype=float)
    refused = pd.to_numeric(samples["refused"], errors="coerce").dropna()
    return {
        "samples": len(samples),
        "peak_used_gib": float(used[peak_at]) if peak_at is not None else math.nan,
        "peak_s": float(rows["time_s"].iloc[peak_at]) if peak_at is not None else math.nan,
        "limit_gib": float(limits[-1]) if len(limits) else math.nan,
        "limits_gib": held_in_order(limits),
        "limit_changes": int(rows["limit_change"].astype(bool).sum()),
        # A running count, so its largest value is the total.
        "refused": int(refused.max()) if len(refused) else None,
    }


def _gib(values: pd.Series, *, none_at_zero: bool = False) -> np.ndarray:
    """Bytes as GiB; with ``none_at_zero`` a zero or negative byte count means "no limit"."""
    amounts = numbers(values)
    if none_at_zero:
        amounts = np.where(amounts > 0, amounts, np.nan)
    return amounts / GIB


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
