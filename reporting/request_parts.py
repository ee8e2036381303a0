"""Where an HP request's time goes, from its request table alone (no trace needed).

Every inference request records its arrival, start and end and the host time of its launch call
(``enqueue_ms``). So each one splits into three parts:

- **queueing**: start - arrival, behind the client's own previous request;
- **launch**: the launch call on the host (Python, the framework, orion's hook);
- **after launch**: end - start - launch. This is the GPU work, anything it waited for on the
  GPU (BE work draining, a context switch, MPS), and the waiting thread's wake-up.

Against the run's ``dedicated`` reference (its round's, as for every ratio), the after-launch part
says how many requests sharing slowed at all: those above the reference's p99, the ``slowed``
share. It also says by how much: the median of those requests less the reference's median. Seen
this way, MPS costs every request, while a time-sliced context costs only the requests that find
BE's context on the GPU (docs/scheduler.md, "Sharing without MPS"). The traced tail attribution
(:mod:`reporting.tail`) splits the slow requests further; this table needs no trace, so every
run has it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from reporting.metrics import round_baselines, run_labels, window_rows
from reporting.rundata import ClientInfo, RunData

COLUMNS = (
    "run",
    "client",
    "requests",
    "queue_p50_ms",
    "queue_p99_ms",
    "launch_p50_ms",
    "after_launch_p50_ms",
    "after_launch_p99_ms",
    "slowed_share",
    "slowed_extra_ms",
)
"""One row per run and HP inference client that recorded launch times. ``slowed_share`` and
``slowed_extra_ms`` are empty for a run without a reference, and for the reference itself."""


def request_parts(runs: Sequence[RunData]) -> pd.DataFrame:
    """The parts of the HP requests of each run, against each run's own ``dedicated`` run."""
    labels = run_labels(runs)
    rows = []
    for run, label, reference in zip(runs, labels, round_baselines(runs), strict=True):
        for client in run.clients:
            parts = _parts(run, client)
            if parts is None:
                continue
            slowed_share = slowed_extra = float("nan")
            alone = _reference_parts(reference, client.name) if reference is not run else None
            if alone is not None and len(alone) and len(parts):
                after, after_alone = parts["after_launch_ms"], alone["after_launch_ms"]
                slowed = after[after > np.quantile(after_alone, 0.99)]
                slowed_share = len(slowed) / len(after)
                if len(slowed):
                    slowed_extra = float(np.median(slowed) - np.median(after_alone))
            rows.append(
                {
                    "run": label,
                    "client": client.name,
                    "requests": len(parts),
                    "queue_p50_ms": _quantile(parts["queue_ms"], 0.5),
                    "queue_p99_ms": _quantile(parts["queue_ms"], 0.99),
                    "launch_p50_ms": _quantile(parts["launch_ms"], 0.5),
                    "after_launch_p50_ms": _quantile(parts["after_launch_ms"], 0.5),
                    "after_launch_p99_ms": _quantile(parts["after_launch_ms"], 0.99),
                    "slowed_share": slowed_share,
                    "slowed_extra_ms": slowed_extra,
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _parts(run: RunData, client: ClientInfo) -> pd.DataFrame | None:
    """The in-window requests' parts in ms; None for a client that is not an HP inference
    client, or whose table has no launch times (runs from before they were recorded)."""
    if client.role != "hp" or not client.is_inference:
        return None
    rows = window_rows(run, client)
    if "enqueue_ms" not in rows.columns:
        return None
    rows = rows[rows["enqueue_ms"].notna() & rows["start_s"].notna()]
    if rows.empty:
        return None
    service_ms = (rows["end_s"] - rows["start_s"]) * 1000.0
    return pd.DataFrame(
        {
            "queue_ms": (rows["start_s"] - rows["arrival_s"]).to_numpy(dtype=float) * 1000.0,
            "launch_ms": rows["enqueue_ms"].to_numpy(dtype=float),
            "after_launch_ms": (service_ms - rows["enqueue_ms"]).to_numpy(dtype=float),
        }
    )


def _reference_parts(reference: RunData | None, name: str) -> pd.DataFrame | None:
    if reference is None:
        return None
    client = next((c for c in reference.clients if c.name == name), None)
    return None if client is None else _parts(reference, client)


def _quantile(values: pd.Series, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else float("nan")
