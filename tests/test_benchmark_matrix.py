"""The benchmark matrix's planning: which cells a command asks for and what each one runs.

The matrix runs only on a GPU; what can go wrong without one is the plan (a sweep that silently
runs the default bound, cells that overwrite each other in matrix.json), so that is tested here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("orion_matrix", ROOT / "benchmarks" / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["orion_matrix"] = module
    spec.loader.exec_module(module)
    return module


def parse(matrix, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str):
    monkeypatch.setattr(sys, "argv", ["matrix.py", "--out", str(tmp_path), *argv])
    return matrix.parse_args()


def test_queue_limits_sweep_only_the_gated_policies(matrix, monkeypatch, tmp_path) -> None:
    args = parse(
        matrix,
        monkeypatch,
        tmp_path,
        "--policies",
        "priority,orion,reef",
        "--queue-limits",
        "default,100,2500",
    )
    cells = matrix.planned_cells(args.policies, args.queue_limits)
    assert [matrix.cell_key(cell) for _, cell in cells] == [
        "dedicated",
        "priority",
        "orion",
        "orion@100us",
        "orion@2500us",
        "reef",
        "reef@100us",
        "reef@2500us",
    ]


def test_be_gates_sweep_only_the_gated_policies(matrix, monkeypatch, tmp_path) -> None:
    args = parse(matrix, monkeypatch, tmp_path, "--policies", "mps,orion", "--be-gates", "cpu,gpu")
    cells = matrix.cells_of(args)
    assert [matrix.cell_key(cell) for _, cell in cells] == [
        "dedicated",
        "mps",
        "orion@cpu-gate",
        "orion@gpu-gate",
    ]
    group = matrix.Group("resnet50", "low", "resnet50-train")
    jobs = matrix.cell_jobs(group, cells[2][1], 15.0, tmp_path)
    assert jobs["run"]["be_gate"] == "cpu"
    assert "be_gate" not in matrix.cell_jobs(group, cells[1][1], 15.0, tmp_path)["run"]
    # Not given: the library's default gate, named, so the cell reads as the report labels it.
    default = parse(matrix, monkeypatch, tmp_path, "--policies", "orion")
    assert default.be_gates == ["gpu"]


def test_be_graph_gates_sweep_only_the_gated_policies_named_as_reports_label_them(
    matrix, monkeypatch, tmp_path
) -> None:
    from reporting.metrics import policy_label
    from reporting.rundata import RunData

    scenario = ("--scenario", "be-graph", "--policies", "mps,reef,orion", "--repeats", "2")
    args = parse(
        matrix, monkeypatch, tmp_path, *scenario, "--be-graph-gates", "inside,whole,segments"
    )
    planned = matrix.planned_runs(args)
    # Every setting in every round, interleaved with the other cells; those that differ from
    # the default (segments) are named.
    assert [cell.key for cell in planned] == [
        "dedicated", "mps", "reef@gpu-gate@inside-graphs", "reef@gpu-gate@whole-graphs",
        "reef@gpu-gate", "orion@gpu-gate@inside-graphs",
        "orion@gpu-gate@whole-graphs", "orion@gpu-gate",
        "dedicated#2", "mps#2", "reef@gpu-gate@inside-graphs#2", "reef@gpu-gate@whole-graphs#2",
        "reef@gpu-gate#2", "orion@gpu-gate@inside-graphs#2",
        "orion@gpu-gate@whole-graphs#2", "orion@gpu-gate#2",
    ]  # fmt: skip
    jobs = {cell.key: cell.jobs for cell in planned}
    assert jobs["orion@gpu-gate"]["run"]["be_graph_gate"] == "segments"
    assert jobs["orion@gpu-gate@whole-graphs"]["run"]["be_graph_gate"] == "whole"
    assert jobs["orion@gpu-gate@inside-graphs"]["run"]["be_graph_gate"] == "inside"
    assert jobs["reef@gpu-gate@whole-graphs"]["run"]["be_graph_gate"] == "whole"
    assert jobs["reef@gpu-gate"]["run"]["be_graph_gate"] == "segments"
    assert jobs["reef@gpu-gate@inside-graphs"]["run"]["be_graph_gate"] == "inside"
    assert "be_graph_gate" not in jobs["mps"]["run"]
    for key in (
        "orion@gpu-gate",
        "orion@gpu-gate@whole-graphs",
        "orion@gpu-gate@inside-graphs",
        "reef@gpu-gate",
        "reef@gpu-gate@whole-graphs",
        "reef@gpu-gate@inside-graphs",
    ):
        run = RunData.__new__(RunData)
        object.__setattr__(run, "config", jobs[key])
        object.__setattr__(run, "policy", key.partition("@")[0])
        assert policy_label(run) == key  # the report names each cell as the matrix does
    # Not given: not set, so the jobs files keep their sharing mode's default and the plain name.
    default = parse(matrix, monkeypatch, tmp_path, *scenario)
    assert default.be_graph_gates == [None]
    assert all("be_graph_gate" not in c.jobs["run"] for c in matrix.planned_runs(default))
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--be-graph-gates", "outside")


def test_profile_sources_give_online_cells_whose_clients_carry_no_profile(
    matrix, monkeypatch, tmp_path
) -> None:
    from reporting.metrics import policy_label
    from reporting.rundata import RunData

    args = parse(
        matrix, monkeypatch, tmp_path, "--policies", "mps,orion", "--profile-sources",
        "offline,online", "--repeats", "2",
    )  # fmt: skip
    scenario = ("--scenario", "headline-graph", "--policies", "orion")
    sources = ("--profile-sources", "offline,online")
    planned = matrix.planned_runs(parse(matrix, monkeypatch, tmp_path, *scenario, *sources))
    cells = matrix.cells_of(args)
    assert [matrix.cell_key(cell, round_) for round_, cell in cells] == [
        "dedicated", "mps", "orion@gpu-gate", "orion@gpu-gate@online",
        "dedicated#2", "mps#2", "orion@gpu-gate#2", "orion@gpu-gate@online#2",
    ]  # fmt: skip
    online = next(cell.jobs for cell in planned if cell.key.endswith("@online"))
    offline = next(cell.jobs for cell in planned if cell.key == "orion@gpu-gate")
    assert {c["profile_source"] for c in online["clients"]} == {"online"}
    assert all("profile_source" not in c for c in offline["clients"])
    run = RunData.__new__(RunData)
    object.__setattr__(run, "config", online)
    object.__setattr__(run, "policy", "orion")
    assert policy_label(run) == "orion@gpu-gate@online"  # the report names it as the matrix does
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--profile-sources", "learned")


def test_a_cell_runs_with_its_queue_bound(matrix, tmp_path) -> None:
    group = matrix.Group("resnet50", "low", "resnet50-train")
    jobs = matrix.cell_jobs(group, matrix.Cell("orion", queue_limit_us=500.0), 15.0, tmp_path)
    assert jobs["run"]["thresholds"] == {"queue_limit_us": 500.0}
    assert jobs["run"]["policy"] == "orion"
    default = matrix.cell_jobs(group, matrix.Cell("orion"), 15.0, tmp_path)
    assert default["run"]["thresholds"] == {"queue_limit_us": None}


def test_without_queue_limits_every_policy_runs_once_with_the_derived_bound(
    matrix, monkeypatch, tmp_path
) -> None:
    args = parse(matrix, monkeypatch, tmp_path, "--policies", "dedicated,orion")
    assert matrix.planned_cells(args.policies, args.queue_limits) == [
        (1, matrix.Cell("dedicated")),
        (1, matrix.Cell("orion", sharing="mps")),
    ]


@pytest.mark.parametrize("bad", ["0", "-5", "fast", ","])
def test_bad_queue_limits_are_refused(matrix, monkeypatch, tmp_path, capsys, bad) -> None:
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--queue-limits", bad)
    assert "queue limit" in capsys.readouterr().err


def test_repeats_run_every_cell_round_after_round(matrix, monkeypatch, tmp_path) -> None:
    args = parse(
        matrix,
        monkeypatch,
        tmp_path,
        "--policies",
        "dedicated,orion",
        "--queue-limits",
        "default,500",
        "--repeats",
        "2",
    )
    cells = matrix.planned_cells(args.policies, args.queue_limits, args.repeats)
    # Round 1 keeps the plain names, so a one-round matrix.json stays valid when rounds are added.
    assert [matrix.cell_key(cell, r) for r, cell in cells] == [
        "dedicated",
        "orion",
        "orion@500us",
        "dedicated#2",
        "orion#2",
        "orion@500us#2",
    ]
    assert [matrix.split_cell_key(matrix.cell_key(cell, r)) for r, cell in cells][-1] == (
        "orion@500us",
        2,
    )


def test_hp_alone_cells_run_the_hp_client_without_be_last_in_every_round(
    matrix, monkeypatch, tmp_path
) -> None:
    args = parse(
        matrix, monkeypatch, tmp_path, "--policies", "orion", "--hp-alone", "mps", "--repeats", "2"
    )
    cells = matrix.cells_of(args)
    assert [matrix.cell_key(cell, r) for r, cell in cells] == [
        "dedicated",
        "orion@gpu-gate",
        "mps@hp-alone",
        "dedicated#2",
        "orion@gpu-gate#2",
        "mps@hp-alone#2",
    ]
    group = matrix.Group("resnet50-graph", "low", "resnet50-train")
    floor = matrix.cell_jobs(group, cells[2][1], 62.5, tmp_path)
    assert floor["run"]["policy"] == "mps"
    assert [client["role"] for client in floor["clients"]] == ["hp"]
    orion = matrix.cell_jobs(group, cells[1][1], 62.5, tmp_path)
    assert [client["role"] for client in orion["clients"]] == ["hp", "be"]


def test_hp_alone_under_dedicated_is_refused(matrix, monkeypatch, tmp_path, capsys) -> None:
    # dedicated already runs the HP alone: it is every round's reference, not a cell.
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--hp-alone", "dedicated")
    assert "--hp-alone" in capsys.readouterr().err


def test_zero_repeats_are_refused(matrix, monkeypatch, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--repeats", "0")
    assert "--repeats" in capsys.readouterr().err


def test_report_of_two_rounds_gives_medians_against_each_rounds_own_dedicated_run(
    matrix, monkeypatch, tmp_path
) -> None:
    from rundir_factory import ClientSpec, be_train_rows, hp_rows, write_run

    arrivals = {"kind": "poisson", "rate_per_s": 10}
    runs = tmp_path / "runs" / "g"

    def pair(name: str, policy: str, hp_scale: float, be_iterations: int, dedicated: bool):
        be_window = (30.0, 40.0) if dedicated else (10.0, 20.0)
        clients = [
            ClientSpec("hp", "hp", "infer", hp_rows(hp_scale), arrivals=arrivals),
            ClientSpec(
                "be", "be", "train", be_train_rows(be_iterations, be_window), window=be_window
            ),
        ]
        measure = (10.0, 40.0) if dedicated else (10.0, 20.0)
        write_run(runs, name, policy=policy, clients=clients, measure=measure)
        return f"runs/g/{name}"

    # hp_rows(scale) has latencies scale x 1..100 ms: p99 (linear) = 99.01 x scale. Round 1:
    # dedicated at scale 1, orion at 1.02 -> slowdown 1.02; BE 20 alone, 19 shared -> 0.95.
    # Round 2: dedicated at scale 2, orion at 2.2 -> slowdown 1.10; BE 20 vs 17 -> 0.85.
    # Medians of two values are their means: 1.06 and 0.90. Round 1's 1.02 is within 1.05 but
    # its interval (100 requests) reaches past it, so no round counts as met: round 1 undecided.
    index = {
        "cells": {
            "g": {
                "dedicated": pair("d1", "dedicated", 1.0, 20, True),
                "orion": pair("o1", "orion", 1.02, 19, False),
                "dedicated#2": pair("d2", "dedicated", 2.0, 20, True),
                "orion#2": pair("o2", "orion", 2.2, 17, False),
            }
        },
        "invocations": [{"command": "python benchmarks/matrix.py --repeats 2"}],
    }
    args = parse(matrix, monkeypatch, tmp_path, "--report-only")
    matrix.write_reports(args, index)
    text = (tmp_path / "README.md").read_text()
    assert "| orion | 2 | 1.060 (1.020-1.100) | 0.900 (0.850-0.950) | 0 |" in text
    assert (tmp_path / "reports" / "g" / "report.md").is_file()
    assert (tmp_path / "reports" / "g" / "round-2" / "report.md").is_file()


def test_a_traced_matrix_traces_every_cell_alike(matrix, monkeypatch, tmp_path) -> None:
    # The tail attribution needs each shared run's launches; the dedicated run is traced too so
    # the recording costs the same on both sides of a ratio.
    args = parse(matrix, monkeypatch, tmp_path, "--policies", "orion", "--trace")
    group = matrix.Group("resnet50", "low", "resnet50-train")
    for cell in (matrix.Cell("dedicated"), matrix.Cell("orion")):
        jobs = matrix.cell_jobs(group, cell, 15.0, tmp_path, args.trace)
        assert jobs["run"]["trace"] is True
    assert "trace" not in matrix.cell_jobs(group, matrix.Cell("orion"), 15.0, tmp_path)["run"]


def test_sharings_sweep_the_policies_that_run_either_way(matrix, monkeypatch, tmp_path) -> None:
    args = parse(
        matrix,
        monkeypatch,
        tmp_path,
        "--policies",
        "mps,orion,quota",
        "--sharings",
        "mps,timeslice",
    )
    cells = matrix.cells_of(args)
    # MPS is their default and not named, as the report labels a run.
    assert [matrix.cell_key(cell) for _, cell in cells] == [
        "dedicated",
        "mps",
        "orion@gpu-gate",
        "orion@gpu-gate@timeslice",
        "quota",
        "quota@timeslice",
    ]
    group = matrix.Group("resnet50", "low", "resnet50-train")
    runs = [matrix.cell_jobs(group, cell, 15.0, tmp_path)["run"] for _, cell in cells]
    assert [run.get("sharing") for run in runs] == [
        None,
        None,
        "mps",
        "timeslice",
        "mps",
        "timeslice",
    ]
    # Without --sharings every policy runs in its own default mode, named in the cell and set in
    # its jobs so the cell means the same when a default changes.
    default = parse(matrix, monkeypatch, tmp_path, "--policies", "orion,reef")
    cells = matrix.cells_of(default)
    assert [matrix.cell_key(cell) for _, cell in cells] == [
        "dedicated",
        "orion@gpu-gate",
        "reef@gpu-gate",
    ]
    assert [
        matrix.cell_jobs(group, cell, 15.0, tmp_path)["run"].get("sharing") for _, cell in cells
    ] == [
        None,
        "mps",
        "mps",
    ]
