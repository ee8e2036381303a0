"""`orion run-plan PLAN.json`: each GPU of a plan as an ordinary run, all started together."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import colocation
from orion_cli.app import app
from orion_common.errors import OrionError
from orion_common.plan_run_format import PLAN_RUN_FILE
from placement import plan_run
from placement.fleet import load_fleet
from placement.plan import load_matrices, solve
from placement.plan_file import Plan, load_plan, write_plan
from placement.plan_run import plan_jobs, run_plan

DATA = Path(__file__).parent / "data" / "placement"

# Stands in for `orion colocate JOBS.json` on a machine without GPUs: makes the run directory a
# real run would, and fails for the GPU named in FAIL_GPU.
FAKE_COLOCATE = """
import json, os, sys
jobs = json.load(open(sys.argv[2]))
run = jobs["run"]
run_dir = os.path.join(run["output_dir"], run["policy"] + "-20261123-120000")
os.makedirs(run_dir)
json.dump({"status": "complete", "gpu": run["gpu"]}, open(os.path.join(run_dir, "run.json"), "w"))
sys.exit(1 if str(run["gpu"]) == os.environ.get("FAIL_GPU") else 0)
"""


@pytest.fixture
def plan(tmp_path: Path) -> tuple[Plan, Path]:
    fleet = load_fleet(DATA / "fleet.json")
    solved = solve(fleet, load_matrices(fleet.gpu_kinds(), DATA / "pairs"), "max-total-be")
    return solved, write_plan(solved, tmp_path / "plan.json")


def test_each_gpu_becomes_a_jobs_file_pinned_to_it(plan, tmp_path: Path) -> None:
    solved, _ = plan
    configs = plan_jobs(solved, 30.0, tmp_path)
    assert sorted(configs) == [gpu.index for gpu in solved.gpus]
    for gpu in solved.gpus:
        config = configs[gpu.index]
        assert config["run"]["gpu"] == gpu.index
        assert config["run"]["duration_s"] == 30.0
        assert [c["name"] for c in config["clients"]] == [c.name for c in gpu.clients]
        roles = {c.role for c in gpu.clients}
        if "hp" in roles:
            assert config["run"]["policy"] == gpu.policy
        else:  # BE jobs only: no HP for the policy's gating to protect
            assert config["run"]["policy"] == "mps"
        for client, planned in zip(config["clients"], gpu.clients, strict=True):
            if planned.role == "hp":
                assert client["arrivals"] == {"kind": "poisson", "rate_per_s": planned.rate_per_s}
                assert client["cuda_graph"] == planned.cuda_graph


def test_every_gpu_runs_at_once_and_the_record_says_how_each_ended(
    plan, tmp_path: Path, monkeypatch
) -> None:
    solved, path = plan
    fake = tmp_path / "fake_colocate.py"
    fake.write_text(FAKE_COLOCATE)
    failing = solved.gpus[-1].index
    monkeypatch.setenv("FAIL_GPU", str(failing))
    root = run_plan(
        path, 30.0, tmp_path / "runs", command=[sys.executable, str(fake)], available_gpus=8
    )
    record = json.loads((root / PLAN_RUN_FILE).read_text())
    assert record["format"] == "orion-plan-run" and record["status"] == "failed"
    assert json.loads((root / "plan.json").read_text()) == json.loads(path.read_text())
    by_gpu = {entry["index"]: entry for entry in record["gpus"]}
    assert sorted(by_gpu) == [gpu.index for gpu in solved.gpus]
    for index, entry in by_gpu.items():
        assert entry["exit_code"] == (1 if index == failing else 0)
        assert (root / entry["run_dir"] / "run.json").is_file()
        assert (root / entry["jobs"]).is_file()


def test_a_plan_for_more_gpus_than_the_host_has_is_refused(plan, tmp_path: Path) -> None:
    _, path = plan
    with pytest.raises(OrionError, match="this host has 0 GPU"):
        run_plan(path, 30.0, tmp_path / "runs", available_gpus=0)
    assert not (tmp_path / "runs").exists()


def test_run_plan_refuses_a_plan_this_host_cannot_hold(plan, monkeypatch) -> None:
    _, path = plan
    monkeypatch.setattr(plan_run, "_visible_gpus", lambda: 1)
    result = CliRunner().invoke(app, ["run-plan", str(path)])
    assert result.exit_code == 1
    assert "but this host has 1 GPU(s)" in result.output


def test_each_gpu_runs_in_its_own_folder_with_this_orion_first_on_the_path(
    plan, tmp_path: Path, monkeypatch
) -> None:
    # Started from a source checkout, `python -m` would import that checkout's packages (without
    # their built native library) before the installed orion: each GPU's run starts in its own
    # folder instead, with the orion this process runs first on PYTHONPATH.
    _, path = plan
    fake = tmp_path / "where.py"
    fake.write_text(
        "import json, os, sys\n"
        "jobs = json.load(open(sys.argv[2]))\n"
        "out = os.path.join(jobs['run']['output_dir'], 'where.json')\n"
        "json.dump({'cwd': os.getcwd(), 'path': os.environ['PYTHONPATH']}, open(out, 'w'))\n"
    )
    shadow = tmp_path / "checkout"
    shadow.mkdir()
    monkeypatch.chdir(shadow)
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    root = run_plan(
        Path(path).resolve(),
        30.0,
        Path("runs"),
        command=[sys.executable, str(fake)],
        available_gpus=8,
    )
    assert root.is_absolute()
    orion_root = str(Path(colocation.__file__).resolve().parent.parent)
    for gpu_dir in sorted(root.glob("gpu*")):
        seen = json.loads(next(gpu_dir.rglob("where.json")).read_text())
        assert Path(seen["cwd"]) == gpu_dir
        assert seen["path"].split(os.pathsep)[0] == orion_root


def test_a_plan_runs_in_the_sharing_mode_its_matrix_was_measured_in(plan, tmp_path: Path) -> None:
    # The committed matrices name no mode: measured through MPS, before orion's default became
    # time-sliced; a plan from them must still run orion through MPS.
    solved, _ = plan
    for gpu in solved.gpus:
        assert "sharing" not in gpu.settings
    configs = plan_jobs(solved, 30.0, tmp_path)
    gated = [configs[g.index]["run"] for g in solved.gpus if g.policy == "orion"]
    assert gated and all(run.get("sharing") in ("mps", None) for run in gated)
    assert any(run.get("sharing") == "mps" for run in gated if run["policy"] == "orion")
    sliced = {"sharing": "timeslice"}
    retimed = replace(
        solved, gpus=tuple(replace(g, settings={**g.settings, **sliced}) for g in solved.gpus)
    )
    runs = [c["run"] for c in plan_jobs(retimed, 30.0, tmp_path).values()]
    assert {run.get("sharing") for run in runs if run["policy"] == "orion"} == {"timeslice"}


def _plan_from_cells_of(tmp_path: Path, cell_s: float) -> Path:
    """The fixture fleet planned from the fixture matrix, its cells said to be ``cell_s`` long."""
    matrix = json.loads((DATA / "pairs" / "nvidia-h100-80gb-hbm3.json").read_text())
    matrix["duration_s"] = cell_s
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    (pairs / "nvidia-h100-80gb-hbm3.json").write_text(json.dumps(matrix))
    fleet = load_fleet(DATA / "fleet.json")
    solved = solve(fleet, load_matrices(fleet.gpu_kinds(), pairs), "max-total-be")
    assert {gpu.matrix_duration_s for gpu in solved.gpus} == {cell_s}
    assert f"predictions are for runs of {cell_s:g} s" in " ".join(solved.notes)
    path = write_plan(solved, tmp_path / "plan.json")
    assert load_plan(path) == solved
    return path


def _run_plan_durations(monkeypatch) -> list[float]:
    """`orion run-plan` up to the run itself: the durations it would run for."""
    asked: list[float] = []

    def stop(plan_path: Path, duration_s: float, output_dir: Path) -> Path:
        asked.append(duration_s)
        raise OrionError("stopped before any GPU")

    monkeypatch.setattr(plan_run, "run_plan", stop)
    return asked


def test_a_plan_runs_as_long_as_its_matrix_measured_each_pair(tmp_path: Path, monkeypatch) -> None:
    # 10-s cells measure a daemon's first seconds: a plan from them run for 60 s misses its
    # predictions, so the run's length defaults to the cells' and any other length is warned of.
    path = _plan_from_cells_of(tmp_path, 30.0)
    asked = _run_plan_durations(monkeypatch)
    result = CliRunner().invoke(app, ["run-plan", str(path), "-o", str(tmp_path / "runs")])
    assert asked == [30.0]
    assert "for 30 s" in result.output and "warning" not in result.output
    result = CliRunner().invoke(app, ["run-plan", str(path), "-d", "60", "-o", str(tmp_path)])
    assert asked == [30.0, 60.0]
    warning = " ".join(result.output.split())
    assert "warning: GPU 0: a run of 60 s, where the plan's predictions come from pairs " in warning
    assert "measured for 30 s each" in warning and "leave out --duration" in warning


def test_a_plan_from_a_matrix_that_did_not_record_its_cells_runs_60_s(plan, monkeypatch) -> None:
    solved, path = plan
    assert {gpu.matrix_duration_s for gpu in solved.gpus} == {None}
    assert plan_run.planned_duration(solved) == plan_run.DEFAULT_RUN_S == 60.0
    asked = _run_plan_durations(monkeypatch)
    result = CliRunner().invoke(app, ["run-plan", str(path)])
    assert asked == [60.0] and "warning" not in result.output
