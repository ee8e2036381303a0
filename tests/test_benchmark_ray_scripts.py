"""The two device scripts of issue 38 (the Ray example with its HP as a CUDA graph, a 2-GPU
`run_plan`): their options are checked before anything runs, a dry run plans without Ray, and
with ``--stand-in`` each runs end to end on this CPU machine (a local Ray node whose GPUs are
orion stand-ins), writing its results under ``--out``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray_harness import ray_available

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "benchmarks" / "ray_graph_example.py"
PLAN_2GPU = ROOT / "benchmarks" / "ray_plan_2gpu.py"
H100 = "nvidia-h100-80gb-hbm3"
needs_ray = pytest.mark.skipif(ray_available() is not None, reason=str(ray_available()))


# Another Ray cluster's address, as `ray start` elsewhere on the machine leaves it (a stand-in run
# must start a node of its own, not join that one: under load a concurrent test run's cluster
# was joined, and refused the stand-in node's resources).
ANOTHER_CLUSTER = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1"}


def script(
    path: Path, *arguments: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(path), *arguments],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        # A hang fails the test instead of the session; on a stand-in the scripts' own Ray
        # deadlines are hang guards of 400 s (a loaded CI machine starts Ray workers slowly).
        timeout=1800,
    )


@pytest.mark.parametrize("path", [EXAMPLE, PLAN_2GPU], ids=["example", "plan-2gpu"])
def test_help_is_whole(path):
    shown = script(path, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--out" in shown.stdout and "--dry-run" in shown.stdout and "--stand-in" in shown.stdout


@pytest.mark.parametrize(
    ("path", "arguments", "status", "message"),
    [
        (EXAMPLE, ["--duration", "100"], 2, "--duration must be over 0 and at most 45 s"),
        (EXAMPLE, ["--duration", "nan"], 2, "--duration must be over 0"),
        (EXAMPLE, ["--rate", "0"], 2, "--rate must be over 0"),
        (PLAN_2GPU, ["--duration", "500"], 2, "--duration must be over 0 and at most 120 s"),
        (PLAN_2GPU, ["--kind", "nvidia-h200"], 1, "no pair matrix for GPU kind 'nvidia-h200'"),
    ],
)
def test_a_bad_option_is_one_line_and_nothing_runs(path, arguments, status, message, tmp_path):
    shown = script(path, "--out", str(tmp_path / "out"), "--dry-run", *arguments)
    assert shown.returncode == status, shown.stdout + shown.stderr
    assert message in shown.stderr
    assert "Traceback" not in shown.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_the_example_dry_run_writes_what_it_would_run(tmp_path):
    shown = script(EXAMPLE, "--out", str(tmp_path / "out"), "--dry-run", "--duration", "20")
    assert shown.returncode == 0, shown.stderr
    todo = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert todo["phases"] == ["hp-alone", "be-alone", "ray", "orion"]
    assert todo["hp"]["cuda_graph"] is True  # the HP served as production servers serve it
    assert (todo["duration_s"], todo["hp"]["workload"]) == (20.0, "resnet50")


def test_the_plan_dry_run_plans_two_gpus_from_the_committed_matrix(tmp_path):
    out = tmp_path / "out"
    shown = script(PLAN_2GPU, "--out", str(out), "--dry-run", "--kind", H100)
    assert shown.returncode == 0, shown.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert [gpu["kind"] for gpu in plan["gpus"] if gpu["clients"]] == [H100, H100]
    checked = json.loads((out / "dry_run.json").read_text())
    # the committed matrix names no sharing mode: measured through MPS, run through MPS
    assert {gpu["daemon"] for gpu in checked["gpus"]} == {"orion under MPS"}
    assert not (out / "runs").exists()


@pytest.mark.ray
@needs_ray
def test_the_example_runs_end_to_end_on_a_stand_in_gpu(tmp_path):
    out = tmp_path / "out"
    shown = script(
        EXAMPLE, "--out", str(out), "--stand-in", "--duration", "2", cwd=tmp_path,
        env=ANOTHER_CLUSTER,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    results = json.loads((out / "results.json").read_text())
    phases = results["phases"]
    assert set(phases) == {"hp-alone", "be-alone", "ray", "orion"}
    assert phases["hp-alone"]["hp_requests"] > 0 and phases["be-alone"]["be_samples_per_s"] > 0
    assert all(results["ratios"][phase]["hp_p99_vs_alone"] for phase in ("ray", "orion"))
    # under orion both actors joined the one GPU's daemon; with Ray alone neither did
    assert [actor["attached"] for actor in phases["orion"]["actors"]] == [True, True]
    assert all("attached" not in actor for actor in phases["ray"]["actors"])
    printed = (out / "printout.txt").read_text()
    assert "under orion" in printed and "STAND-IN" in printed and printed in shown.stdout
    assert (out / "hp-orion.csv").is_file()


@pytest.mark.ray
@needs_ray
def test_the_plan_runs_end_to_end_on_two_stand_in_gpus(tmp_path):
    out = tmp_path / "out"
    shown = script(
        PLAN_2GPU, "--out", str(out), "--stand-in", "--duration", "2", cwd=tmp_path,
        env=ANOTHER_CLUSTER,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["stand_in"] is True
    assert [gpu["exit_code"] for gpu in summary["gpus"]] == [0, 0]
    assert len(summary["clients"]) == 4 and summary["plan_check"]
    root = out / summary["plan_run"]
    gpus = {}
    for gpu in summary["gpus"]:
        environment = json.loads((root / gpu["run_dir"] / "run.json").read_text())["environment"]
        gpus[gpu["index"]] = environment["daemon_gpu_index"]
        assert (environment["daemon_policy"], environment["daemon_sharing"]) == (
            "orion",
            "timeslice",
        )
    assert sorted(gpus.values()) == [0, 1]  # each plan GPU on a GPU of its own
    assert "Plan: measured against predicted" in (out / "report" / "report.md").read_text()
