"""Each client's share of GPU time over the run (``shares.csv``) and its min/max shares
(``min_util`` / ``max_util``, changed live through ``limits.csv``).

Why a series of its own: NVML's utilisation (``gpu.csv``) is the whole device's, so it cannot
say whether a client got the share it was promised or stayed under its cap. ``shares.csv`` is
the gate keeper's own measure per client, the one it enforces the shares against: the time the
client had work on the GPU (gate open or draining) over the sliding quota window.

Share changes made while the run was live (``orion quota --min-util/--max-util``) are merged in
as rows of their own at the moment they were made, as for memory limits
(:mod:`reporting.per_client`): the half-second samples alone would draw a change up to a sample
late and miss one that held for less than a sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from reporting.per_client import client_series, client_summary, live_changes, numbers
from reporting.rundata import RunData
from reporting.stats import PERCENTILE_METHOD

SHARE_DEFAULTS = {"min_util": 0.0, "max_util": 1.0}
"""Each share field of ``limits.csv`` with the value a client has when none was set: nothing
promised, nothing capped."""
DEFAULT_QUOTA_WINDOW_S = 1.0
"""``run.quota_window_s`` when the recorded config has none (the jobs file's default)."""
SHARE_PERCENTILE = 95.0

SHARE_SERIES_COLUMNS = [
    "run",
    "policy",
    "client",
    "role",
    "time_s",
    "gpu_share",
    "min_util",
    "max_util",
    "share_change",
    "changed_field",
    "old_value",
]
"""One row per shares.csv sample and per limits.csv share change (``share_change`` true:
``changed_field`` says which share changed, ``old_value`` what it was; ``gpu_share`` is NaN).
``min_util`` and ``max_util`` are those in force from the row on, on every row."""
SHARE_SUMMARY_COLUMNS = [
    "run",
    "policy",
    "client",
    "role",
    "window_s",
    "samples",
    "mean_share",
    "p95_share",
    "min_util",
    "max_util",
    "share_changes",
]
"""Per run that recorded shares and per client: the quota window, the samples taken after the
first window and the mean and p95 of ``gpu_share`` over them, the min/max shares in force at
the end, and how many times ``orion quota`` changed one of them."""


def shares_series(runs: Sequence[RunData]) -> pd.DataFrame:
    """Every run's share samples and share changes in one long table, by run, client, time.
    Only runs with ``shares.csv`` count: without it nothing enforced shares in the run."""
    series = client_series(runs, _parts, SHARE_SERIES_COLUMNS)
    for index in series.groupby(["run", "client"], sort=False).groups.values():
        for name in SHARE_DEFAULTS:
            series.loc[index, name] = _in_force(series.loc[index], name)
    return series


def shares_summary(runs: Sequence[RunData], series: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per client of each run that has ``shares.csv`` (``SHARE_SUMMARY_COLUMNS``); runs without
    one have no rows. ``series`` is ``shares_series(runs)`` when the caller has it already."""
    return client_summary(
        runs,
        shares_series(runs) if series is None else series,
        recorded=lambda run: run.shares_recorded,
        summarise=_client_summary,
        columns=SHARE_SUMMARY_COLUMNS,
    )


def quota_window_s(run: RunData) -> float:
    """The run's quota window (``run.quota_window_s`` of its recorded config), or the default
    for a config without a usable one."""
    settings = run.config.get("run")
    value = settings.get("quota_window_s") if isinstance(settings, dict) else None
    try:
        window = float(value) if value is not None and not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        window = math.nan
    return window if math.isfinite(window) and window > 0 else DEFAULT_QUOTA_WINDOW_S


def _parts(run: RunData) -> tuple[pd.DataFrame, ...]:
    return (_samples(run), _changes(run)) if run.shares_recorded else ()


def _samples(run: RunData) -> pd.DataFrame:
    table = run.shares
    return pd.DataFrame(
        {
            "client": table["client"].astype(object).to_numpy(),
            "time_s": numbers(table["time_s"]),
            "gpu_share": numbers(table["gpu_share"]),
            "min_util": numbers(table["min_util"]),
            "max_util": numbers(table["max_util"]),
            "share_change": np.zeros(len(table), dtype=bool),
            "changed_field": np.full(len(table), None, dtype=object),
            "old_value": np.full(len(table), np.nan),
        }
    )


def _changes(run: RunData) -> pd.DataFrame:
    """limits.csv's share rows; the share that did not change is NaN here and filled in by
    :func:`_in_force` once the rows are in time order."""
    table = live_changes(run, SHARE_DEFAULTS)
    changed = table["field"].astype(object).to_numpy()
    new = numbers(table["new"])
    return pd.DataFrame(
        {
            "client": table["client"].astype(object).to_numpy(),
            "time_s": numbers(table["time_s"]),
            "gpu_share": np.full(len(table), np.nan),
            **{name: np.where(changed == name, new, np.nan) for name in SHARE_DEFAULTS},
            "share_change": np.ones(len(table), dtype=bool),
            "changed_field": changed,
            "old_value": numbers(table["old"]),
        }
    )


def _in_force(rows: pd.DataFrame, name: str) -> pd.Series:
    """Share ``name`` in force at each of one client's rows (time order): the last one known,
    and before the first one known what held then: the old value when that first one is a
    change, else the sample's value (the default when the client has none at all)."""
    values = rows[name]
    known = values.dropna()
    if not len(known):
        return values.fillna(SHARE_DEFAULTS[name])
    first = rows.loc[known.index[0]]
    start = first["old_value"] if first["changed_field"] == name else known.iloc[0]
    if not math.isfinite(float(start)):
        start = SHARE_DEFAULTS[name]
    return values.ffill().fillna(float(start))


def _client_summary(run: RunData, rows: pd.DataFrame) -> dict[str, Any]:
    """One client's rows of ``shares_series`` (time order) boiled down to its summary row.

    The mean and p95 are over the samples taken at least one quota window after the run's first
    sample: before that the gate keeper's window reaches back to before it started, so a share
    there is too low by however much of the window was not yet there.
    """
    window = quota_window_s(run)
    start = numbers(run.shares["time_s"])
    settled_from = float(np.nanmin(start)) + window if np.isfinite(start).any() else math.inf
    samples = rows[~rows["share_change"].astype(bool)]
    later = samples["gpu_share"][samples["time_s"] >= settled_from].to_numpy(dtype=float)
    later = later[np.isfinite(later)]
    last = rows.iloc[-1] if len(rows) else None
    return {
        "window_s": window,
        "samples": int(later.size),
        "mean_share": float(later.mean()) if later.size else math.nan,
        "p95_share": (
            float(np.percentile(later, SHARE_PERCENTILE, method=PERCENTILE_METHOD))
            if later.size
            else math.nan
        ),
        "min_util": float(last["min_util"]) if last is not None else math.nan,
        "max_util": float(last["max_util"]) if last is not None else math.nan,
        "share_changes": int(rows["share_change"].astype(bool).sum()),
    }
