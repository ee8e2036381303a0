"""Kernel tables of the un-instrumented pass: from torch.profiler's trace to per-position medians.

ncu replays every kernel alone, so its durations are not what a kernel takes in a normal run. The
measurement pass times K consecutive steps with torch.profiler (CUPTI activity records, no
replay) instead. Several steps guard against one-off noise, and comparing their kernel sequences
tells whether a step really is the same work every time: the scheduler's profile assumes it is.

Nothing here imports torch: the target feeds in the exported Chrome trace, so these functions are
tested on a CPU machine.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError
from postprocess import MEASURED_COLUMNS, SHAPE_COLUMNS

STEP_COLUMNS: tuple[str, ...] = ("step", "order", *MEASURED_COLUMNS)
"""The per-step table (``measured_steps.csv``): every kernel of every measured step, in launch
order within its step."""

MEDIAN_COLUMNS: tuple[str, ...] = ("order", *MEASURED_COLUMNS, "steps_used")
"""The table post-processing consumes (``measured.csv``): one row per launch position, with the
median duration over the steps whose kernel sequence agreed."""

_DIMS = ("x", "y", "z")


@dataclass(frozen=True)
class StepConsistency:
    """Whether every measured step launched the same kernels (name, grid, block) in one order.

    ``agreeing_steps`` is how many steps share the most common sequence; only those feed the
    medians. ``first_difference`` describes the first disagreement, for the user.
    """

    consistent: bool
    steps: int
    agreeing_steps: int
    kernels_per_step: tuple[int, ...]
    first_difference: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "consistent": self.consistent,
            "steps": self.steps,
            "agreeing_steps": self.agreeing_steps,
            "kernels_per_step": list(self.kernels_per_step),
            "first_difference": self.first_difference,
        }


def _dim3(value: Any) -> tuple[int, int, int] | None:
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 3:
        return None
    try:
        dims = [int(v) for v in value]
    except (TypeError, ValueError):
        return None
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _kernel_events(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The GPU kernel records of a Chrome trace: Kineto's complete events (``ph`` "X") with
    ``cat`` "kernel" (memcpy, memset and runtime calls are other categories)."""
    events = trace.get("traceEvents", []) if isinstance(trace, Mapping) else []
    return [
        event
        for event in events
        if isinstance(event, Mapping) and event.get("cat") == "kernel" and event.get("ph") == "X"
    ]


def kernel_times_from_trace(trace: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """Each kernel record of a Chrome trace as (name, start, duration), in microseconds on the
    trace's clock, by start time: when kernels ran, for gaps between them (the kernels of one
    CUDA graph replay share one launch, so launch order cannot order them)."""
    times = [
        (str(event.get("name", "")), float(event["ts"]), float(event.get("dur", 0.0)))
        for event in _kernel_events(trace)
        if isinstance(event.get("ts"), (int, float))
    ]
    return sorted(times, key=lambda time: time[1])


def kernel_rows_from_trace(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Kernel launches of one Chrome trace (``torch.profiler`` export), in launch order.

    Kineto tags GPU kernels with ``cat == "kernel"`` and carries ``grid`` and ``block`` in their
    args. Launch order is the CUPTI correlation id (it grows with each launch), falling back to the
    start time; on one stream both agree. Memcpy and memset records are not kernels and ncu does
    not profile them, so they are left out.
    """
    kernels = []
    for event in _kernel_events(trace):
        args = event.get("args") or {}
        grid, block = _dim3(args.get("grid")), _dim3(args.get("block"))
        if grid is None or block is None:
            raise OrionError(
                f"torch.profiler kernel event {str(event.get('name'))[:60]!r} has no grid/block",
                hint="this torch's Kineto does not record launch shapes; use torch >= 2.1",
            )
        correlation = args.get("correlation")
        kernels.append(
            {
                "_key": (
                    int(correlation) if isinstance(correlation, (int, float)) else float("inf"),
                    float(event.get("ts", 0.0)),
                ),
                "demangled_name": str(event.get("name", "")),
                **{f"grid_{axis}": grid[i] for i, axis in enumerate(_DIMS)},
                **{f"block_{axis}": block[i] for i, axis in enumerate(_DIMS)},
                # Chrome traces are in microseconds, with nanosecond resolution.
                "duration_ns": float(event.get("dur", 0.0)) * 1000.0,
            }
        )
    kernels.sort(key=lambda row: row["_key"])
    for row in kernels:
        del row["_key"]
    return kernels


def gpu_span_ns(trace: Mapping[str, Any]) -> float | None:
    """From the first kernel's start to the last kernel's end in one step's trace, in ns.

    This is the step's wall time on the GPU, gaps between kernels included: for a step replayed as
    a CUDA graph, the time the graph occupies the GPU, which the scheduler needs to know how long
    a launched graph holds its SMs (the sum of its kernels' durations leaves the gaps out). None
    when the trace has no kernel.
    """
    events = trace.get("traceEvents", []) if isinstance(trace, Mapping) else []
    starts, ends = [], []
    for event in events:
        if not isinstance(event, Mapping) or event.get("cat") != "kernel" or event.get("ph") != "X":
            continue
        try:
            start, duration = float(event["ts"]), float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        starts.append(start)
        ends.append(start + duration)
    if not starts:
        return None
    return (max(ends) - min(starts)) * 1000.0  # Chrome traces are in microseconds


def write_spans(spans: list[float | None], path: str | Path) -> None:
    """``measured_span.json``: each measured step's GPU span and their median (ns)."""
    import json
    import statistics

    known = [span for span in spans if span is not None]
    record = {
        "step_gpu_span_ns": spans,
        "median_ns": statistics.median(known) if known else None,
    }
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def read_span_median(path: str | Path) -> float | None:
    """The median step GPU span recorded by :func:`write_spans`; None when absent or unreadable."""
    import json

    try:
        value = json.loads(Path(path).read_text(encoding="utf-8")).get("median_ns")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def steps_table(steps: Iterable[list[dict[str, Any]]]) -> pd.DataFrame:
    """One table of several steps' kernel rows, numbered by step and position (``STEP_COLUMNS``)."""
    rows = [
        {"step": step, "order": order, **row}
        for step, kernels in enumerate(steps)
        for order, row in enumerate(kernels)
    ]
    table = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    return table.astype(
        {"step": "int64", "order": "int64", "demangled_name": "string", "duration_ns": "float64"}
        | {column: "int64" for column in SHAPE_COLUMNS}
    )


def _sequence(frame: pd.DataFrame) -> tuple[tuple[Any, ...], ...]:
    columns = ["demangled_name", *SHAPE_COLUMNS]
    return tuple(tuple(row) for row in frame[columns].itertuples(index=False, name=None))


def _describe_difference(
    reference: tuple[tuple[Any, ...], ...], other: tuple[tuple[Any, ...], ...], step: int
) -> str:
    for position, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            return (
                f"step {step} launches {str(b[0])[:60]!r} grid {b[1:4]} block {b[4:7]} at position "
                f"{position}, where the other steps launch {str(a[0])[:60]!r} grid {a[1:4]} "
                f"block {a[4:7]}"
            )
    return f"step {step} launches {len(other)} kernels, the other steps {len(reference)}"


def check_steps(steps: pd.DataFrame) -> StepConsistency:
    """Compare the steps' kernel sequences; the most common one is the reference."""
    if steps.empty:
        return StepConsistency(False, 0, 0, (), "no kernels were recorded in any step")
    by_step = {int(step): _sequence(frame) for step, frame in steps.groupby("step", sort=True)}
    counts = Counter(by_step.values())
    reference, agreeing = counts.most_common(1)[0]
    difference = None
    for step, sequence in by_step.items():
        if sequence != reference:
            difference = _describe_difference(reference, sequence, step)
            break
    return StepConsistency(
        consistent=agreeing == len(by_step),
        steps=len(by_step),
        agreeing_steps=agreeing,
        kernels_per_step=tuple(len(sequence) for sequence in by_step.values()),
        first_difference=difference,
    )


def median_per_position(steps: pd.DataFrame) -> tuple[pd.DataFrame, StepConsistency]:
    """The median duration at each launch position over the steps that agree with the majority.

    A step whose sequence differs cannot be lined up position by position, so it is left out
    (and reported); it would otherwise pair durations of different kernels.
    """
    consistency = check_steps(steps)
    if consistency.agreeing_steps == 0:
        return pd.DataFrame(columns=list(MEDIAN_COLUMNS)), consistency
    reference = Counter(
        _sequence(frame) for _, frame in steps.groupby("step", sort=True)
    ).most_common(1)[0][0]
    used = [
        step for step, frame in steps.groupby("step", sort=True) if _sequence(frame) == reference
    ]
    chosen = steps[steps["step"].isin(used)]
    first = chosen[chosen["step"] == used[0]].sort_values("order").reset_index(drop=True)
    medians = chosen.groupby("order", sort=True)["duration_ns"].median().to_numpy()
    table = first[["order", *MEASURED_COLUMNS]].copy()
    table["duration_ns"] = medians
    table["steps_used"] = len(used)
    return table[list(MEDIAN_COLUMNS)].reset_index(drop=True), consistency


def write_table(table: pd.DataFrame, path: str | Path) -> None:
    """Atomic CSV with every text cell quoted (kernel names hold commas and ``#``)."""
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    write_text_atomic(path, buffer.getvalue())


def read_measured(path: str | Path) -> pd.DataFrame:
    """A measured kernel table (``measured.csv`` or a user's own with ``MEASURED_COLUMNS``)."""
    source = Path(path)
    if not source.is_file():
        raise OrionError(
            f"measured kernel table not found: {source}",
            hint="orion profile writes it as measured.csv beside ncu_raw.csv",
        )
    try:
        # Only empty cells are missing: a kernel could be called "NA".
        table = pd.read_csv(source, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise OrionError(f"{source} is not a readable CSV ({error})") from None
    missing = [column for column in MEASURED_COLUMNS if column not in table.columns]
    if missing:
        raise OrionError(
            f"{source} lacks column(s): {', '.join(missing)}",
            hint=f"a measured table needs {', '.join(MEASURED_COLUMNS)}, one row per launch",
        )
    table["demangled_name"] = table["demangled_name"].astype("string")
    return table
