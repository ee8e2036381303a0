"""The run directory as it is written: atomic run.json, an end state on every exit, tables that
can be read while they grow, and damage from a crash that `orion report` tolerates."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from colocation.rundir import (
    INFERENCE_COLUMNS,
    TRACE_COLUMNS,
    RunRecord,
    create_run_dir,
    git_revision,
)
from orion_common import run_format
from orion_common.csv_table import CsvTable, format_cell, rows_at_close, table_rows
from reporting import client_summary, load_run
from reporting.rundata import INFERENCE_COLUMNS as READER_INFERENCE_COLUMNS
from reporting.rundata import TRACE_COLUMNS as READER_TRACE_COLUMNS
from reporting.rundata import read_table

WHEN = datetime(2026, 11, 21, 12, 0, 5, tzinfo=timezone.utc)


def _entry(name: str, mode: str) -> dict:
    return {
        "name": name,
        "role": "hp" if mode == "infer" else "be",
        "workload": "bert",
        "mode": mode,
        "batch_size": 1,
        "dtype": "fp32",
        "table": f"clients/{name}.csv",
        "log": f"logs/{name}.log",
        "exit_code": None,
        "error": None,
        "window_start_s": 1.0,
        "window_end_s": 3.0,
    }


def _record(run_dir: Path) -> RunRecord:
    return RunRecord.begin(
        run_dir,
        policy="timeslice",
        config={"run": {"policy": "timeslice", "duration_s": 2}},
        environment={"gpu_name": None, "hostname": "test"},
        clients=[_entry("hp", "infer")],
        warnings=["a warning"],
    )


def test_run_dirs_are_named_by_policy_and_utc_time_and_never_shared(tmp_path: Path) -> None:
    first = create_run_dir(tmp_path / "runs", "orion", WHEN)
    second = create_run_dir(tmp_path / "runs", "orion", WHEN)
    assert first.name == "orion-20261121-120005"
    assert second.name == "orion-20261121-120005-1"
    assert (first / "clients").is_dir() and (first / "logs").is_dir()


def test_run_json_starts_running_and_ends_with_a_state(tmp_path: Path) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    record = _record(run_dir)
    data = json.loads((run_dir / "run.json").read_text())
    assert data["format"] == "orion-run" and data["version"] == 1
    assert data["status"] == "running"
    assert data["ended_utc"] is None
    assert data["warnings"] == ["a warning"]
    assert {"orion_version", "git_revision", "started_utc", "environment"} <= data.keys()
    record.finish("complete")
    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "complete" and data["ended_utc"]


def test_run_json_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    record = _record(run_dir)
    before = (run_dir / "run.json").read_text()

    def crash(fd: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C in the middle of writing the new version

    monkeypatch.setattr(os, "fsync", crash)
    record.data["status"] = "complete"
    with pytest.raises(KeyboardInterrupt):
        record.save()
    assert (run_dir / "run.json").read_text() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["clients", "logs", "run.json"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_leaving_by_an_exception_marks_the_run_incomplete(
    tmp_path: Path, error: type[BaseException]
) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    with pytest.raises(error), _record(run_dir):
        raise error("stop")
    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "incomplete"
    assert data["ended_utc"]
    assert data["notes"]
    assert load_run(run_dir).status == "incomplete"


def test_leaving_without_finishing_is_incomplete_too(tmp_path: Path) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    with _record(run_dir):
        pass
    assert json.loads((run_dir / "run.json").read_text())["status"] == "incomplete"


def test_a_finished_state_is_kept(tmp_path: Path) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    with _record(run_dir) as record:
        record.finish("failed")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


def test_table_rows_appear_whole_and_at_least_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "hp.csv"
    table = CsvTable(path, INFERENCE_COLUMNS, flush_interval_s=3600)
    table.append((0, 1.0, 1.0, 1.002, 2.0, 0.4, 0.4))
    # readable while being written: the header is there, the row waits for the interval
    assert read_table(path, READER_INFERENCE_COLUMNS, notes=[]).empty
    table.flush_interval_s = 0.0
    table.flush_if_due()
    rows = read_table(path, READER_INFERENCE_COLUMNS, notes=[])
    assert rows["request"].tolist() == [0]
    table.append((1, 1.1, 1.2, 1.21, 110.0, 0.5, 0.5))  # due at once now
    assert len(read_table(path, READER_INFERENCE_COLUMNS, notes=[])) == 2
    table.close()


def test_table_values_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    names = ["void k<{lambda()#1}>(float*, int)", 'say "hi", twice', "plain"]
    with CsvTable(path, TRACE_COLUMNS) as table:
        for seq, name in enumerate(names):
            table.append(("be", np.int64(seq), name, "compute", 66, 1500, 1.25, None, "hp_idle"))
    frame = read_table(path, READER_TRACE_COLUMNS, notes=[])
    assert frame["kernel_name"].tolist() == names
    assert frame["seq"].tolist() == [0, 1, 2]
    assert frame["enqueue_s"].tolist() == [1.25] * 3
    assert frame["launch_s"].isna().all()


def test_cells() -> None:
    assert format_cell(None) == ""
    assert format_cell(float("nan")) == ""
    assert format_cell(np.float64(0.1)) == "0.1"
    assert format_cell(np.int32(7)) == "7"
    assert format_cell(3) == "3"
    assert format_cell(2.0) == "2.0"
    assert format_cell("a#b") == '"a#b"'


def test_a_cut_last_line_is_tolerated_by_the_reader(tmp_path: Path) -> None:
    run_dir = create_run_dir(tmp_path, "timeslice", WHEN)
    record = _record(run_dir)
    with CsvTable(run_dir / "clients" / "hp.csv", INFERENCE_COLUMNS) as table:
        table.append((0, 1.5, 1.5, 1.502, 2.0, 0.4, 0.4))
        table.append((1, 1.7, 1.7, 1.703, 3.0, 0.5, 0.4))
    with (run_dir / "clients" / "hp.csv").open("a") as handle:
        handle.write("2,1.9,1.9,1.9")  # what a crash mid-write leaves: no newline
    record.finish("incomplete")
    run = load_run(run_dir)
    assert run.tables["hp"]["request"].tolist() == [0, 1]
    assert any("cut last line" in note for note in run.notes)
    assert client_summary(run).loc[0, "count"] == 2


def test_git_revision_only_for_a_checkout_at_the_source_root(tmp_path: Path) -> None:
    assert git_revision(tmp_path) is None
    root = Path(__file__).resolve().parent.parent
    if (root / ".git").exists():
        revision = git_revision(root)
        assert revision is not None and len(revision) == 40


# -- rows recorded at close, so a reader can tell a table cut after the run ------------------


def test_a_table_knows_its_rows_at_close(tmp_path: Path) -> None:
    path = tmp_path / "clients" / "hp.csv"
    assert rows_at_close(path) is None
    with CsvTable(path, INFERENCE_COLUMNS) as table:
        for i in range(3):
            table.append((i, 1.0, 1.0, 1.1, 100.0, 0.1, 0.1))
        assert table.rows == 0  # still buffered: not in the file yet
    assert table.rows == 3
    assert rows_at_close(path) == 3
    with CsvTable(path, INFERENCE_COLUMNS) as again:  # appending to a table counts it all
        again.append((3, 2.0, 2.0, 2.1, 100.0, 0.1, 0.1))
    assert again.rows == 4 and rows_at_close(path) == 4


def test_table_rows_prefers_the_writers_count(tmp_path: Path) -> None:
    path = tmp_path / "clients" / "be.csv"
    path.parent.mkdir()
    path.write_text("iteration,start_s,end_s,duration_ms,samples\n0,1,2,1000,32\n1,2,")
    assert table_rows(path, 7) == 7  # what the client process said it wrote
    assert table_rows(path) == 1  # no writer here: the whole rows on disk


def test_recorded_rows_let_the_reader_find_a_table_cut_after_the_run(tmp_path: Path) -> None:
    record = _record(tmp_path)
    table_path = tmp_path / "clients" / "hp.csv"
    with CsvTable(table_path, INFERENCE_COLUMNS) as table:
        for i in range(2409):
            table.append((i, 1.0 + i / 1000, 1.0 + i / 1000, 1.001 + i / 1000, 1.0, 0.1, 0.1))
    record.record_table_rows({"clients/hp.csv": table_rows(table_path)})
    record.finish("complete")
    assert json.loads(record.path.read_text())["table_rows"] == {"clients/hp.csv": 2409}
    assert load_run(tmp_path).complete

    lines = table_path.read_text().splitlines(keepends=True)
    table_path.write_text("".join(lines[:452]))
    run = load_run(tmp_path)
    assert not run.complete
    assert (
        "clients/hp.csv has 451 of 2,409 rows recorded at close: the table was cut; "
        "figures from it are wrong"
    ) in run.notes


def test_the_runner_records_every_tables_rows_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real (CPU) run: run.json holds the rows of each table as its writer counted them."""
    from colocation import runner
    from colocation.config import parse_jobs

    reported: dict[str, int | None] = {}

    def spy(path: Path, count: int | None = None) -> int:
        reported[path.name] = count
        return table_rows(path, count)

    monkeypatch.setattr(runner, "table_rows", spy)
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    bert = {"workload": "bert", "batch_size": 1, "options": {"seq_len": 8}}
    data = {
        "run": {
            "policy": "timeslice",
            "requests": 10,
            "warmup_steps": 1,
            "output_dir": str(tmp_path / "runs"),
        },
        "clients": [
            {
                **bert,
                "name": "hp",
                "role": "hp",
                "mode": "infer",
                "arrivals": {"kind": "uniform", "rate_per_s": 8},
            },
            {**bert, "name": "be", "mode": "train"},
        ],
    }
    outcome = runner.run_jobs(parse_jobs(data, tmp_path))
    assert outcome.status == "complete"
    meta = json.loads((outcome.run_dir / "run.json").read_text())
    recorded = meta["table_rows"]
    assert recorded["clients/hp.csv"] == 10
    assert recorded["clients/be.csv"] > 0
    # The client processes counted their own rows and said so when they finished.
    assert reported["hp.csv"] == 10
    assert reported["be.csv"] == recorded["clients/be.csv"]
    for name, rows in recorded.items():
        assert rows == len(read_table(outcome.run_dir / name, _schema(name), notes=[]))
    run = load_run(outcome.run_dir)
    assert run.complete and run.cut_tables == ()


def _schema(name: str) -> tuple[run_format.Column, ...]:
    if name == "clients/hp.csv":
        return run_format.INFERENCE_COLUMNS
    if name == "clients/be.csv":
        return run_format.TRAINING_COLUMNS
    return run_format.GPU_COLUMNS if name == "gpu.csv" else run_format.TRACE_COLUMNS
