"""What the per-client sampled tables (``memory.csv``, ``shares.csv``) have in common: samples
of each client's state, and the live changes ``orion quota`` made to what limits it
(``limits.csv``), merged into one long series and boiled down to one row per client.

Why one place: both tables are read the same way (labelled by run, roles from ``run.json``,
changes as rows of their own at the moment they were made, time order) and summed up the same
way (one row per client, ``run.json``'s order first), so :mod:`reporting.memory` and
:mod:`reporting.shares` supply only what differs: their columns and their per-client figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import pandas as pd

from reporting.metrics import run_labels
from reporting.rundata import RunData

SeriesParts = Callable[[RunData], Sequence[pd.DataFrame]]
"""A run's rows of a series, before labelling: new frames (they are labelled in place), each
with ``client`` and ``time_s``, samples before changes."""
ClientSummary = Callable[[RunData, pd.DataFrame], dict[str, Any]]
"""One client's rows of a series (time order) boiled down to its summary columns."""


def client_series(runs: Sequence[RunData], parts: SeriesParts, columns: list[str]) -> pd.DataFrame:
    """Every run's rows from ``parts`` in one long table with ``columns`` (which begin with
    ``run``, ``policy``, ``client``, ``role``), ordered by time.

    The sort is stable and samples come before changes in ``parts``, so a change made at the
    very time of a sample comes after it: it is what holds next."""
    frames = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        roles = {info.name: info.role for info in run.clients}
        for frame in parts(run):
            if not len(frame):
                continue
            frame.insert(0, "run", label)
            frame.insert(1, "policy", run.policy)
            frame.insert(3, "role", [roles.get(str(c), "?") for c in frame["client"]])
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=columns)
    series = pd.concat(frames, ignore_index=True)[columns]
    order = series.sort_values(["time_s"], kind="stable").index
    return series.loc[order].reset_index(drop=True)


def client_summary(
    runs: Sequence[RunData],
    series: pd.DataFrame,
    *,
    recorded: Callable[[RunData], bool],
    summarise: ClientSummary,
    columns: list[str],
) -> pd.DataFrame:
    """One row per client of each run for which ``recorded`` holds (``columns``: ``run``,
    ``policy``, ``client``, ``role``, then what ``summarise`` returns). Clients come in
    ``run.json``'s order, then any the table has that ``run.json`` lacks; a recorded run whose
    table has no row yet still gets a row per client, so "nothing measured" shows as such."""
    rows = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        if not recorded(run):
            continue
        mine = series[series["run"] == label]
        names = [info.name for info in run.clients]
        names += [n for n in dict.fromkeys(mine["client"].astype(str)) if n not in names]
        roles = {info.name: info.role for info in run.clients}
        for name in names:
            rows.append(
                {
                    "run": label,
                    "policy": run.policy,
                    "client": name,
                    "role": roles.get(name, "?"),
                    **summarise(run, mine[mine["client"].astype(str) == name]),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def live_changes(run: RunData, fields: Collection[str]) -> pd.DataFrame:
    """The run's ``limits.csv`` rows that changed one of ``fields``, in file order."""
    return run.limits[run.limits["field"].isin(list(fields))]


def numbers(values: pd.Series) -> np.ndarray:
    """A column as floats; what does not parse is NaN."""
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def held_in_order(values: Sequence[float] | np.ndarray) -> list[float]:
    """Each value that held, in order, a repeat of the one before dropped (NaN equals NaN,
    as "none" stays "none")."""
    held: list[float] = []
    for value in (float(v) for v in values):
        if not held or not _same(value, held[-1]):
            held.append(value)
    return held


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b
