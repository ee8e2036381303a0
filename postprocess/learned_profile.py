"""A client's online-learned kernels as an ordinary profile file (``source: online``).

The preload library learns what a client's offline profile lacks while it runs (docs/scheduler.md,
"Online profiles"): per kernel its name, launch shape, the SM need the driver's occupancy
calculator gives and the median of its timed launches; per CUDA graph its kernel nodes and the
median of its timed launches. This module turns those entries (as ``SchedulerRun.learned`` returns
them) into a :class:`~postprocess.profile_format.Profile`, so that the one profile reader and the
one loader take it like any other: ``orion run --profile`` and ``clients[].profile`` accept it.

What a learned profile cannot say, it leaves empty: no ncu counters, so every class is
``unknown``; a graph node's own duration is not measured inside a graph, so a graph is gated as a
unit (no timeline). Entries with fewer than the library's minimum samples have no duration and
are left out (a graph's nodes are kept: they identify the graph).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from orion_common.runclock import utc_now
from postprocess.demangle import demangle
from postprocess.profile_format import PROFILE_COLUMNS, Profile

LEARNED_SOURCE = "online"


def _row(entry: Mapping[str, Any], order: int, sm_count: int) -> dict[str, Any]:
    grid = tuple(int(v) for v in entry["grid"])
    block = tuple(int(v) for v in entry["block"])
    per_sm = int(entry.get("blocks_per_sm") or 0)
    blocks = grid[0] * grid[1] * grid[2]
    duration = int(entry.get("duration_ns") or 0) or None
    name = str(entry["name"])
    return {
        "order": order,
        "kernel_name": name,
        "demangled_name": demangle(name),
        "grid_x": grid[0],
        "grid_y": grid[1],
        "grid_z": grid[2],
        "block_x": block[0],
        "block_y": block[1],
        "block_z": block[2],
        "occurrence": 0,
        "dynamic_shared_memory_bytes": int(entry.get("shared_bytes") or 0),
        "blocks_per_sm": per_sm or None,
        "sm_needed": int(entry["sm_needed"]),
        "waves": blocks / (per_sm * sm_count) if per_sm and sm_count else None,
        "kernel_class": "unknown",
        "duration_ns": duration,
        "measured_duration_ns": duration,
    }


def learned_profile(
    entries: Iterable[Mapping[str, Any]],
    *,
    client: str,
    gpu_name: str | None,
    sm_count: int,
    command: list[str] | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
) -> Profile:
    """The profile of what ``client`` learned: one row per learned kernel with a duration, then
    each learned graph with a duration node by node (``graph`` numbered from 0, its wall time in
    ``graph_duration_ns``). Kernels without a name (the library's name pool was full) cannot be
    keyed by a reader and are left out, as are graphs whose nodes were not all recorded."""
    by_key = {int(entry["key"]): entry for entry in entries}
    rows: list[dict[str, Any]] = []
    for entry in by_key.values():
        if entry["graph"] or not entry["name"] or not int(entry.get("duration_ns") or 0):
            continue
        rows.append(_row(entry, len(rows), sm_count))
    graphs = 0
    for entry in by_key.values():
        duration = int(entry.get("duration_ns") or 0)
        nodes = [by_key.get(int(key)) for key in entry.get("nodes", [])]
        if not entry["graph"] or not duration or not nodes:
            continue
        if any(node is None or not node["name"] for node in nodes):
            continue
        for node in nodes:
            row = _row(node, len(rows), sm_count)
            row.update(graph=graphs, graph_duration_ns=duration)
            rows.append(row)
        graphs += 1
    table = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS)).astype(PROFILE_COLUMNS)
    metadata: dict[str, Any] = {
        "created_utc": utc_now(),
        "gpu_name": gpu_name,
        "sm_count": sm_count,
        "source": LEARNED_SOURCE,
        "client": client,
        "command": list(command) if command else None,
        "cuda_graph": graphs > 0,
        "classification_rule": None,
        **dict(extra_metadata or {}),
    }
    return Profile(metadata=metadata, kernels=table)
