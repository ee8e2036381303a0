"""The benchmark protocol of benchmarks/matrix.py, without a GPU: scenarios, knob cells, the
interleaved order of rounds, the measurement window, and the summary written at the end."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rundir_factory import QUEUE_200, SHARE_50, write_cell

from reporting.benchmark import load_summary

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location(
        "orion_matrix_protocol", ROOT / "benchmarks" / "matrix.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["orion_matrix_protocol"] = module
    spec.loader.exec_module(module)
    return module


def parse(matrix, tmp_path: Path, *argv: str):
    return matrix.parse_args(["--out", str(tmp_path), *argv])


def names(cells) -> list[str]:
    return [f"{cell.name}#{round_}" for round_, cell in cells]


def test_rounds_interleave_with_dedicated_first_and_knob_cells(matrix, tmp_path) -> None:
    args = parse(
        matrix,
        tmp_path,
        "--scenario",
        "headline-graph",
        "--policies",
        "priority,mps-share,orion,dedicated",
        "--queue-limits",
        "200",
        "--mps-share-be",
        "30,70",
        "--repeats",
        "2",
    )
    cells = matrix.planned_cells(args.policies, args.queue_limits, args.repeats, args.mps_share_be)
    round_ = [
        "dedicated",
        "priority",
        "mps-share@be30",
        "mps-share@be70",
        "orion@200us",  # orion's default mode, MPS, not named
    ]
    assert names(cells) == [f"{n}#1" for n in round_] + [f"{n}#2" for n in round_]


def test_dedicated_is_planned_even_when_not_asked_for(matrix) -> None:
    cells = matrix.planned_cells(["orion"], [None], 2)
    assert names(cells) == [
        "dedicated#1",
        "orion#1",
        "dedicated#2",
        "orion#2",
    ]


def test_default_shares_and_window(matrix, tmp_path) -> None:
    args = parse(matrix, tmp_path, "--scenario", "headline-graph")
    assert args.mps_share_be == [30, 50, 70]
    assert (args.duration, args.min_requests) == (60.0, 5000)
    assert "mps-share" in args.policies
    # 5000 requests at 80/s take 62.5 s, more than the 60 s asked for: both hold.
    assert matrix.window_s(args.duration, args.min_requests, 80.0) == 62.5
    assert matrix.window_s(60.0, 1000, 80.0) == 60.0
    cells = matrix.planned_cells(args.policies, args.queue_limits, 1, args.mps_share_be)
    assert {"mps-share@be30", "mps-share@be50", "mps-share@be70"} <= {c.name for _, c in cells}


def test_share_cell_gives_the_be_client_its_sm_percent_only(matrix, tmp_path) -> None:
    group = matrix.SCENARIOS["headline-graph"].group
    jobs = matrix.cell_jobs(group, matrix.Cell("mps-share", be_sm_percent=50), 62.5, tmp_path)
    hp, be = jobs["clients"]
    assert be["sm_percent"] == 50 and "sm_percent" not in hp
    assert jobs["run"]["policy"] == "mps-share"
    assert jobs["run"]["duration_s"] == 62.5 and "requests" not in jobs["run"]


def test_share_cell_is_a_valid_jobs_file(matrix, tmp_path) -> None:
    from colocation.config import parse_jobs

    group = matrix.SCENARIOS["host-bound-hp"].group
    jobs = matrix.cell_jobs(group, matrix.Cell("mps-share", be_sm_percent=30), 62.5, tmp_path)
    config = parse_jobs(jobs, ROOT, source="test")
    be = next(c for c in config.clients if c.name == "be")
    assert be.sm_percent == 30


def test_scenarios_pick_the_jobs_and_the_folder(matrix, tmp_path, monkeypatch) -> None:
    graph = matrix.SCENARIOS["headline-graph"]
    hp = matrix.cell_jobs(graph.group, matrix.Cell("dedicated"), 60.0, tmp_path)["clients"][0]
    assert hp["cuda_graph"] is True
    assert (hp["workload"], hp["mode"], hp["batch_size"]) == ("resnet50", "infer", 4)
    assert hp["arrivals"] == {"kind": "poisson", "rate_per_s": 80.0}
    be = matrix.cell_jobs(graph.group, matrix.Cell("dedicated"), 60.0, tmp_path)["clients"][1]
    assert (be["workload"], be["mode"], be["batch_size"]) == ("resnet50", "train", 32)
    eager = matrix.SCENARIOS["host-bound-hp"]
    assert "cuda_graph" not in matrix.HP_JOBS[eager.group.hp]
    assert "bound by the host CPU" in eager.caveat
    assert matrix.HP_JOBS["resnet50-graph"]["cuda_graph"] is True

    monkeypatch.setattr(matrix, "gpu_facts", lambda index: SimpleNamespace(name="NVIDIA H100"))
    args = matrix.parse_args(["--scenario", "host-bound-hp", "--report-only"])
    assert args.out == matrix.ROOT / "benchmarks" / "results" / "nvidia-h100" / "host-bound-hp"
    assert [g.name for g in matrix.groups_of(args)] == ["resnet50-low__resnet50-train"]


def test_scenario_and_group_options_do_not_mix(matrix, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        parse(matrix, tmp_path, "--scenario", "headline-graph", "--hp", "resnet50")
    assert "leave out --hp" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["0", "101", "half", ","])
def test_bad_shares_are_refused(matrix, tmp_path, capsys, bad) -> None:
    with pytest.raises(SystemExit):
        parse(matrix, tmp_path, "--mps-share-be", bad)
    assert "SM share" in capsys.readouterr().err


def test_group_mode_still_works(matrix, tmp_path) -> None:
    args = parse(matrix, tmp_path, "--hp", "resnet50-graph,mobilenet_v2", "--rates", "high")
    assert [g.name for g in matrix.groups_of(args)] == [
        "resnet50-graph-high__resnet50-train",
        "resnet50-graph-high__mobilenet_v2-train",
        "resnet50-graph-high__bert-train",
        "resnet50-graph-high__resnet50-infer",
        "mobilenet_v2-high__resnet50-train",
        "mobilenet_v2-high__mobilenet_v2-train",
        "mobilenet_v2-high__bert-train",
        "mobilenet_v2-high__resnet50-infer",
    ]
    assert matrix._group_named("resnet50-graph-high__bert-train") == matrix.Group(
        "resnet50-graph", "high", "bert-train"
    )


def fake_runner(matrix, out: Path):
    """A cell runner that records (policy@settings, duration_s), writes a complete run.json and
    advances a clock by as long as the run was estimated to take; returns (ran, run_cell, clock)."""
    from placement import cells

    ran: list[tuple[str, float]] = []
    clock = [0.0]

    def run_cell(jobs, source):
        run = jobs["run"]
        be = jobs["clients"][1]
        cell = matrix.Cell(run["policy"], run["thresholds"]["queue_limit_us"], be.get("sm_percent"))
        ran.append((cell.name, run["duration_s"]))
        phases = 2 if cell.policy == "dedicated" else 1
        clock[0] += phases * (run["duration_s"] + cells.SETUP_ESTIMATE_S)
        run_dir = out / "runs" / f"run{len(ran)}"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"status": "complete"}))
        return run_dir

    return ran, run_cell, lambda: clock[0]


def test_runs_go_in_planned_order_and_resume_where_the_budget_stopped(
    matrix, tmp_path, monkeypatch
) -> None:
    ran, run_cell, clock = fake_runner(matrix, tmp_path)
    argv = ["--scenario", "headline-graph", "--policies", "dedicated,priority,mps-share"]
    argv += ["--mps-share-be", "50", "--repeats", "2"]
    # A dedicated cell is estimated at 2 x (62.5 + 10) s, any other at 72.5 s: a budget of
    # 300 s fits dedicated, priority and mps-share@be50 (290 s) and stops before dedicated#2.
    args = parse(matrix, tmp_path, *argv, "--time-budget", "300")
    index = matrix.CellIndex.load(tmp_path, matrix.MATRIX_INDEX)
    assert matrix.run_matrix(args, index, run_cell, clock) is False
    assert ran == [("dedicated", 62.5), ("priority", 62.5), ("mps-share@be50", 62.5)]
    args = parse(matrix, tmp_path, *argv)
    assert matrix.run_matrix(args, index, run_cell, clock) is True
    assert [name for name, _ in ran[3:]] == ["dedicated", "priority", "mps-share@be50"]
    cells = index.cells("resnet50-graph-low__resnet50-train")
    assert list(cells) == [
        "dedicated",
        "priority",
        "mps-share@be50",
        "dedicated#2",
        "priority#2",
        "mps-share@be50#2",
    ]


def test_report_only_writes_the_scenario_summary_and_readme(matrix, tmp_path) -> None:
    group = "resnet50-graph-low__resnet50-train"
    runs = tmp_path / "runs" / group
    entries = {}
    for round_, suffix in ((1, ""), (2, "#2")):
        scale = float(round_)
        write_cell(runs, f"d{round_}", "dedicated", hp_scale=scale)
        write_cell(
            runs,
            f"s{round_}",
            "mps-share",
            hp_scale=1.1 * scale,
            be_iteration_ms=625,
            config=SHARE_50,
        )
        write_cell(runs, f"o{round_}", "orion", hp_scale=scale, config=QUEUE_200)
        entries.update(
            {
                f"dedicated{suffix}": f"runs/{group}/d{round_}",
                f"mps-share@be50{suffix}": f"runs/{group}/s{round_}",
                f"orion@200us{suffix}": f"runs/{group}/o{round_}",
            }
        )
    command = "python benchmarks/matrix.py --scenario headline-graph --repeats 2"
    index = {
        "format": "orion-matrix",
        "version": 1,
        "cells": {group: entries},
        "invocations": [
            {
                "command": command,
                "date_utc": "2026-11-24T10:00:00+00:00",
                "software": {"torch_version": "2.11.0+cu130", "gpu_name": "NVIDIA H200"},
            }
        ],
    }
    args = parse(matrix, tmp_path, "--scenario", "headline-graph", "--report-only")
    matrix.write_reports(args, index)

    summary = load_summary(tmp_path / "summary.json")
    assert summary["command"] == [command]
    assert summary["date"] == "2026-11-24T10:00:00+00:00"
    assert summary["device"] == {"gpu_name": "NVIDIA H200", "slug": "nvidia-h200"}
    assert summary["scenario"]["name"] == "headline-graph"
    assert summary["scenario"]["hp"]["cuda_graph"] is True
    rows = {row["cell"]: row for row in summary["rows"]}
    assert rows["mps-share@be50"]["settings"] == {"sm_percent_be": 50}
    assert rows["mps-share@be50"]["hp_p99_ratio"] == pytest.approx(1.1)
    assert rows["mps-share@be50"]["be_ratio"] == pytest.approx(0.8)
    assert rows["orion@200us"]["hp_p99_ratio"] == pytest.approx(1.0)
    assert (tmp_path / "tradeoff.png").stat().st_size > 5_000
    assert "| mps-share@be50 |" in (tmp_path / "summary.md").read_text()

    readme = (tmp_path / "README.md").read_text()
    figure, table = readme.index("![Trade-off](tradeoff.png)"), readme.index("| cell |")
    command_at, device, software = (
        readme.index("## Command"),
        readme.index("## Device"),
        readme.index("## Software"),
    )
    assert figure < table < command_at < device < software
    assert command in readme and "torch_version: 2.11.0+cu130" in readme
    assert (tmp_path / "reports" / group / "round-2" / "report.md").is_file()


def test_the_be_graph_scenario_replays_a_be_graph_in_a_closed_loop(matrix, tmp_path) -> None:
    args = parse(matrix, tmp_path, "--scenario", "be-graph", "--policies", "orion")
    (group,) = matrix.groups_of(args)
    assert group.name == "resnet50-graph-low__resnet50-graph-infer"
    _, cell = matrix.planned_cells(args.policies)[1]
    be = matrix.cell_jobs(group, cell, 15.0, tmp_path)["clients"][1]
    assert (be["role"], be["mode"], be["cuda_graph"], be["arrivals"]) == (
        "be",
        "infer",
        True,
        {"kind": "closed"},
    )
