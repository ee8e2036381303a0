"""Turn an ncu trace into a profile, attach un-instrumented durations, and aggregate per identity.

ncu replays each kernel alone with counters on, so its durations are not what the kernel takes
in a normal run. The profiler therefore makes a second, un-instrumented pass (torch.profiler)
and :func:`attach_measured_durations` lines the two launch sequences up kernel by kernel. The
alignment is a sequence alignment, not a positional zip: one kernel extra or missing in either
pass (a warm-up allocation, a cuDNN autotuning launch) must not shift every row after it.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from orion_common.errors import OrionError
from postprocess.classify import CLASSIFICATION_RULE, classify_kernels
from postprocess.metrics import metric_set_of
from postprocess.ncu_csv import NcuTrace
from postprocess.occupancy import occupancy_columns
from postprocess.profile_format import (
    IDENTITY_COLUMNS,
    PROFILE_COLUMNS,
    SHAPE_COLUMNS,
    Profile,
    complete_metadata,
)

MEASURED_COLUMNS: tuple[str, ...] = ("demangled_name", *SHAPE_COLUMNS, "duration_ns")
"""What :func:`attach_measured_durations` needs from the un-instrumented pass, in launch order."""

IDENTITY_TABLE_COLUMNS: dict[str, str] = {
    **{column: PROFILE_COLUMNS[column] for column in IDENTITY_COLUMNS},
    "demangled_name": "string",
    "kernel_class": "string",
    "sm_needed": "Int64",
    "duration_ns": "float64",
    "launches": "int64",
}
"""Schema of :func:`kernel_identity_table`, the table the scheduler loads."""

_ANCHOR_RUN = 3
"""Occurrence-numbered matches count only in runs of at least this many launches: after an extra
or missing launch of a kernel, its later occurrence numbers are off by one and can pair single
launches wrongly; a run of consecutive agreeing launches cannot be such an accident."""


def graph_columns(rows: int, metadata: dict[str, Any]) -> dict[str, pd.Series]:
    """The graph columns: for a step captured as one CUDA graph (``metadata["cuda_graph"]``),
    every kernel node is in graph 0, whose wall time is the step's measured GPU span; empty for
    an eager step."""
    graph = metadata.get("cuda_graph") is True
    span = metadata.get("step_gpu_span_ns")
    return {
        "graph": pd.Series([0 if graph else pd.NA] * rows, dtype="Int64"),
        "graph_duration_ns": pd.Series(
            [float(span) if graph and isinstance(span, (int, float)) else np.nan] * rows,
            dtype="float64",
        ),
    }


def build_profile(trace: NcuTrace, metadata: dict[str, Any]) -> Profile:
    """The profile of ``trace``; ``metadata`` supplies what ncu cannot know (workload, versions).

    GPU facts come from the trace (the GPU ncu actually profiled) and override ``metadata``;
    ``gpu_name`` and ``created_utc`` are filled only when the caller left them out, and so is
    ``metric_set`` (then the set the CSV's throughput columns correspond to, or None).
    ``throughput_source`` always comes from the trace: how each throughput was computed.
    """
    kernels = trace.kernels.reset_index(drop=True)
    occupancy = occupancy_columns(kernels, trace.device)
    table = pd.DataFrame(
        {
            "order": pd.Series(np.arange(len(kernels)), dtype="Int64"),
            **{column: kernels[column] for column in ("kernel_name", "demangled_name")},
            **{column: kernels[column] for column in SHAPE_COLUMNS},
            "occurrence": kernels.groupby(list(IDENTITY_COLUMNS), dropna=False, sort=False)
            .cumcount()
            .astype("Int64"),
            **{
                column: kernels[column]
                for column in (
                    "registers_per_thread",
                    "static_shared_memory_bytes",
                    "dynamic_shared_memory_bytes",
                )
            },
            **{column: occupancy[column] for column in ("blocks_per_sm", "sm_needed", "waves")},
            **{
                column: kernels[column]
                for column in ("compute_throughput_pct", "memory_throughput_pct", "tensor_pipe_pct")
            },
            "kernel_class": classify_kernels(kernels),
            "duration_ns": kernels["duration_ns"],
            "measured_duration_ns": pd.Series(np.nan, index=kernels.index, dtype="float64"),
            **graph_columns(len(kernels), metadata),
        }
    )
    table = table[list(PROFILE_COLUMNS)].astype(PROFILE_COLUMNS)

    merged = complete_metadata(metadata)
    if merged.get("created_utc") is None:
        merged["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if merged.get("gpu_name") is None:
        merged["gpu_name"] = trace.device.name
    merged["sm_count"] = trace.device.sm_count
    merged["compute_capability"] = trace.device.compute_capability
    merged["device_limits"] = trace.device.to_metadata()
    merged["classification_rule"] = CLASSIFICATION_RULE
    if merged.get("metric_set") is None:
        merged["metric_set"] = metric_set_of(trace.throughput_source)
    merged["throughput_source"] = dict(trace.throughput_source)
    return Profile(metadata=merged, kernels=table)


@dataclass(frozen=True)
class MatchReport:
    """How the ncu launches and the measured launches lined up.

    ``matched_by_base_name`` (part of ``matched``) counts pairs found only after reducing names
    to their bare function name, which happens when ncu printed its own demangled spelling
    instead of mangled names (run ncu with ``--print-kernel-base mangled`` to avoid it).
    """

    matched: int
    matched_by_base_name: int
    only_in_ncu: int
    only_in_measured: int


def kernel_base_name(name: str) -> str:
    """The bare function name: no return type, namespaces, template arguments or parameters.

    Both demangler spellings agree on it: ncu writes ``at::<unnamed>::f<float>(T1)`` where
    libstdc++ writes ``at::native::(anonymous namespace)::f<float>(float)``; both give ``f``.
    """
    text = name.replace("(anonymous namespace)", "").replace("<unnamed>", "").strip()
    text = text.removeprefix("void ").strip()
    head = re.split(r"[<(]", text, maxsplit=1)[0]
    return head.rsplit("::", 1)[-1].strip() or name


def _shape(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    dims = [frame[column].astype("Int64").tolist() for column in SHAPE_COLUMNS]
    return [tuple(None if pd.isna(v) else int(v) for v in row) for row in zip(*dims, strict=True)]


def _names(frame: pd.DataFrame) -> list[str]:
    return frame["demangled_name"].astype("string").fillna("").tolist()


def _with_occurrence(keys: Sequence[Hashable]) -> list[tuple[Hashable, int]]:
    """Each key paired with how many times it appeared before: makes every launch unique."""
    seen: Counter[Hashable] = Counter()
    numbered = []
    for key in keys:
        numbered.append((key, seen[key]))
        seen[key] += 1
    return numbered


def _align_levels(
    levels: Sequence[tuple[Sequence[Hashable], Sequence[Hashable], int]],
    level: int,
    a: tuple[int, int],
    b: tuple[int, int],
    pairs: list[tuple[int, int]],
    found: list[int],
) -> None:
    """Align the ``a``/``b`` windows on ``levels[level]`` = (keys_a, keys_b, shortest run kept).

    Matching runs shorter than the level's minimum are dropped; every gap between kept runs that
    has launches on both sides is aligned again one level down. ``found[level]`` counts pairs.
    """
    keys_a, keys_b, shortest = levels[level]
    # autojunk would discard the most frequent kernels (ReLU, batch norm) as "junk".
    matcher = difflib.SequenceMatcher(
        None, keys_a[a[0] : a[1]], keys_b[b[0] : b[1]], autojunk=False
    )
    next_a, next_b = a[0], b[0]
    for block in matcher.get_matching_blocks():  # ends with a zero-size sentinel at the ends
        start_a, start_b = a[0] + block.a, b[0] + block.b
        if block.size and block.size < shortest:
            continue
        if start_a > next_a and start_b > next_b and level + 1 < len(levels):
            _align_levels(levels, level + 1, (next_a, start_a), (next_b, start_b), pairs, found)
        pairs.extend(
            zip(
                range(start_a, start_a + block.size),
                range(start_b, start_b + block.size),
                strict=True,
            )
        )
        found[level] += block.size
        next_a, next_b = start_a + block.size, start_b + block.size


def _match(ncu: pd.DataFrame, measured: pd.DataFrame) -> tuple[list[tuple[int, int]], int]:
    """(pairs of row positions, how many pairs needed base names).

    Four passes, each only inside the stretches the previous one left unmatched:

    1. (name, grid, block, occurrence): every launch is a unique token, so repeated layers or
       iterations cannot be aligned against the wrong repetition (SequenceMatcher grabs the
       longest common block first, which in a periodic sequence can be one period off);
    2. (name, grid, block): launches whose occurrence shifted because an earlier launch of the
       same kernel is extra or missing;
    3. and 4. the same with base names, for the two demanglers' spellings of one kernel.
    """
    ncu_shapes, measured_shapes = _shape(ncu), _shape(measured)
    ncu_names, measured_names = _names(ncu), _names(measured)
    exact_a = list(zip(ncu_names, ncu_shapes, strict=True))
    exact_b = list(zip(measured_names, measured_shapes, strict=True))
    base_a = [(kernel_base_name(n), s) for n, s in exact_a]
    base_b = [(kernel_base_name(n), s) for n, s in exact_b]
    levels = [
        (_with_occurrence(exact_a), _with_occurrence(exact_b), _ANCHOR_RUN),
        (exact_a, exact_b, 1),
        (_with_occurrence(base_a), _with_occurrence(base_b), _ANCHOR_RUN),
        (base_a, base_b, 1),
    ]
    pairs: list[tuple[int, int]] = []
    found = [0] * len(levels)
    _align_levels(levels, 0, (0, len(ncu)), (0, len(measured)), pairs, found)
    return sorted(pairs), found[2] + found[3]


def attach_measured_durations(
    profile: Profile, measured: pd.DataFrame
) -> tuple[Profile, MatchReport]:
    """Fill ``measured_duration_ns`` from the un-instrumented pass; unmatched rows stay NaN.

    ``measured`` has :data:`MEASURED_COLUMNS`, one row per launch in launch order. Launches are
    matched on (demangled name, grid, block) by sequence alignment.
    """
    missing = [column for column in MEASURED_COLUMNS if column not in measured.columns]
    if missing:
        raise OrionError(
            f"measured kernel table lacks column(s): {', '.join(missing)}",
            hint="it must come from orion's un-instrumented pass (torch.profiler)",
        )
    ncu = profile.kernels.reset_index(drop=True)
    runs = measured.reset_index(drop=True)
    pairs, by_base = _match(ncu, runs)

    durations = np.full(len(ncu), np.nan)
    if pairs:
        rows, sources = (np.array(side) for side in zip(*pairs, strict=True))
        durations[rows] = runs["duration_ns"].astype("float64").to_numpy()[sources]
    kernels = ncu.copy()
    kernels["measured_duration_ns"] = durations
    report = MatchReport(
        matched=len(pairs),
        matched_by_base_name=by_base,
        only_in_ncu=len(ncu) - len(pairs),
        only_in_measured=len(runs) - len(pairs),
    )
    return Profile(metadata=dict(profile.metadata), kernels=kernels), report


def _majority_class(classes: pd.Series, groups: pd.Series) -> pd.Series:
    """Most common class per group; compute/memory tie -> unknown; unknown loses ties to a class.

    An ``unknown`` row only says a counter was missing, so it should not outvote real evidence.
    """
    counts = (
        pd.crosstab(groups, classes.astype("string").fillna("unknown"))
        .reindex(columns=["compute", "memory", "unknown"], fill_value=0)
        .astype("int64")
    )
    compute, memory, unknown = (counts[c] for c in ("compute", "memory", "unknown"))
    result = np.select(
        [unknown > np.maximum(compute, memory), compute > memory, memory > compute],
        ["unknown", "compute", "memory"],
        default="unknown",
    )
    return pd.Series(result, index=counts.index, dtype="string")


def identity_groups(kernels: pd.DataFrame) -> pd.Series:
    """Group number per row: rows sharing (name, grid, block) share it, numbered by first launch."""
    return kernels.groupby(list(IDENTITY_COLUMNS), dropna=False, sort=False).ngroup()


def kernel_identity_table(profile: Profile) -> pd.DataFrame:
    """One row per kernel identity (name, grid, block), in order of first launch.

    ``sm_needed``: the largest over launches (safe for admission); ``kernel_class``: the majority;
    ``duration_ns``: median measured duration where any launch was measured, else median ncu
    duration; ``launches``: how many rows share the identity.
    """
    kernels = profile.kernels.reset_index(drop=True)
    groups = identity_groups(kernels)
    by_group = kernels.groupby(groups, sort=True)
    first = by_group[[*IDENTITY_COLUMNS, "demangled_name"]].first()
    measured = by_group["measured_duration_ns"].median()
    replayed = by_group["duration_ns"].median()
    table = first.assign(
        kernel_class=_majority_class(kernels["kernel_class"], groups),
        sm_needed=by_group["sm_needed"].max(),
        duration_ns=measured.fillna(replayed),
        launches=by_group.size(),
    )
    return table[list(IDENTITY_TABLE_COLUMNS)].astype(IDENTITY_TABLE_COLUMNS).reset_index(drop=True)
