"""Loading run directories: what counts as a run, and the damage a crash can leave behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rundir_factory import (
    ClientSpec,
    be_train_rows,
    hp_rows,
    inference_rows,
    kernel_trace,
    standard_runs,
    write_run,
)

from orion_common.errors import OrionError
from reporting import client_summary, load_run, load_runs
from reporting.summary import run_warnings, write_report


def test_load_run_reads_metadata_tables_and_extras(tmp_path: Path) -> None:
    paths = standard_runs(tmp_path)
    run = load_run(paths["orion"])

    assert run.complete
    assert run.policy == "orion"
    assert run.name == "run-orion"
    assert run.environment.gpu_name == "NVIDIA H200"
    assert run.environment.cudnn_version == "9.19.0"
    assert [c.name for c in run.clients] == ["hp", "be"]
    assert run.client("hp").is_inference and not run.client("be").is_inference
    assert run.client("hp").offered_rate_per_s == 10
    assert len(run.table("hp")) == 103  # 1 before + 100 in + 1 unfinished + 1 after the window
    assert run.table("hp")["end_s"].isna().sum() == 1
    assert list(run.gpu.columns) == [
        "time_s",
        "sm_util_pct",
        "mem_util_pct",
        "mem_used_mib",
        "sm_clock_mhz",
        "mem_clock_mhz",
    ]
    assert run.scheduler["be"]["blocked_launches"] == 5000
    assert run.trace is not None and len(run.trace) == 6000
    assert run.notes == ()


def test_optional_files_absent(tmp_path: Path) -> None:
    run = load_run(standard_runs(tmp_path)["timeslice"])
    assert run.scheduler is None
    assert run.trace is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda d: None, "{d} is not an orion run directory (no run.json)", id="empty-dir"
        ),
        pytest.param(
            lambda d: (d / "run.json").write_text(json.dumps({"format": "orion-profile"})),
            "{d}/run.json is not an orion run record (format 'orion-profile', not 'orion-run')",
            id="other-format",
        ),
        # a run.json that is there is never called missing
        pytest.param(
            lambda d: (d / "run.json").write_text("[1, 2]"),
            "{d}/run.json holds a JSON list, not a run record (an object)",
            id="json-list",
        ),
        pytest.param(
            lambda d: (d / "run.json").write_text("[]"),
            "{d}/run.json holds a JSON list, not a run record (an object)",
            id="empty-json-list",
        ),
    ],
)
def test_a_directory_that_is_not_a_run_is_one_line_error(tmp_path: Path, make, message) -> None:
    target = tmp_path / "notarun"
    target.mkdir()
    make(target)
    with pytest.raises(OrionError) as info:
        load_run(target)
    assert str(info.value) == message.format(d=target)
    assert "\n" not in str(info.value)


def test_a_missing_path_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(OrionError, match="is not an orion run directory"):
        load_run(tmp_path / "nowhere")


def test_load_runs_needs_at_least_one() -> None:
    with pytest.raises(OrionError, match="no run directories"):
        load_runs([])


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    run_dir = standard_runs(tmp_path)["orion"]
    meta = json.loads((run_dir / "run.json").read_text())
    meta["version"] = 2
    (run_dir / "run.json").write_text(json.dumps(meta))
    with pytest.raises(OrionError, match="version 2"):
        load_run(run_dir)


@pytest.mark.parametrize("status", ["running", "incomplete", "failed"])
def test_unfinished_status_is_flagged(tmp_path: Path, status: str) -> None:
    run_dir = write_run(
        tmp_path, "r", policy="mps", status=status, clients=[ClientSpec("hp", "hp", "infer", [])]
    )
    run = load_run(run_dir)
    assert not run.complete
    assert any(status in note for note in run.notes)
    assert client_summary(run)["complete"].tolist() == [False]


def test_cut_last_line_is_dropped_and_noted(tmp_path: Path) -> None:
    run_dir = standard_runs(tmp_path)["orion"]
    table = run_dir / "clients" / "hp.csv"
    # A crash cut the next row mid-number: it would parse (latency 1.2 ms), but it is not whole.
    table.write_text(table.read_text() + "103,20.9,20.9,20.9012,1.2")
    training = run_dir / "clients" / "be.csv"
    training.write_text(training.read_text() + "22,19.")  # cut after two fields

    run = load_run(run_dir)

    assert len(run.table("hp")) == 103
    assert len(run.table("be")) == 21
    assert sum("dropped a cut last line" in note for note in run.notes) == 2
    row = client_summary(run).set_index("client").loc["hp"]
    assert row["count"] == 100


def test_cut_header_gives_empty_table(tmp_path: Path) -> None:
    run_dir = standard_runs(tmp_path)["timeslice"]
    (run_dir / "clients" / "be.csv").write_text("iteration,start_s,en")
    run = load_run(run_dir)
    assert len(run.table("be")) == 0
    summary = client_summary(run).set_index("client")
    assert summary.loc["be", "count"] == 0
    assert summary.loc["be", "throughput_per_s"] == 0.0


def test_missing_client_table_is_a_note_not_an_error(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path,
        "r",
        policy="mps",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows()),
            ClientSpec(
                "be", "be", "train", be_train_rows(5, (10, 20)), exit_code=-9, error="killed"
            ),
        ],
    )
    (run_dir / "clients" / "be.csv").unlink()
    run = load_run(run_dir)
    assert len(run.table("be")) == 0
    assert any("wrote no table" in note for note in run.notes)
    assert any("'be' failed: killed; exit code -9" in note for note in run.notes)
    assert client_summary(run).set_index("client").loc["be", "errors"] == "killed; exit code -9"


def test_missing_column_names_the_file(tmp_path: Path) -> None:
    run_dir = standard_runs(tmp_path)["timeslice"]
    (run_dir / "clients" / "hp.csv").write_text("request,arrival_s,end_s\n0,1.0,1.1\n")
    with pytest.raises(OrionError, match=r"hp\.csv lacks column\(s\) start_s, latency_ms"):
        load_run(run_dir)


def test_comment_lines_are_ignored(tmp_path: Path) -> None:
    run_dir = standard_runs(tmp_path)["timeslice"]
    gpu = run_dir / "gpu.csv"
    gpu.write_text("# sampled by nvidia-ml-py every 0.5 s\n" + gpu.read_text())
    run = load_run(run_dir)
    assert run.gpu is not None and len(run.gpu) > 0
    assert run.gpu["time_s"].iloc[0] == 0.0


# -- damage after the run: tables that lost rows, a run.json that is not JSON -----------------


def _issue_run(tmp_path: Path, *, table_rows: bool = True) -> Path:
    """A complete run whose HP client wrote 2,409 requests (the issue's numbers)."""
    latencies = [1.0 + (k % 50) for k in range(2409)]
    return write_run(
        tmp_path,
        "r",
        policy="orion",
        clients=[
            ClientSpec("hp", "hp", "infer", inference_rows(latencies, spacing_s=0.004)),
            ClientSpec("be", "be", "train", be_train_rows(19, (10.0, 20.0))),
        ],
        trace=kernel_trace(["hp", "be"], per_client=50, start_s=10.0),
        table_rows=table_rows,
    )


def _keep_rows(path: Path, rows: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: rows + 1]))


def test_a_cut_client_table_is_flagged_and_the_run_is_not_complete(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    assert load_run(run_dir).complete
    _keep_rows(run_dir / "clients" / "hp.csv", 451)

    run = load_run(run_dir)

    assert len(run.table("hp")) == 451
    assert run.status == "complete"  # as recorded, but not to be judged as complete:
    assert not run.complete
    assert run.cut_tables == ("clients/hp.csv",)
    message = (
        "clients/hp.csv has 451 of 2,409 rows recorded at close: the table was cut; "
        "figures from it are wrong"
    )
    assert message in run.notes
    assert client_summary(run)["complete"].tolist() == [False, False]
    assert f"orion: {message}" in run_warnings([run])


def test_a_cut_table_makes_the_report_show_an_incomplete_run(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    _keep_rows(run_dir / "clients" / "hp.csv", 451)
    report = write_report([load_run(run_dir)], tmp_path / "report").read_text()
    assert "**Incomplete run `" in report
    assert "clients/hp.csv has 451 of 2,409 rows recorded at close" in report


def test_an_emptied_client_table_with_recorded_rows_is_flagged(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    (run_dir / "clients" / "hp.csv").write_text("")
    run = load_run(run_dir)
    assert len(run.table("hp")) == 0
    assert not run.complete
    assert (
        "clients/hp.csv has 0 of 2,409 rows recorded at close: the table was cut; "
        "figures from it are wrong"
    ) in run.notes


def test_a_lost_client_table_with_recorded_rows_is_flagged(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    (run_dir / "clients" / "be.csv").unlink()
    run = load_run(run_dir)
    assert not run.complete
    assert run.cut_tables == ("clients/be.csv",)
    assert any(note.startswith("clients/be.csv is missing, though 21 rows") for note in run.notes)


def test_an_empty_client_table_of_a_complete_run_is_a_warning(tmp_path: Path) -> None:
    for table_rows in (True, False):  # recorded as empty at close, and an older run
        run_dir = write_run(
            tmp_path / str(table_rows),
            "r",
            policy="orion",
            clients=[
                ClientSpec("hp", "hp", "infer", []),
                ClientSpec("be", "be", "train", be_train_rows(19, (10.0, 20.0))),
            ],
            table_rows=table_rows,
        )
        run = load_run(run_dir)
        assert run.complete  # nothing was lost after the run; the client wrote nothing
        assert (
            "client 'hp': clients/hp.csv has no rows although the run is complete: there are "
            "no figures for this client"
        ) in run.notes


def test_cut_gpu_and_trace_tables_are_flagged(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    _keep_rows(run_dir / "gpu.csv", 10)
    _keep_rows(run_dir / "trace.csv", 60)
    run = load_run(run_dir)
    assert not run.complete
    assert run.cut_tables == ("gpu.csv", "trace.csv")
    assert any(note.startswith("gpu.csv has 10 of 60 rows recorded") for note in run.notes)
    assert any(note.startswith("trace.csv has 60 of 100 rows recorded") for note in run.notes)


def test_a_table_with_more_rows_than_recorded_is_flagged(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    table = run_dir / "clients" / "be.csv"
    table.write_text(table.read_text() + "99,30.0,30.5,500.0,32\n")
    run = load_run(run_dir)
    assert not run.complete
    assert any("more than the 21 recorded at close" in note for note in run.notes)


def test_runs_from_before_row_counts_are_read_unchecked(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path, table_rows=False)
    _keep_rows(run_dir / "clients" / "hp.csv", 451)
    run = load_run(run_dir)
    assert run.complete
    assert run.cut_tables == ()
    assert run.notes == ()
    assert len(run.table("hp")) == 451


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"format": "orion-run", "version": 1, "status": "comp', id="cut"),
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", id="binary"),
        pytest.param(b"{not json", id="garbage"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_cut_or_corrupted_run_json_is_its_own_one_line_error(
    tmp_path: Path, content: bytes
) -> None:
    run_dir = _issue_run(tmp_path)
    (run_dir / "run.json").write_bytes(content)
    with pytest.raises(OrionError) as info:
        load_run(run_dir)
    message = str(info.value)
    assert message.startswith(f"run.json in {run_dir} is not valid JSON (cut or corrupted): ")
    assert "no run.json" not in message
    assert "\n" not in message


def test_a_missing_run_json_is_still_no_run_json(tmp_path: Path) -> None:
    run_dir = _issue_run(tmp_path)
    (run_dir / "run.json").unlink()
    with pytest.raises(OrionError, match=r"is not an orion run directory \(no run\.json\)$"):
        load_run(run_dir)
