"""`orion pairs` without a GPU: the planned order, the pair matrix from synthetic runs with
ratios known by hand, resuming, validation errors and the CLI's refusal without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rundir_factory import ClientSpec, be_train_rows, hp_rows, training_rows, write_run
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from placement.pair_matrix import load_pair_matrix, parse_pair_matrix
from placement.pairs import (
    Cell,
    build_pair_matrix,
    parse_pairs_jobs,
    planned_cells,
    run_pairs,
    write_pair_matrix,
)
from reporting import load_run

HP = {
    "kind": "hp",
    "workload": "resnet50",
    "mode": "infer",
    "batch_size": 4,
    "cuda_graph": True,
    "rate_per_s": 80,
}
BE = {"kind": "be", "workload": "resnet50", "mode": "train", "batch_size": 32}


def spec_data(rounds: int = 2) -> dict:
    return {
        "policy": "orion",
        "settings": {"queue_limit_us": 200},
        "duration_s": 60,
        "rounds": rounds,
        "jobs": {"search": HP, "a": BE, "b": dict(BE, batch_size=16)},
    }


def test_planned_order_is_alone_first_then_pairs_each_round() -> None:
    cells = planned_cells(parse_pairs_jobs(spec_data()))
    per_round = [
        "alone:search",
        "alone:a",
        "alone:b",
        "search+a",
        "search+b",
        "a+b",
    ]
    assert [c.key for c in cells] == [f"{n}#1" for n in per_round] + [f"{n}#2" for n in per_round]


def _hp(scale: float) -> ClientSpec:
    return ClientSpec("search", "hp", "infer", hp_rows(scale), arrivals={"kind": "poisson"})


def _be(name: str, iteration_ms: float) -> ClientSpec:
    rows = training_rows(
        int(10_000 / iteration_ms) - 1,
        first_end_s=10.0 + iteration_ms / 1000.0,
        spacing_s=iteration_ms / 1000.0,
        duration_ms=iteration_ms,
    )
    return ClientSpec(name, "be", "train", rows, batch_size=32)


def synthetic_runs(root: Path, rounds: int = 2) -> dict[Cell, object]:
    """Alone: HP latencies 1..100 ms (x round), BE iterations 500 ms. search+a: HP x1.5, a at
    625 ms (ratio 0.8); search+b: HP x1.2, b unchanged; a+b: both at 1000 ms (ratio 0.5)."""
    runs = {}
    for r in range(1, rounds + 1):
        specs = {
            ("search",): ("dedicated", [_hp(r)]),
            ("a",): ("dedicated", [_be("a", 500)]),
            ("b",): ("dedicated", [_be("b", 500)]),
            ("search", "a"): ("orion", [_hp(1.5 * r), _be("a", 625)]),
            ("search", "b"): ("orion", [_hp(1.2 * r), _be("b", 500)]),
            ("a", "b"): ("orion", [_be("a", 1000), _be("b", 1000)]),
        }
        for members, (policy, clients) in specs.items():
            cell = Cell(r, members)
            path = write_run(root, cell.key.replace("#", "-r"), policy=policy, clients=clients)
            runs[cell] = load_run(path)
    return runs


def test_pair_matrix_from_synthetic_runs(tmp_path: Path) -> None:
    spec = parse_pairs_jobs(spec_data())
    document = build_pair_matrix(spec, synthetic_runs(tmp_path), "nvidia-h200", resamples=200)
    matrix = parse_pair_matrix(document)
    assert matrix.device == "nvidia-h200" and matrix.policy == "orion"
    # orion's default sharing mode is written into the matrix, so a plan runs the jobs as measured.
    assert matrix.settings == {"queue_limit_us": 200, "sharing": "mps"}
    # and how long each cell was measured, so a plan from it runs that long by default
    assert matrix.duration_s == spec.duration_s == 60.0
    # pooled alone p99 of 1..100 and 2..200 ms; BE 32 samples per 0.5 s
    assert matrix.jobs["search"].alone_p99_ms == pytest.approx(
        float(np.percentile([*range(1, 101), *range(2, 201, 2)], 99))
    )
    assert matrix.jobs["a"].alone_throughput_per_s == pytest.approx(64.0)
    pair = matrix.pair("search", ("a",))
    assert pair.hp_p99_ratio == pytest.approx(1.5)
    lo, hi = pair.hp_p99_ratio_ci
    assert lo <= 1.5 <= hi
    assert pair.be_ratios["a"] == pytest.approx(0.8)
    assert matrix.pair("search", ("b",)).hp_p99_ratio == pytest.approx(1.2)
    assert matrix.pair("search", ("b",)).be_ratios["b"] == pytest.approx(1.0)
    both = matrix.pair(None, ("b", "a"))
    assert both.hp_p99_ratio is None
    assert both.be_ratios == pytest.approx({"a": 0.5, "b": 0.5})
    path = write_pair_matrix(document, tmp_path / "out")
    assert path.name == "nvidia-h200.json"
    assert load_pair_matrix(path).pair("search", ("a",)) == pair


def test_pairs_without_an_alone_run_are_left_out(tmp_path: Path) -> None:
    spec = parse_pairs_jobs(spec_data(rounds=1))
    runs = {c: r for c, r in synthetic_runs(tmp_path, rounds=1).items() if c.members != ("b",)}
    matrix = parse_pair_matrix(build_pair_matrix(spec, runs, "gpu", resamples=50))
    assert set(matrix.jobs) == {"search", "a"}
    assert [(p.hp, p.be) for p in matrix.pairs] == [("search", ("a",))]
    with pytest.raises(OrionError, match="no job has a complete alone run"):
        build_pair_matrix(spec, {}, "gpu")


def _fake_runner(calls: list[str], stop_after: int | None = None):
    def run_cell(jobs: dict, source: str) -> Path:
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        key = source.rsplit(" ", 1)[1]
        calls.append(key)
        clients = []
        for client in jobs["clients"]:
            if client["role"] == "hp":
                clients.append(_hp(1.0))
            else:
                clients.append(
                    ClientSpec(client["name"], "be", "train", be_train_rows(5, (10.0, 20.0)))
                )
        root = Path(jobs["run"]["output_dir"])
        root.mkdir(parents=True, exist_ok=True)
        name = key.replace("#", "-r").replace(":", "-").replace("+", "_")
        return write_run(root, name, policy=jobs["run"]["policy"], clients=clients)

    return run_cell


def test_resume_skips_complete_cells(tmp_path: Path) -> None:
    spec = parse_pairs_jobs(spec_data())
    calls: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_pairs(spec, tmp_path, run_cell=_fake_runner(calls, stop_after=4), progress=print)
    assert len(calls) == 4
    again: list[str] = []
    assert run_pairs(spec, tmp_path, run_cell=_fake_runner(again), progress=print)
    assert again == [c.key for c in planned_cells(spec)][4:]
    none: list[str] = []
    assert run_pairs(spec, tmp_path, run_cell=_fake_runner(none), progress=print)
    assert none == []


def test_cell_configs_and_time_budget(tmp_path: Path) -> None:
    spec = parse_pairs_jobs(spec_data())
    seen: list[dict] = []

    def run_cell(jobs: dict, source: str) -> Path:
        seen.append(jobs)
        return _fake_runner([])(jobs, source)

    lines: list[str] = []
    assert not run_pairs(spec, tmp_path, time_budget_s=50, run_cell=run_cell, progress=lines.append)
    assert seen == [] and lines == []
    now = iter([0.0, 0.0, 71.0])
    done = run_pairs(
        spec,
        tmp_path,
        time_budget_s=140,
        run_cell=run_cell,
        progress=lines.append,
        clock=lambda: next(now),
    )
    assert not done and len(seen) == 1
    alone = seen[0]
    assert alone["run"]["policy"] == "dedicated" and alone["run"]["thresholds"] == {}
    assert [c["name"] for c in alone["clients"]] == ["search"]
    assert alone["clients"][0]["arrivals"] == {"kind": "poisson", "rate_per_s": 80.0}
    assert "cell 1/12: alone:search#1" in lines[0]


def test_an_index_for_other_jobs_is_refused(tmp_path: Path) -> None:
    run_pairs(parse_pairs_jobs(spec_data()), tmp_path, time_budget_s=1, progress=print)
    other = dict(spec_data(), policy="mps-priority")
    with pytest.raises(OrionError, match="was made for other jobs"):
        run_pairs(parse_pairs_jobs(other), tmp_path, time_budget_s=1, progress=print)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": "timeslice"}, "policy: must be one of orion, mps-priority, mps-share"),
        ({"settings": {"queue_limit": 1}}, "settings.queue_limit: unknown field"),
        ({"rounds": 0}, "rounds: must be at least 1, not 0"),
        ({"jobs": {"a": BE}}, "jobs: must hold at least one BE job"),
        ({"jobs": {"s": dict(HP, rate_per_s=-1), "a": BE}}, "jobs.s.rate_per_s: must be positive"),
        ({"jobs": {"s": HP, "a": dict(BE, mode="infer")}}, "jobs.a.mode: must be train"),
        ({"jobs": {"s": HP, "a": dict(BE, rate_per_s=5)}}, "jobs.a.rate_per_s: applies only"),
        ({"jobs": {"s p": HP, "a": BE}}, "jobs.s p: a job name is 1-32"),
        (
            {"settings": {"be_sm_percent": 50}},
            "settings.be_sm_percent: applies only to policy mps-share",
        ),
        ({"settings": {"sharing": "mig"}}, "settings.sharing: must be one of mps, timeslice"),
        (
            {"policy": "mps-priority", "settings": {"sharing": "timeslice"}},
            "settings.sharing: policy 'mps-priority' runs under 'mps' only",
        ),
    ],
)
def test_validation_errors_are_one_line(change: dict, message: str) -> None:
    with pytest.raises(OrionError) as error:
        parse_pairs_jobs({**spec_data(), **change}, source="jobs.json")
    assert "\n" not in error.value.message
    assert error.value.message.startswith(f"jobs.json: {message}")


def test_cli_refuses_without_a_gpu(tmp_path: Path, monkeypatch) -> None:
    from orion_common import sysinfo

    monkeypatch.setattr(sysinfo, "gpu_facts", lambda index=0: None)
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(spec_data()))
    result = CliRunner().invoke(
        app, ["pairs", str(jobs), "--out", str(tmp_path / "out")], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: no NVIDIA GPU 0 is visible (NVML and torch see none); orion pairs measures "
        "jobs on a GPU and needs one"
    ]
    assert not (tmp_path / "out").exists()


def test_be_only_pairs_run_under_mps_when_the_policy_needs_an_hp_job(tmp_path: Path) -> None:
    from placement.jobs_files import shared_policy

    assert shared_policy("orion", has_hp=False) == "mps"
    assert shared_policy("orion", has_hp=True) == "orion"
    assert shared_policy("mps", has_hp=False) == "mps"
    assert shared_policy("quota", has_hp=False) == "quota"  # every client a peer


def test_pair_cells_run_in_the_matrix_sharing_mode(tmp_path: Path) -> None:
    from placement.pairs import Cell, cell_jobs

    default = parse_pairs_jobs(spec_data())
    sliced = parse_pairs_jobs({**spec_data(), "settings": {"sharing": "timeslice"}})
    pair = Cell(1, ("search", "a"))
    assert cell_jobs(default, pair, tmp_path)["run"]["sharing"] == "mps"
    assert cell_jobs(sliced, pair, tmp_path)["run"]["sharing"] == "timeslice"
    be_only = cell_jobs(default, Cell(1, ("a", "b")), tmp_path)["run"]  # plain MPS, one way only
    assert be_only["policy"] == "mps" and "sharing" not in be_only
    alone = cell_jobs(default, Cell(1, ("search",)), tmp_path)["run"]
    assert alone["policy"] == "dedicated" and "sharing" not in alone
