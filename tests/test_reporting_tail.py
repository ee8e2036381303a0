"""Where the HP tail comes from: slow HP requests attributed to BE work around them.

The run is built by hand so every number can be checked by hand. HP latencies are 1..100 ms
(requests 1..100, request k arrives at 10.05 + (k - 1) × 0.1 s, starts at arrival):
- p95 (linear) = 1 + 0.95 × 99 = 95.05 ms, so requests 96..100 are slow;
- p50 = 50.5 ms, the requests below it have latencies 1..50, median 25.5 ms = service alone.
Request 100 is changed to start 20 ms after it arrived (20 ms of HP queueing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rundir_factory import ClientSpec, be_train_rows, hp_rows, write_run
from typer.testing import CliRunner

from orion_cli.app import app
from reporting import (
    load_run,
    load_runs,
    plot_tail_attribution,
    report_json,
    service_alone_ms,
    slow_requests,
    split_latency,
    tail_summary,
    write_report,
)
from reporting.tail import (
    CONTEXT_SWITCH_MS,
    DRIVER_TIMESLICE_MS,
    NO_TRACE_NOTE,
    PARTS,
    context_switch_wait_ms,
)


def _arrival(request: int) -> float:
    return 10.05 + (request - 1) * 0.1


def _be(seq: int, name: str, launch_s: float, duration_ms: float, reason: str) -> dict:
    return {
        "client": "be",
        "seq": seq,
        "kernel_name": name,
        "kernel_class": "compute",
        "sm_needed": 66,
        "duration_ns": duration_ms * 1e6,
        "enqueue_s": launch_s - 1e-4,
        "launch_s": launch_s,
        "reason": reason,
    }


def _hp(seq: int, launch_s: float) -> dict:
    row = _be(seq, "hp_conv", launch_s, 40.0, "high_priority")
    return {**row, "client": "hp"}


# arrivals: 96 -> 19.55, 97 -> 19.65, 98 -> 19.75, 99 -> 19.85, 100 -> 19.95 (start 19.97);
# ends: 96 -> 19.646, 97 -> 19.747, 98 -> 19.848, 99 -> 19.949, 100 -> 20.05.
TRACE = [
    # Around fast request 10 (arrival 10.95): not slow, so never counted.
    _be(1, "gemm_be", 10.94, 50.0, "hp_idle"),
    # Request 96: relu ended before the arrival; two gemms still run at it (20 + 5 ms left).
    _be(2, "relu_be", 19.50, 10.0, "hp_idle"),
    _be(3, "gemm_be", 19.54, 30.0, "hp_idle"),
    _be(4, "gemm_be", 19.545, 10.0, "fits_beside"),
    _hp(1, 19.551),  # the HP client's own kernel: not BE
    # ... and two admitted while it was served (4 + 2 ms).
    _be(5, "conv_be", 19.60, 4.0, "fits_beside"),
    _be(6, "conv_be", 19.62, 2.0, "hp_idle"),
    # Request 97: one admitted beside (1 ms, queue_full); nothing running at 19.65.
    _be(7, "norm_be", 19.70, 1.0, "queue_full"),
    # Request 98: one long kernel admitted beside (fits_beside, 100 ms), which is still running
    # when request 99 arrives (19.80 + 0.1 - 19.85: 50 ms left).
    _be(8, "attn_be", 19.80, 100.0, "fits_beside"),
    # Request 100: one 200 ms kernel admitted while queued (19.96 is in [19.95, 20.05)).
    _be(9, "big_be", 19.96, 200.0, "hp_idle"),
]


def _hp_table() -> list[dict]:
    rows = hp_rows(1.0)
    for row in rows:
        if row["request"] == 100:
            row["start_s"] = row["arrival_s"] + 0.020
    return rows


def _clients() -> list[ClientSpec]:
    return [
        ClientSpec("hp", "hp", "infer", _hp_table()),
        ClientSpec("be", "be", "train", be_train_rows(19, (10.0, 20.0)), batch_size=32),
    ]


@pytest.fixture
def traced(tmp_path: Path) -> Path:
    return write_run(
        tmp_path / "runs", "run-orion", policy="orion", clients=_clients(), trace=TRACE
    )


@pytest.fixture
def untraced(tmp_path: Path) -> Path:
    return write_run(tmp_path / "runs", "run-timeslice", policy="timeslice", clients=_clients())


def test_service_alone_is_the_median_below_p50() -> None:
    assert service_alone_ms([float(k) for k in range(1, 101)]) == 25.5
    assert service_alone_ms([7.0, 7.0, 7.0]) == 7.0  # none below p50: those at it
    assert math.isnan(service_alone_ms([]))


def test_split_adds_up_and_gives_the_delay_in_order() -> None:
    # delay 100 - 25.5 = 74.5: queue 20, no outstanding, admitted 200 capped at 54.5
    split = split_latency(100.0, 25.5, 20.0, 0.0, 200.0)
    assert (split.queue_ms, split.be_outstanding_ms) == (20.0, 0.0)
    assert split.be_admitted_ms == pytest.approx(54.5)
    assert split.rest_ms == pytest.approx(25.5)
    # a request faster than the service alone has no delay to attribute
    split = split_latency(10.0, 25.5, 5.0, 3.0, 3.0)
    assert (split.queue_ms, split.be_outstanding_ms, split.be_admitted_ms) == (0, 0, 0)
    assert split.rest_ms == 10.0


def test_slow_requests_know_what_ran_at_arrival_and_beside(traced: Path) -> None:
    slow = slow_requests([load_run(traced)])
    assert slow["request"].tolist() == [96, 97, 98, 99, 100]
    by = {int(r["request"]): r for r in slow.to_dict("records")}

    r96 = by[96]
    assert r96["be_running_at_arrival_count"] == 2
    assert r96["be_outstanding_at_arrival_ms"] == pytest.approx(25.0)  # 20 + 5
    assert r96["top_be_kernel"] == "gemm_be"
    assert r96["be_running_kernels"] == "gemm_be: 2"
    assert r96["be_admitted_count"] == 2
    assert r96["be_admitted_ms"] == pytest.approx(6.0)
    assert r96["reasons"] == "fits_beside: 1, hp_idle: 1"
    assert r96["queue_ms"] == 0.0
    # delay 96 - 25.5 = 70.5 covers 25 outstanding + 6 admitted; rest 96 - 31 = 65
    assert r96["part_be_outstanding_ms"] == pytest.approx(25.0)
    assert r96["part_be_admitted_ms"] == pytest.approx(6.0)
    assert r96["part_rest_ms"] == pytest.approx(65.0)

    r97 = by[97]
    assert (r97["be_running_at_arrival_count"], r97["be_admitted_count"]) == (0, 1)
    assert r97["be_admitted_ms"] == pytest.approx(1.0)
    assert r97["reasons"] == "queue_full: 1"
    assert pd.isna(r97["top_be_kernel"])

    r98 = by[98]
    assert (r98["be_running_at_arrival_count"], r98["be_admitted_count"]) == (0, 1)
    assert r98["be_admitted_ms"] == pytest.approx(100.0)
    assert r98["reasons"] == "fits_beside: 1"
    # delay 98 - 25.5 = 72.5, all of it (not the 100 ms) to the admitted kernel
    assert r98["part_be_admitted_ms"] == pytest.approx(72.5)
    assert r98["part_rest_ms"] == pytest.approx(25.5)

    r99 = by[99]
    assert r99["be_running_at_arrival_count"] == 1
    assert r99["be_outstanding_at_arrival_ms"] == pytest.approx(50.0)
    assert r99["top_be_kernel"] == "attn_be"
    assert r99["be_admitted_count"] == 0
    assert r99["reasons"] == ""
    assert r99["part_rest_ms"] == pytest.approx(49.0)  # 99 - 50

    r100 = by[100]
    assert r100["queue_ms"] == pytest.approx(20.0)
    assert r100["be_admitted_count"] == 1
    assert r100["be_admitted_ms"] == pytest.approx(200.0)
    assert r100["reasons"] == "hp_idle: 1"
    assert r100["part_queue_ms"] == pytest.approx(20.0)
    assert r100["part_be_admitted_ms"] == pytest.approx(54.5)  # capped by the delay left
    assert r100["part_rest_ms"] == pytest.approx(25.5)

    parts = slow[["part_be_outstanding_ms", "part_be_admitted_ms", "part_queue_ms", "part_rest_ms"]]
    assert parts.sum(axis=1).tolist() == pytest.approx(slow["latency_ms"].tolist())


def test_summary_means_and_shares(traced: Path, untraced: Path) -> None:
    runs = load_runs([traced, untraced])
    summary = tail_summary(runs)
    row = summary[summary["run"] == "orion"].iloc[0]
    assert row["traced"]
    assert row["slow_requests"] == 5
    assert row["p95_ms"] == pytest.approx(95.05)
    assert row["service_alone_ms"] == pytest.approx(25.5)
    assert row["mean_latency_ms"] == pytest.approx(98.0)
    assert row["be_outstanding_ms"] == pytest.approx((25 + 50) / 5)
    assert row["be_admitted_ms"] == pytest.approx((6 + 1 + 72.5 + 54.5) / 5)
    assert row["queue_ms"] == pytest.approx(20 / 5)
    assert row["rest_ms"] == pytest.approx(98.0 - 15.0 - 26.8 - 4.0)
    assert row["share_be_outstanding"] == pytest.approx((25 / 96 + 50 / 99) / 5)
    assert row["share_queue"] == pytest.approx((20 / 100) / 5)
    assert row["reasons"] == "fits_beside: 2, hp_idle: 2, queue_full: 1"
    assert row["top_be_kernel"] in {"gemm_be", "attn_be"}
    shares = row[["share_be_outstanding", "share_be_admitted", "share_queue", "share_rest"]]
    assert float(shares.sum()) == pytest.approx(1.0)

    other = summary[summary["run"] == "timeslice"].iloc[0]
    assert not other["traced"]
    assert other["note"] == NO_TRACE_NOTE


def test_a_trace_without_reasons_is_still_attributed(tmp_path: Path) -> None:
    old = [{k: v for k, v in row.items() if k != "reason"} for row in TRACE]
    path = write_run(tmp_path, "run-old", policy="orion", clients=_clients(), trace=old)
    slow = slow_requests([load_run(path)])
    r96 = slow[slow["request"] == 96].iloc[0]
    assert r96["be_admitted_count"] == 2
    assert r96["reasons"] == "not recorded: 2"


def test_report_has_the_section_figure_and_the_untraced_line(
    traced: Path, untraced: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    text = write_report(load_runs([traced, untraced]), out).read_text()
    assert "## Where the HP tail comes from" in text
    assert "](hp_tail_attribution.png)" in text
    assert (out / "hp_tail_attribution.png").stat().st_size > 5_000
    assert "| orion | hp | 5 | 95.050 | 25.500 | 98.000 | 15.000 |" in text
    assert "fits_beside: 2, hp_idle: 2, queue_full: 1" in text
    assert f"- `timeslice` (hp): {NO_TRACE_NOTE}." in text


def test_a_run_without_trace_says_the_attribution_needs_one(untraced: Path, tmp_path: Path) -> None:
    runs = load_runs([untraced])
    assert slow_requests(runs).empty
    text = write_report(runs, tmp_path / "report").read_text()
    assert "## Where the HP tail comes from" in text
    assert '`"trace": true`' in text
    assert "hp_tail_attribution.png" not in text
    data = report_json(runs)
    assert data["hp_tail"][0]["traced"] is False
    assert data["hp_tail"][0]["note"] == NO_TRACE_NOTE
    assert data["hp_tail_requests"] == []


def test_cli_prints_the_tail_table(traced: Path, untraced: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["report", str(traced), str(untraced), "--no-plots"], terminal_width=250
    )
    assert result.exit_code == 0, result.output
    assert "where the HP tail comes from" in result.output
    assert "queue_full: 1" in result.output
    assert '"trace": true' in result.output


def test_the_figure_without_slow_requests_says_so(untraced: Path, tmp_path: Path) -> None:
    summary = tail_summary(load_runs([untraced]))
    path = plot_tail_attribution(summary, tmp_path / "tail.png")
    assert path.is_file() and path.stat().st_size > 1_000


def _time_sliced(path: Path) -> Path:
    """The run as if its jobs file had said run.sharing "timeslice"."""
    meta = json.loads((path / "run.json").read_text())
    meta["config"]["run"]["sharing"] = "timeslice"
    (path / "run.json").write_text(json.dumps(meta))
    return path


def test_in_a_time_sliced_run_be_work_at_arrival_is_a_wait_for_a_context_switch(
    tmp_path: Path, traced: Path
) -> None:
    # The same trace with the contexts time-sliced: the BE work running when request 96 arrived
    # (two gemms, ending 20 and 5 ms later) holds the GPU in its own context until the later
    # ends, but the driver hands the GPU over after one timeslice at most: a wait for the switch
    # of one measured timeslice plus one switch (2.09 + 0.151 ms), not 25 ms of work beside the
    # request. Request 99 (50 ms of attn_be left) waits the same. Under MPS (the fixture's own
    # run) there is no such wait.
    sliced = _time_sliced(
        write_run(
            tmp_path / "sliced", "run-orion-ts", policy="orion", clients=_clients(), trace=TRACE
        )
    )
    slow = slow_requests([load_run(sliced)])
    by = {int(r["request"]): r for r in slow.to_dict("records")}
    wait = DRIVER_TIMESLICE_MS + CONTEXT_SWITCH_MS
    assert by[96]["context_switch_ms"] == pytest.approx(wait)
    assert by[96]["be_outstanding_at_arrival_ms"] == pytest.approx(25.0)  # still reported
    assert by[96]["part_context_switch_ms"] == pytest.approx(wait)
    assert by[96]["part_be_outstanding_ms"] == 0.0
    assert by[96]["part_be_admitted_ms"] == pytest.approx(6.0)
    assert by[99]["part_context_switch_ms"] == pytest.approx(wait)
    assert by[97]["context_switch_ms"] == 0.0  # nothing ran at its arrival
    parts = [f"part_{column}" for column, _ in PARTS]
    assert slow[parts].sum(axis=1).tolist() == pytest.approx(slow["latency_ms"].tolist())

    summary = tail_summary([load_run(sliced)]).iloc[0]
    assert summary["run"] == "orion@timeslice"
    assert summary["context_switch_ms"] == pytest.approx(2 * wait / 5)
    assert summary["share_context_switch"] == pytest.approx((wait / 96 + wait / 99) / 5)
    assert summary["be_outstanding_ms"] == 0.0

    under_mps = slow_requests([load_run(traced)])
    assert (under_mps["part_context_switch_ms"] == 0.0).all()


def test_a_context_switch_wait_is_capped_by_the_timeslice_and_adds_the_switch() -> None:
    ends = np.array([10.030, 10.010, 9.990])  # 30 and 10 ms after an arrival at 10.0
    assert context_switch_wait_ms(ends, 10.0, None, 0.0) == pytest.approx(30.0)
    assert context_switch_wait_ms(ends, 10.0, 2.0, 0.05) == pytest.approx(2.05)
    assert context_switch_wait_ms(np.array([9.5]), 10.0, 2.0, 0.05) == 0.0  # nothing holds it
    assert context_switch_wait_ms(np.array([]), 10.0) == 0.0
