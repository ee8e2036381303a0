"""Where an HP request's time goes without a trace: the parts of each request, and the share of
requests sharing slowed against the run's own dedicated reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from rundir_factory import ClientSpec, inference_rows, write_csv, write_run

from orion_common import run_format
from reporting import load_run, report_json
from reporting.request_parts import request_parts
from reporting.summary import write_report

HEADER = [*run_format.required_names(run_format.INFERENCE_COLUMNS), "enqueue_ms", "enqueue_cpu_ms"]


def hp_run(
    root: Path, name: str, policy: str, after_ms: list[float], queue_ms: float = 0.0
) -> Path:
    """100 in-window requests 0.1 s apart: each starts ``queue_ms`` after it arrives, spends
    0.2 ms in its launch call, then ``after_ms[i]`` until it ends."""
    rows = inference_rows([1.0] * len(after_ms), first_arrival_s=10.05)
    for row, after in zip(rows, after_ms, strict=True):
        row["start_s"] = row["arrival_s"] + queue_ms / 1000.0
        row["enqueue_ms"] = row["enqueue_cpu_ms"] = 0.2
        row["end_s"] = row["start_s"] + (0.2 + after) / 1000.0
        row["latency_ms"] = (row["end_s"] - row["arrival_s"]) * 1000.0
    spec = ClientSpec("hp", "hp", "infer", rows, arrivals={"kind": "poisson", "rate_per_s": 10})
    run_dir = write_run(root, name, policy=policy, clients=[spec])
    write_csv(run_dir / run_format.client_table("hp"), HEADER, rows)
    return run_dir


@pytest.fixture
def runs(tmp_path: Path) -> list:
    alone = [1.0] * 100
    return [
        load_run(hp_run(tmp_path, "dedicated", "dedicated", alone)),
        # MPS: every request 0.1 ms slower on the GPU.
        load_run(hp_run(tmp_path, "mps", "mps", [1.1] * 100)),
        # Time-sliced: every other request finds BE on the GPU and waits 0.25 ms more; all of
        # them queue 0.3 ms behind the previous one.
        load_run(hp_run(tmp_path, "timeslice", "timeslice", [1.0, 1.25] * 50, queue_ms=0.3)),
    ]


def test_each_request_splits_into_queueing_launch_and_after_launch(runs) -> None:
    parts = request_parts(runs).set_index("run")
    assert list(parts.index) == ["dedicated", "mps", "timeslice"]
    assert (parts["requests"] == 100).all()
    assert parts["launch_p50_ms"].tolist() == pytest.approx([0.2, 0.2, 0.2])
    assert parts.loc["timeslice", "queue_p50_ms"] == pytest.approx(0.3)
    assert parts.loc["dedicated", "queue_p99_ms"] == pytest.approx(0.0, abs=1e-6)
    assert parts.loc["mps", "after_launch_p50_ms"] == pytest.approx(1.1)
    assert parts.loc["timeslice", "after_launch_p99_ms"] == pytest.approx(1.25)


def test_the_slowed_share_tells_mps_from_time_slicing(runs) -> None:
    parts = request_parts(runs).set_index("run")
    # MPS slows every request by its cost; time slicing half of them, each by the wait.
    assert parts.loc["mps", "slowed_share"] == pytest.approx(1.0)
    assert parts.loc["mps", "slowed_extra_ms"] == pytest.approx(0.1)
    assert parts.loc["timeslice", "slowed_share"] == pytest.approx(0.5)
    assert parts.loc["timeslice", "slowed_extra_ms"] == pytest.approx(0.25)
    # The reference is not compared with itself.
    assert parts.loc[["dedicated"], ["slowed_share", "slowed_extra_ms"]].isna().all(axis=None)


def test_the_report_shows_the_parts_and_runs_without_launch_times_have_none(
    runs, tmp_path: Path
) -> None:
    report = write_report(runs, tmp_path / "report").read_text(encoding="utf-8")
    assert "### Where the HP requests' time goes" in report
    assert "slowed share" in report
    data = report_json(runs)
    assert [row["run"] for row in data["hp_request_parts"]] == ["dedicated", "mps", "timeslice"]
    # Request tables from before launch times were recorded: no parts, and no section.
    old = write_run(
        tmp_path / "old",
        "dedicated",
        policy="dedicated",
        clients=[
            ClientSpec("hp", "hp", "infer", inference_rows([1.0] * 10, first_arrival_s=10.05))
        ],
    )
    assert request_parts([load_run(old)]).empty
    old_report = write_report([load_run(old)], tmp_path / "old-report").read_text(encoding="utf-8")
    assert "Where the HP requests' time goes" not in old_report
