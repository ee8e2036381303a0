"""Figures of merit against values worked out by hand.

Percentiles use numpy's linear interpolation: for n sorted values the q-th percentile sits at
rank r = q/100 * (n - 1) (0-based), between sorted[floor(r)] and sorted[floor(r) + 1].
For the latencies 1, 2, ..., 100 ms (n = 100, sorted[i] = i + 1):
  p50: r = 0.50 * 99 = 49.5  -> 50 + 0.5  * (51 - 50)   = 50.5
  p95: r = 0.95 * 99 = 94.05 -> 95 + 0.05 * (96 - 95)   = 95.05
  p99: r = 0.99 * 99 = 98.01 -> 99 + 0.01 * (100 - 99)  = 99.01
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from rundir_factory import (
    ClientSpec,
    be_train_rows,
    hp_rows,
    inference_rows,
    standard_runs,
    training_rows,
    write_run,
)

from reporting import (
    client_summary,
    compare_runs,
    headline,
    load_run,
    load_runs,
    measured_window,
    percentile_summary,
    relative_to_dedicated,
    run_labels,
    scheduler_table,
)
from reporting.benchmark import run_settings
from reporting.metrics import policy_label

HP_P50, HP_P95, HP_P99 = 50.5, 95.05, 99.01


@pytest.fixture
def runs(tmp_path: Path):
    paths = standard_runs(tmp_path)
    return load_runs([paths["dedicated"], paths["orion"], paths["timeslice"]])


def test_percentiles_of_1_to_100() -> None:
    stats = percentile_summary(np.arange(1, 101, dtype=float))
    assert stats["p50_ms"] == pytest.approx(HP_P50)
    assert stats["p95_ms"] == pytest.approx(HP_P95)
    assert stats["p99_ms"] == pytest.approx(HP_P99)
    assert stats["max_ms"] == 100
    assert stats["mean_ms"] == pytest.approx(50.5)  # (1 + 100) / 2


def test_percentiles_of_nothing_are_nan() -> None:
    assert all(math.isnan(v) for v in percentile_summary([]).values())


def test_hp_summary_counts_only_completed_requests_arrived_in_window(runs) -> None:
    row = client_summary(runs[0]).set_index("client").loc["hp"]
    # 103 rows: one before the window (500 ms), one after (700 ms), one never finished.
    assert row["count"] == 100
    assert row["unfinished"] == 1
    assert row["p50_ms"] == pytest.approx(HP_P50)
    assert row["p95_ms"] == pytest.approx(HP_P95)
    assert row["p99_ms"] == pytest.approx(HP_P99)
    assert row["max_ms"] == pytest.approx(100.0)  # not 500 or 700: those are outside
    assert row["window_s"] == pytest.approx(10.0)
    assert row["throughput_per_s"] == pytest.approx(100 / 10.0)  # 10 requests/s
    assert row["samples_per_s"] == pytest.approx(100 * 4 / 10.0)  # batch 4 -> 40 samples/s
    assert row["offered_per_s"] == 10
    assert row["errors"] is None


def test_be_training_uses_iterations_that_end_in_its_own_window(runs) -> None:
    dedicated = client_summary(runs[0]).set_index("client").loc["be"]
    # Dedicated: BE ran alone in [30, 40]; 20 iterations end inside, one before, one after.
    assert dedicated["window_s"] == pytest.approx(10.0)
    assert dedicated["count"] == 20
    assert dedicated["throughput_per_s"] == pytest.approx(20 / 10.0)  # 2.0 it/s
    assert dedicated["samples_per_s"] == pytest.approx(20 * 32 / 10.0)  # 64 samples/s
    assert dedicated["p50_ms"] == pytest.approx(500.0)  # every iteration took 500 ms
    shared = client_summary(runs[1]).set_index("client").loc["be"]
    assert shared["throughput_per_s"] == pytest.approx(19 / 10.0)


def test_window_bounds_are_inclusive_and_per_client(tmp_path: Path) -> None:
    rows = inference_rows([5.0, 6.0, 7.0, 8.0], first_arrival_s=9.5, spacing_s=0.5)
    # arrivals 9.5 (out), 10.0 (on the start), 10.5 (in), 11.0 (on the end)
    be = training_rows(3, first_end_s=10.5, spacing_s=0.5)  # ends 10.5, 11.0, 11.5
    run = load_run(
        write_run(
            tmp_path,
            "r",
            policy="mps",
            clients=[
                ClientSpec("hp", "hp", "infer", rows, window=(10.0, 11.0)),
                ClientSpec("be", "be", "train", be, window=(10.0, 11.0)),
            ],
        )
    )
    summary = client_summary(run).set_index("client")
    assert summary.loc["hp", "count"] == 3
    assert summary.loc["hp", "max_ms"] == 8.0
    assert summary.loc["hp", "p50_ms"] == 7.0  # median of 6, 7, 8
    assert summary.loc["be", "count"] == 2


def test_window_falls_back_to_the_run_window(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path,
        "r",
        policy="mps",
        measure=(10.0, 20.0),
        clients=[ClientSpec("hp", "hp", "infer", hp_rows())],
    )
    meta = json.loads((run_dir / "run.json").read_text())
    del meta["clients"][0]["window_start_s"]
    meta["clients"][0]["window_end_s"] = None
    (run_dir / "run.json").write_text(json.dumps(meta))
    row = client_summary(load_run(run_dir)).iloc[0]
    assert row["count"] == 100
    assert row["window_s"] == 10.0


# A dedicated run as `orion colocate` wrote it on an H100 (resnet50 infer bs4 at 80 requests/s
# as HP, resnet50 train bs32 as BE; 20 s per phase), stopped by Ctrl-C 12.07 s into the BE
# phase. run.json keeps the planned windows; the BE table shows 409 back-to-back iterations of
# 29.5 ms from the window's start, the last ending at its start + 12.0655 s.
HP_ALONE_WINDOW = (10.989843445, 30.989843445)
BE_ALONE_WINDOW = (45.589165003, 65.589165003)
BE_ITERATION_S = 0.0295
BE_DONE = 409


def _interrupted_dedicated(root: Path, status: str = "incomplete") -> Path:
    hp_start = HP_ALONE_WINDOW[0]
    hp = inference_rows([1.5] * 1598, first_arrival_s=hp_start + 0.005, spacing_s=0.0125)
    be_start = BE_ALONE_WINDOW[0]
    be = training_rows(
        BE_DONE,
        first_end_s=be_start + BE_ITERATION_S,
        spacing_s=BE_ITERATION_S,
        duration_ms=BE_ITERATION_S * 1000.0,
    )
    arrivals = {"kind": "poisson", "rate_per_s": 80.0}
    return write_run(
        root,
        "dedicated-20261123-144829",
        policy="dedicated",
        status=status,
        measure=(hp_start, BE_ALONE_WINDOW[1]),
        clients=[
            ClientSpec("hp", "hp", "infer", hp, window=HP_ALONE_WINDOW, arrivals=arrivals),
            ClientSpec("be", "be", "train", be, window=BE_ALONE_WINDOW, batch_size=32),
        ],
    )


def test_an_interrupted_run_is_per_second_measured_not_per_planned_window(
    tmp_path: Path,
) -> None:
    run = load_run(_interrupted_dedicated(tmp_path))
    be = client_summary(run).set_index("client").loc["be"]
    measured_s = BE_DONE * BE_ITERATION_S  # 12.0655 s: from the window's start to the stop
    assert be["count"] == BE_DONE  # every iteration ended inside the planned window
    assert be["window_s"] == pytest.approx(measured_s)
    assert be["throughput_per_s"] == pytest.approx(1 / BE_ITERATION_S)  # 33.9, not 409 / 20
    assert be["samples_per_s"] == pytest.approx(32 / BE_ITERATION_S)
    assert be["p50_ms"] == pytest.approx(BE_ITERATION_S * 1000.0)
    # The HP phase ran to its end before the BE phase started: its window stays whole.
    hp = client_summary(run).set_index("client").loc["hp"]
    assert hp["window_s"] == pytest.approx(20.0)
    assert hp["throughput_per_s"] == pytest.approx(1598 / 20.0)
    # The report still says the run covers only what was written.
    assert any("numbers cover only what was written" in note for note in run.notes)


def test_an_interrupted_alone_run_gives_the_true_be_fraction(tmp_path: Path) -> None:
    dedicated = _interrupted_dedicated(tmp_path)
    # A complete shared run: BE iterations of 59 ms, twice the alone 29.5 ms, so 338 end in its
    # 20 s window (it trains on past the window until stopped) and the fraction is about 1/2.
    shared_be = training_rows(
        400, first_end_s=10.0 + 0.059, spacing_s=0.059, duration_ms=59.0, samples=32
    )
    shared = write_run(
        tmp_path,
        "priority-20261123-145500",
        policy="priority",
        measure=(10.0, 30.0),
        clients=[
            ClientSpec(
                "hp",
                "hp",
                "infer",
                inference_rows([1.6] * 1598, first_arrival_s=10.005, spacing_s=0.0125),
                window=(10.0, 30.0),
                arrivals={"kind": "poisson", "rate_per_s": 80.0},
            ),
            ClientSpec("be", "be", "train", shared_be, window=(10.0, 30.0), batch_size=32),
        ],
    )
    rel = relative_to_dedicated(load_runs([dedicated, shared])).set_index(["run", "client"])
    be = rel.loc[("priority", "be")]
    assert be["throughput_alone_per_s"] == pytest.approx(1 / BE_ITERATION_S)
    assert be["throughput_per_s"] == pytest.approx(338 / 20.0)
    assert be["throughput_fraction"] == pytest.approx(338 / 20.0 * BE_ITERATION_S)  # 0.499


def test_a_complete_run_is_per_planned_window_whatever_its_tables_hold(tmp_path: Path) -> None:
    # The same tables in a run that went through its schedule: the BE client stopped working
    # 12 s into its window (it crashed, say) and the time it lost counts against it.
    for status in ("complete", "failed"):
        run = load_run(_interrupted_dedicated(tmp_path / status, status=status))
        be = client_summary(run).set_index("client").loc["be"]
        assert be["window_s"] == pytest.approx(20.0)
        assert be["throughput_per_s"] == pytest.approx(BE_DONE / 20.0)


def test_clients_stopped_together_share_the_measured_window(tmp_path: Path) -> None:
    # A shared run killed 5.0 s into a 20 s window (the runner died: status `running`). The
    # HP client recorded until 5.0 s (the last request arrived then and was never served); the
    # starved BE client finished its 9th 0.5 s iteration at 4.5 s and was mid-way through the
    # 10th. Both were measured for 5.0 s.
    hp = inference_rows([2.0] * 50 + [math.nan], first_arrival_s=10.0, spacing_s=0.1)
    be = training_rows(9, first_end_s=10.5, spacing_s=0.5)
    run = load_run(
        write_run(
            tmp_path,
            "r",
            policy="orion",
            status="running",
            measure=(10.0, 30.0),
            clients=[
                ClientSpec("hp", "hp", "infer", hp, window=(10.0, 30.0)),
                ClientSpec("be", "be", "train", be, window=(10.0, 30.0), batch_size=32),
            ],
        )
    )
    summary = client_summary(run).set_index("client")
    assert measured_window(run, run.client("be")) == pytest.approx((10.0, 15.0))
    assert summary.loc["hp", "window_s"] == pytest.approx(5.0)
    assert summary.loc["hp", "throughput_per_s"] == pytest.approx(50 / 5.0)
    assert summary.loc["hp", "unfinished"] == 1
    assert summary.loc["be", "window_s"] == pytest.approx(5.0)
    assert summary.loc["be", "throughput_per_s"] == pytest.approx(9 / 5.0)


def test_a_window_stopped_before_anything_was_recorded_has_no_throughput(
    tmp_path: Path,
) -> None:
    # Stopped right after the BE phase's start was sent: its window began, nothing was written.
    hp = inference_rows([1.5] * 1598, first_arrival_s=HP_ALONE_WINDOW[0] + 0.005, spacing_s=0.0125)
    run = load_run(
        write_run(
            tmp_path,
            "r",
            policy="dedicated",
            status="incomplete",
            measure=(HP_ALONE_WINDOW[0], BE_ALONE_WINDOW[1]),
            clients=[
                ClientSpec("hp", "hp", "infer", hp, window=HP_ALONE_WINDOW),
                ClientSpec("be", "be", "train", [], window=BE_ALONE_WINDOW, batch_size=32),
            ],
        )
    )
    summary = client_summary(run).set_index("client")
    assert summary.loc["hp", "window_s"] == pytest.approx(20.0)  # the BE phase's start shows it
    assert summary.loc["be", "window_s"] == 0.0
    assert summary.loc["be", "count"] == 0
    assert math.isnan(summary.loc["be", "throughput_per_s"])  # not measured, rather than 0


def test_labels_are_policies_when_unique_else_dir_names(tmp_path: Path, runs) -> None:
    assert run_labels(runs) == ["dedicated", "orion", "timeslice"]
    again = load_run(
        write_run(
            tmp_path, "orion-repeat", policy="orion", clients=[ClientSpec("hp", "hp", "infer", [])]
        )
    )
    assert run_labels([*runs, again]) == ["dedicated", "run-orion", "timeslice", "orion-repeat"]


def test_runs_of_one_policy_with_different_queue_bounds_are_labelled_by_the_bound(
    tmp_path: Path, runs
) -> None:
    swept = []
    for limit in (100, 2500.5):
        run_dir = write_run(
            tmp_path,
            f"orion-q{limit}",
            policy="orion",
            clients=[ClientSpec("hp", "hp", "infer", [])],
        )
        meta = json.loads((run_dir / "run.json").read_text())
        meta["config"]["run"]["thresholds"] = {"queue_limit_us": limit, "unknown_kernel_us": None}
        (run_dir / "run.json").write_text(json.dumps(meta))
        swept.append(load_run(run_dir))
    # The default-bound orion run keeps the plain policy name; the sweep's runs name their bound.
    assert run_labels([*runs, *swept]) == [
        "dedicated",
        "orion",
        "timeslice",
        "orion@100us",
        "orion@2500.5us",
    ]


def test_a_gating_policy_run_time_sliced_is_labelled_apart_from_its_mps_run(
    tmp_path: Path, runs
) -> None:
    # run.sharing "timeslice" on orion is a knob of the sweep; "mps" is orion's default (no
    # suffix), and the timeslice policy is time-sliced by name.
    made = []
    for name, policy, sharing in (
        ("orion-ts", "orion", "timeslice"),
        ("orion-mps", "orion", "mps"),
        ("ts", "timeslice", "timeslice"),
    ):
        run_dir = write_run(
            tmp_path, name, policy=policy, clients=[ClientSpec("hp", "hp", "infer", [])]
        )
        meta = json.loads((run_dir / "run.json").read_text())
        meta["config"]["run"]["sharing"] = sharing
        (run_dir / "run.json").write_text(json.dumps(meta))
        made.append(load_run(run_dir))
    assert [policy_label(run) for run in made] == ["orion@timeslice", "orion", "timeslice"]
    assert [run_settings(run) for run in made] == [{"sharing": "timeslice"}, {}, {}]


def test_a_run_that_admitted_graphs_whole_is_labelled_apart_from_one_gating_them_inside(
    tmp_path: Path, runs
) -> None:
    # run.be_graph_gate is a knob of a policy that holds BE graphs (reef, orion, quota), named
    # when it differs from the default, "segments" under every sharing mode (runs made before
    # 2026-12-02 gated inside under MPS, and are named so now); a run without run.sharing
    # shared through MPS; a policy that gates nothing ignores it.
    made = []
    for name, policy, be_gate, setting, sharing in (
        ("orion-whole", "orion", "gpu", "whole", None),
        ("reef-inside", "reef", "gpu", "inside", "mps"),
        ("reef-segments", "reef", "gpu", "segments", "mps"),
        ("quota-whole", "quota", None, "whole", None),
        ("mps-whole", "mps", None, "whole", None),
        ("orion-ts-inside", "orion", "gpu", "inside", "timeslice"),
        ("orion-ts-whole", "orion", "gpu", "whole", "timeslice"),
        ("orion-ts-segments", "orion", "gpu", "segments", "timeslice"),
    ):
        run_dir = write_run(
            tmp_path, name, policy=policy, clients=[ClientSpec("hp", "hp", "infer", [])]
        )
        meta = json.loads((run_dir / "run.json").read_text())
        meta["config"]["run"]["be_graph_gate"] = setting
        if be_gate is not None:
            meta["config"]["run"]["be_gate"] = be_gate
        if sharing is not None:
            meta["config"]["run"]["sharing"] = sharing
        (run_dir / "run.json").write_text(json.dumps(meta))
        made.append(load_run(run_dir))
    assert [policy_label(run) for run in made] == [
        "orion@gpu-gate@whole-graphs",
        "reef@gpu-gate@inside-graphs",
        "reef@gpu-gate",
        "quota@whole-graphs",
        "mps",
        "orion@gpu-gate@inside-graphs@timeslice",
        "orion@gpu-gate@whole-graphs@timeslice",
        "orion@gpu-gate@timeslice",
    ]
    assert [run_settings(run) for run in made] == [
        {"be_gate": "gpu", "be_graph_gate": "whole"},
        {"be_gate": "gpu", "be_graph_gate": "inside"},
        {"be_gate": "gpu"},
        {"be_graph_gate": "whole"},
        {},
        {"be_gate": "gpu", "be_graph_gate": "inside", "sharing": "timeslice"},
        {"be_gate": "gpu", "be_graph_gate": "whole", "sharing": "timeslice"},
        {"be_gate": "gpu", "sharing": "timeslice"},
    ]


def test_compare_runs_puts_one_client_side_by_side(runs) -> None:
    table = compare_runs(runs)
    assert list(zip(table["client"], table["run"], strict=True)) == [
        ("hp", "dedicated"),
        ("hp", "orion"),
        ("hp", "timeslice"),
        ("be", "dedicated"),
        ("be", "orion"),
        ("be", "timeslice"),
    ]


def test_relative_ratios_by_hand(runs) -> None:
    rel = relative_to_dedicated(runs).set_index(["run", "client"])
    assert set(rel.index.get_level_values("run")) == {"orion", "timeslice"}
    assert rel["matched"].all()
    # orion: HP latencies are 1.02 x dedicated, so p99 = 1.02 * 99.01 = 100.9902 ms.
    assert rel.loc[("orion", "hp"), "p99_ms"] == pytest.approx(1.02 * 99.01)
    assert rel.loc[("orion", "hp"), "hp_p99_slowdown"] == pytest.approx(100.9902 / 99.01)
    # HP throughput is unchanged: 100 requests in 10 s both times.
    assert rel.loc[("orion", "hp"), "throughput_fraction"] == pytest.approx(1.0)
    # BE: 19 iterations / 10 s = 1.9 it/s shared vs 20 / 10 = 2.0 alone -> 0.95.
    assert rel.loc[("orion", "be"), "throughput_fraction"] == pytest.approx(1.9 / 2.0)
    assert math.isnan(rel.loc[("orion", "be"), "hp_p99_slowdown"])
    # timeslice: HP latencies doubled -> slowdown 2; BE 10 iterations -> 1.0 / 2.0 = 0.5.
    assert rel.loc[("timeslice", "hp"), "hp_p99_slowdown"] == pytest.approx(2.0)
    assert rel.loc[("timeslice", "be"), "throughput_fraction"] == pytest.approx(0.5)


def test_headline_target_met_and_missed(runs) -> None:
    head = headline(runs).set_index("run")
    base = head.loc["dedicated"]
    assert bool(base["is_baseline"])
    assert base["target_met"] is None
    assert base["hp_p99_slowdown"] == 1.0 and base["be_throughput_fraction"] == 1.0

    orion = head.loc["orion"]
    assert orion["hp_p99_slowdown"] == pytest.approx(1.02)
    assert orion["be_throughput_fraction"] == pytest.approx(0.95)
    # 1.02x is within 1.05x, but its 95% interval [0.98, 1.06] reaches across the limit
    assert orion["target_met"] == "undecided"
    assert orion["hp_target_met"] is True
    assert orion["hp_slowdown_excess"] == 0.0 and orion["be_fraction_shortfall"] == 0.0

    timeslice = head.loc["timeslice"]
    assert timeslice["target_met"] is False
    assert timeslice["hp_target_met"] is False and timeslice["be_target_met"] is False
    assert timeslice["hp_slowdown_excess"] == pytest.approx(2.0 - 1.05)  # 0.95 over
    assert timeslice["be_fraction_shortfall"] == pytest.approx(0.90 - 0.5)  # 0.40 short


def test_be_fraction_is_the_mean_over_be_clients(tmp_path: Path) -> None:
    """Two BE clients: a trainer at 0.95 of dedicated and a batch-inference job at 0.5.
    Mean = (0.95 + 0.5) / 2 = 0.725 < 0.90, so the run misses although HP is fine."""
    infer_be = dict(workload="bert", batch_size=16)

    def be2(count: int, window: tuple[float, float]) -> list[dict]:
        return inference_rows([20.0] * count, first_arrival_s=window[0] + 0.01, spacing_s=0.1)

    dedicated = write_run(
        tmp_path,
        "d",
        policy="dedicated",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows()),
            ClientSpec("be", "be", "train", be_train_rows(20, (30, 40)), window=(30, 40)),
            ClientSpec("be2", "be", "infer", be2(50, (50, 60)), window=(50, 60), **infer_be),
        ],
    )
    shared = write_run(
        tmp_path,
        "p",
        policy="priority",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows(1.01)),
            ClientSpec("be", "be", "train", be_train_rows(19, (10, 20))),
            ClientSpec("be2", "be", "infer", be2(25, (10, 20)), **infer_be),
        ],
    )
    head = headline(load_runs([dedicated, shared])).set_index("run")
    row = head.loc["priority"]
    assert row["be_clients"] == 2
    # be2 alone: 50 requests / 10 s = 5/s; shared 25 / 10 = 2.5/s -> 0.5.
    assert row["be_throughput_fraction"] == pytest.approx((19 / 20 + 25 / 50) / 2)
    assert row["hp_target_met"] is True
    assert row["be_target_met"] is False
    assert row["target_met"] is False
    assert row["be_fraction_shortfall"] == pytest.approx(0.90 - 0.725)


@pytest.mark.parametrize(
    ("hp_scale", "be_iterations", "met"),
    [
        # exactly on both limits: slowdown 1.05, fraction 18/20 = 0.90, but the slowdown's 95%
        # interval (100 requests) reaches both sides of 1.05: the intervals cannot tell
        (1.05, 18, "undecided"),
        (1.06, 20, "undecided"),  # HP 6 % slower, an interval across 1.05 too
        (1.00, 17, False),  # BE at 0.85
        (0.90, 20, True),  # faster than alone still meets the target
    ],
)
def test_target_boundaries(tmp_path: Path, hp_scale: float, be_iterations: int, met: bool) -> None:
    dedicated = write_run(
        tmp_path,
        "d",
        policy="dedicated",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows()),
            ClientSpec("be", "be", "train", be_train_rows(20, (10, 20))),
        ],
    )
    shared = write_run(
        tmp_path,
        "s",
        policy="reef",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows(hp_scale)),
            ClientSpec("be", "be", "train", be_train_rows(be_iterations, (10, 20))),
        ],
    )
    row = headline(load_runs([dedicated, shared])).set_index("run").loc["reef"]
    assert row["hp_p99_slowdown"] == pytest.approx(hp_scale)
    assert row["target_met"] == met and type(row["target_met"]) is type(met)


def test_unmatched_client_gives_unknown_verdict(tmp_path: Path) -> None:
    dedicated = write_run(
        tmp_path,
        "d",
        policy="dedicated",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows()),
            ClientSpec("be", "be", "train", be_train_rows(20, (10, 20)), batch_size=32),
        ],
    )
    shared = write_run(
        tmp_path,
        "s",
        policy="mps",
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows()),
            ClientSpec("be", "be", "train", be_train_rows(20, (10, 20)), batch_size=64),
        ],
    )
    runs = load_runs([dedicated, shared])
    rel = relative_to_dedicated(runs).set_index("client")
    assert not rel.loc["be", "matched"]
    assert math.isnan(rel.loc["be", "throughput_fraction"])
    row = headline(runs).iloc[1]
    assert row["hp_target_met"] is True
    assert row["be_target_met"] is None
    assert row["target_met"] is None


def test_without_dedicated_ratios_are_nan_and_target_unknown(runs) -> None:
    shared = runs[1:]
    assert relative_to_dedicated(shared).empty
    head = headline(shared)
    assert head["hp_p99_slowdown"].isna().all()
    assert head["target_met"].tolist() == [None, None]
    assert head.loc[0, "hp_p99_ms"] == pytest.approx(1.02 * 99.01)
    assert head.loc[0, "be_throughput_per_s"] == pytest.approx(1.9)


def test_scheduler_table(runs) -> None:
    table = scheduler_table(runs)
    assert table["run"].tolist() == ["orion", "orion"]
    be = table.set_index("client").loc["be"]
    assert be["blocked_launches"] == 5000
    assert be["blocked_ms"] == 812.5
