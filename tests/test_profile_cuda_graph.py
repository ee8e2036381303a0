"""`orion profile --cuda-graph`: what reaches the profiled process, where the profile goes, and
what it records; and the inputs refused before any GPU work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from test_profiler_runs import install_fake_ncu, pretend_gpu, pretend_measure_pass
from typer.testing import CliRunner

from orion_cli.profile import profile_command
from postprocess import default_profile_path, read_profile
from profiler.ncu_runner import target_command

runner = CliRunner()


def _invoke(*args: str):
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:
        """orion (test)."""

    app.command("profile")(profile_command)
    return runner.invoke(app, ["profile", *args])


def test_the_profiled_process_is_told_to_capture_the_step() -> None:
    common = dict(
        workload="resnet50", mode="infer", batch_size=4, dtype="fp32", options=None, warmup=5
    )
    graph = target_command(**common, pass_="ncu", output="s.json", cuda_graph=True)
    eager = target_command(**common, pass_="ncu", output="s.json")
    assert "--cuda-graph" in graph
    assert "--cuda-graph" not in eager


def test_a_graph_profile_has_a_folder_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path))
    eager = default_profile_path("resnet50", "infer", 4, "fp32", "NVIDIA H100 80GB HBM3")
    graph = default_profile_path(
        "resnet50", "infer", 4, "fp32", "NVIDIA H100 80GB HBM3", cuda_graph=True
    )
    assert graph.parent.name == eager.parent.name + "-graph"
    assert graph.parent.parent == eager.parent.parent


def test_a_live_graph_profile_records_cuda_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    calls = pretend_measure_pass(monkeypatch)
    out = tmp_path / "out"
    result = _invoke("resnet50", "-b", "4", "--cuda-graph", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert all("--cuda-graph" in command for command in calls)
    assert read_profile(out / "profile.csv").metadata["cuda_graph"] is True
    assert json.loads((out / "profile_run.json").read_text())["cuda_graph"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["resnet50", "--mode", "train", "--cuda-graph"],
            "error: cuda_graph applies to inference only",
        ),
        (
            ["synthetic-compute", "--cuda-graph"],
            "error: workload 'synthetic-compute' cannot be served as a CUDA graph",
        ),
        (
            ["resnet50", "--cuda-graph", "--from-ncu", "x.csv"],
            "error: --cuda-graph applies to a live run",
        ),
    ],
)
def test_bad_graph_requests_are_one_line_before_any_gpu_work(args: list[str], message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == 2  # what was typed, a usage error
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
