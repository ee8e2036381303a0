"""The run directory's format, ``orion-run`` (docs/architecture.md, "Run directory"), declared once.

The writer (:mod:`colocation.rundir` and the processes that fill its tables), the reader
(:mod:`reporting.rundata`), the scheduler's trace drain and the tests' run factory all take the
format's name, version, status values and table schemas from here, so they cannot drift apart.

This module is in the bottom layer: it imports nothing from other orion packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FORMAT = "orion-run"
VERSION = 1
"""Raised only for a change an older reader would misread; optional columns and new run.json
keys (e.g. ``table_rows``) are added without a version change."""

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_INCOMPLETE = "incomplete"
STATUS_FAILED = "failed"
STATUSES = (STATUS_RUNNING, STATUS_COMPLETE, STATUS_INCOMPLETE, STATUS_FAILED)

GATING_POLICIES = ("reef", "orion")
"""Policies under which the preload library holds BE launches back; the jobs file's
``run.be_gate`` (kept in the run's config) says where: ``cpu`` in the launching thread, ``gpu``
on the GPU. Reports name the gate of these runs only (``orion@cpu-gate``)."""

GRAPH_GATING_POLICIES = (*GATING_POLICIES, "quota")
"""Policies under which the CUDA graphs of gated clients (BE under reef and orion, every client
under quota) are held within the queue limit; the jobs file's ``run.be_graph_gate`` (kept in the
run's config) says how: ``inside`` (gate waits inside each graph), ``segments`` (each graph split
into pieces launched through the gate) or ``whole`` (not rewritten: admitted whole behind its
launch's gate). Left unset, it is every policy's default (segments:
``scheduler_core.sharing.DEFAULT_RUN_BE_GRAPH_GATE``; inside under MPS for runs made before
2026-12-02), and run.json records which. Reports name the setting only where it is not that
default (``reef@whole-graphs``, ``orion@inside-graphs@timeslice``)."""

RUN_JSON = "run.json"
CLIENTS_DIR = "clients"
GPU_TABLE = "gpu.csv"
TRACE_TABLE = "trace.csv"
SCHEDULER_JSON = "scheduler.json"
MEMORY_TABLE = "memory.csv"
SHARES_TABLE = "shares.csv"
LIMITS_TABLE = "limits.csv"

TABLE_ROWS_KEY = "table_rows"
"""``run.json`` key written when the run ends: ``{table path relative to the run directory:
data rows its writer wrote}``, for the client tables, ``gpu.csv`` and ``trace.csv``. A reader
finding fewer rows knows the table was cut after the run. Runs from before it lack the key."""

ColumnType = Literal["int", "float", "str"]


@dataclass(frozen=True)
class Column:
    """One declared table column: its name (unit in the name) and the type it is parsed to.

    ``optional`` columns were added to a table after files without them were written; such a
    file is still read, with the column filled with missing values.
    """

    name: str
    kind: ColumnType
    optional: bool = False
    nonnegative: bool = False
    """A count or a duration: a negative value is damage, not a measurement."""


def column_names(columns: Sequence[Column]) -> tuple[str, ...]:
    """The header a writer writes: every column, in order."""
    return tuple(c.name for c in columns)


def required_names(columns: Sequence[Column]) -> tuple[str, ...]:
    """The columns every file of the table has, also those written before optional ones."""
    return tuple(c.name for c in columns if not c.optional)


# One row per request (latency from arrival, so queueing counts). enqueue_ms / enqueue_cpu_ms:
# wall and thread CPU time of the call that enqueued the request's GPU work, which tells a
# host-bound request from a GPU-bound one; added later, older tables lack them.
INFERENCE_COLUMNS: tuple[Column, ...] = (
    Column("request", "int", nonnegative=True),
    Column("arrival_s", "float"),
    Column("start_s", "float"),
    Column("end_s", "float"),
    Column("latency_ms", "float", nonnegative=True),
    Column("enqueue_ms", "float", optional=True),
    Column("enqueue_cpu_ms", "float", optional=True),
)
# One row per training iteration.
TRAINING_COLUMNS: tuple[Column, ...] = (
    Column("iteration", "int", nonnegative=True),
    Column("start_s", "float"),
    Column("end_s", "float"),
    Column("duration_ms", "float", nonnegative=True),
    Column("samples", "float", nonnegative=True),
)
# gpu.csv: nvidia-ml-py samples; the clocks were added later (and stay empty on a GPU that
# refuses clock queries).
GPU_COLUMNS: tuple[Column, ...] = (
    Column("time_s", "float"),
    Column("sm_util_pct", "float"),
    Column("mem_util_pct", "float"),
    Column("mem_used_mib", "float"),
    Column("sm_clock_mhz", "float", optional=True),
    Column("mem_clock_mhz", "float", optional=True),
)
# trace.csv: one row per kernel launch the preload library recorded, times on the run clock.
TRACE_COLUMNS: tuple[Column, ...] = (
    Column("client", "str"),
    # The library's own record number (1, 2, ... per client): a gap is a record lost to the ring
    # (overwritten before it was drained), which scheduler.json counts as trace_records_lost.
    Column("seq", "int"),
    Column("kernel_name", "str"),
    Column("kernel_class", "str"),
    Column("sm_needed", "float"),
    Column("duration_ns", "float"),
    Column("enqueue_s", "float"),
    Column("launch_s", "float"),
    # Why the launch went ahead when it did (the policy's reason: hp_idle, fits_beside, ...).
    Column("reason", "str", optional=True),
)
# memory.csv: each client's GPU memory as the preload library counts it (every allocation route),
# sampled by the runner about every half second; limit_bytes empty when the client has none.
MEMORY_COLUMNS: tuple[Column, ...] = (
    Column("time_s", "float"),
    Column("client", "str"),
    Column("used_bytes", "int"),
    Column("limit_bytes", "float"),
    Column("refused", "int"),
)
# shares.csv: each client's share of GPU time over the last quota window as the gate keeper
# measures it (the time it had work on the GPU), with the min/max shares in force; sampled about
# every 0.5 s in runs with GPU-time shares (policy quota, or min_util / max_util set).
SHARE_COLUMNS: tuple[Column, ...] = (
    Column("time_s", "float"),
    Column("client", "str"),
    Column("gpu_share", "float"),
    Column("min_util", "float"),
    Column("max_util", "float"),
)
# limits.csv: limits changed while the run was live (`orion quota`), times on the run clock;
# old/new empty for "no limit", in_use what the client held when it changed.
LIMIT_COLUMNS: tuple[Column, ...] = (
    Column("time_s", "float"),
    Column("utc", "str"),
    Column("client", "str"),
    Column("field", "str"),
    Column("old", "float"),
    Column("new", "float"),
    Column("in_use", "int"),
)
# Not a file: the records drained from the shared-memory trace ring (scheduler_core.run_state),
# before they are put on the run clock and written as trace.csv.
RAW_TRACE_COLUMNS: tuple[Column, ...] = (
    Column("client", "str"),
    Column("seq", "int"),
    Column("kernel_name", "str"),
    Column("kernel_class", "str"),
    Column("sm_needed", "int"),
    Column("duration_ns", "int"),
    Column("known", "int"),
    Column("reason", "str"),
    Column("enqueue_ns", "int"),
    Column("launch_ns", "int"),
)
RAW_TRACE_COLUMN_NAMES = column_names(RAW_TRACE_COLUMNS)

MODE_COLUMNS: dict[str, tuple[Column, ...]] = {
    "infer": INFERENCE_COLUMNS,
    "train": TRAINING_COLUMNS,
}
"""A client table's schema by the client's mode."""


def client_table(name: str) -> str:
    """Where client ``name``'s table lives, relative to the run directory."""
    return f"{CLIENTS_DIR}/{name}.csv"


def count_rows(path: Path) -> int:
    """Data rows of a table file as written: whole (newline-ended) lines after the header.

    Writers quote text and never write a line break inside a cell, so lines are rows. A missing
    or unreadable file has 0.
    """
    try:
        with path.open("rb") as handle:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return 0
    return max(lines - 1, 0)
