"""The run directory's format is declared once (orion_common.run_format): the writer, the
reader, the scheduler's trace drain and the tests' run factory all take it from there."""

from __future__ import annotations

import ast
from pathlib import Path

import rundir_factory

from colocation import rundir
from orion_common import run_format
from reporting import rundata
from scheduler_core import run_state

ORION_PACKAGES = {
    "benchmarks",
    "colocation",
    "orion_cli",
    "postprocess",
    "profiler",
    "reporting",
    "scheduler_core",
    "workloads",
}


def test_run_format_imports_nothing_from_other_orion_packages() -> None:
    tree = ast.parse(Path(run_format.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & ORION_PACKAGES
    assert "orion_common" not in imported


def test_writer_and_reader_take_name_version_and_statuses_from_the_declaration() -> None:
    assert rundir.RUN_FORMAT == rundata.RUN_FORMAT == run_format.FORMAT == "orion-run"
    assert rundir.RUN_VERSION == rundata.RUN_VERSION == run_format.VERSION
    assert rundata.STATUS_COMPLETE == rundir.STATUS_COMPLETE == run_format.STATUS_COMPLETE
    assert (
        rundir.STATUS_RUNNING,
        rundir.STATUS_COMPLETE,
        rundir.STATUS_INCOMPLETE,
        rundir.STATUS_FAILED,
    ) == run_format.STATUSES


def test_every_table_schema_is_the_one_declaration() -> None:
    pairs = [
        (rundir.INFERENCE_COLUMNS, rundata.INFERENCE_COLUMNS, run_format.INFERENCE_COLUMNS),
        (rundir.TRAINING_COLUMNS, rundata.TRAINING_COLUMNS, run_format.TRAINING_COLUMNS),
        (rundir.GPU_COLUMNS, rundata.GPU_COLUMNS, run_format.GPU_COLUMNS),
        (rundir.TRACE_COLUMNS, rundata.TRACE_COLUMNS, run_format.TRACE_COLUMNS),
    ]
    for written, read, declared in pairs:
        assert read is declared
        assert written == run_format.column_names(declared)
    # The drained native trace (before it becomes trace.csv) and the tests' factory too.
    assert run_state.TRACE_COLUMNS is run_format.RAW_TRACE_COLUMN_NAMES
    assert tuple(rundir_factory.TRACE_HEADER) == run_format.required_names(run_format.TRACE_COLUMNS)
    assert tuple(rundir_factory.INFERENCE_HEADER) == run_format.required_names(
        run_format.INFERENCE_COLUMNS
    )
    assert tuple(rundir_factory.TRAINING_HEADER) == rundir.TRAINING_COLUMNS
    assert tuple(rundir_factory.GPU_HEADER + rundir_factory.GPU_CLOCK_HEADER) == rundir.GPU_COLUMNS


def test_optional_columns_are_the_later_additions() -> None:
    def optional(columns: tuple[run_format.Column, ...]) -> list[str]:
        return [c.name for c in columns if c.optional]

    assert optional(run_format.INFERENCE_COLUMNS) == ["enqueue_ms", "enqueue_cpu_ms"]
    assert optional(run_format.GPU_COLUMNS) == ["sm_clock_mhz", "mem_clock_mhz"]
    assert optional(run_format.TRAINING_COLUMNS) == []
    assert optional(run_format.TRACE_COLUMNS) == ["reason"]


def test_count_rows_counts_whole_lines_after_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    assert run_format.count_rows(path) == 0  # missing
    path.write_text("a,b\n")
    assert run_format.count_rows(path) == 0
    path.write_text("a,b\n1,2\n3,4\n5,")  # the cut last line is not a row
    assert run_format.count_rows(path) == 2
