"""`orion profile [window] -- CMD` through the real `orion` app (its `--` handling is part of the
command's registration): what reaches ncu, what the program's environment loses, the help, and
the bad inputs, each one `error:` line before any work (and before any GPU check)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_profiler_runs import (
    FIXTURE_KERNELS,
    install_fake_ncu,
    pretend_gpu,
    pretend_measure_pass,
    recorded_argv,
)
from typer.testing import CliRunner

from orion_cli.app import app
from postprocess import read_profile
from profiler import ncu_runner

runner = CliRunner(env={"COLUMNS": "200"})
PROGRAM = [sys.executable, "-c", "print('a b')", "--port", "8000", "-x", "two words", "--", "-"]
"""A program whose arguments look like orion's options, hold a space, and a second `--`."""


def _invoke(*args: str):
    return runner.invoke(app, ["profile", *args])


def _profiling_argv(tmp_path: Path) -> list[str]:
    return next(argv for argv in reversed(recorded_argv(tmp_path)) if "--export" in argv)


def _option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times"
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    ("window", "ncu_args"),
    [
        (["--window", "profiler-api"], ["--profile-from-start", "off"]),
        (["--window", "nvtx:step"], ["--nvtx", "--nvtx-include", "step/"]),
        (
            ["--skip", "40", "--count", "12"],
            ["--launch-skip", "40", "--launch-count", "12", "--kill", "yes"],
        ),
        (["--count", "12"], ["--launch-skip", "0", "--launch-count", "12", "--kill", "yes"]),
    ],
)
def test_the_window_and_the_command_reach_ncu(
    window: list[str], ncu_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    out = tmp_path / "out"
    result = _invoke(*window, "-o", str(out), "--", *PROGRAM)
    assert result.exit_code == 0, result.output
    argv = _profiling_argv(tmp_path)
    program_at = argv.index(sys.executable)
    assert argv[program_at:] == PROGRAM  # unchanged, and nothing of it parsed by orion
    ncu_part = argv[:program_at]
    start = ncu_part.index(ncu_args[0])
    assert ncu_part[start : start + len(ncu_args)] == ncu_args
    other_windows = {"--profile-from-start", "--nvtx", "--launch-skip"} - {ncu_args[0]}
    assert not other_windows & set(ncu_part)
    record = json.loads((out / "profile_run.json").read_text())
    assert record["command"] == PROGRAM and record["name"] == Path(sys.executable).name
    assert f"{FIXTURE_KERNELS} kernels profiled, " in " ".join(result.output.split())


def test_name_and_default_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    script = [sys.executable, "serve_resnet.py"]
    result = _invoke("--window", "profiler-api", "--", *script)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "profiles" / "nvidia-h200"
    assert (folder / "serve_resnet" / "profile.csv").is_file()  # the script's name, not python's
    result = _invoke("--window", "profiler-api", "--name", "web", "--cuda-graph", "--", *script)
    assert result.exit_code == 0, result.output
    assert read_profile(folder / "web-graph" / "profile.csv").metadata["program"] == "web"


def test_the_program_runs_without_orion_preload_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    environments: list[dict[str, str]] = []
    original = ncu_runner._start

    def start(command, *, stdout, stderr, env):  # type: ignore[no-untyped-def]
        environments.append(dict(env if env is not None else os.environ))
        return original(command, stdout=stdout, stderr=stderr, env=env)

    monkeypatch.setattr(ncu_runner, "_start", start)
    monkeypatch.setenv("LD_PRELOAD", "/opt/orion/liborion_preload.so:/opt/user/libuser.so")
    monkeypatch.setenv("ORION_RUN", "someone-elses-run")
    monkeypatch.setenv("ORION_CLIENT", "3")
    monkeypatch.setenv("MY_SETTING", "kept")
    result = _invoke("--window", "profiler-api", "-o", str(tmp_path / "out"), "--", *PROGRAM)
    assert result.exit_code == 0, result.output
    profiling = environments[0]  # ncu, and the program it starts, get this one
    assert profiling.get("LD_PRELOAD") == "/opt/user/libuser.so"
    assert "ORION_RUN" not in profiling and "ORION_CLIENT" not in profiling
    assert profiling["MY_SETTING"] == "kept"


def test_a_workload_still_profiles_through_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    result = _invoke("resnet50", "-b", "4", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert _option(_profiling_argv(tmp_path), "--profile-from-start") == "off"
    assert f"{FIXTURE_KERNELS} kernels in the profiled step" in " ".join(result.output.split())


def test_help_shows_the_three_windows_with_examples() -> None:
    result = runner.invoke(app, ["profile", "--help"])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: orion profile [OPTIONS] [WORKLOAD] [-- CMD [ARGS]...]")
    text = " ".join(result.output.split())
    for way in ("--window profiler-api", "--window nvtx:RANGE", "--skip N --count M"):
        assert way in text
    assert "orion profile --skip 2000 --count 300 -- ./my_cuda_program" in text
    assert "orion profile --window nvtx:step --name web -- python serve.py" in text


EXE = sys.executable
BAD_INPUTS = [
    (
        "workload and command",
        ["resnet50", "--window", "profiler-api", "--", EXE],
        "give a workload or a program after --, not both",
    ),
    ("neither", [], "nothing to profile: give a workload, or a program after --"),
    ("nothing after --", ["--window", "profiler-api", "--"], "no program after --"),
    (
        "no window",
        ["--", EXE],
        "choose which kernels of the program to profile: --window profiler-api, "
        "--window nvtx:RANGE, or --skip N --count M",
    ),
    (
        "two window kinds",
        ["--window", "nvtx:step", "--skip", "1", "--count", "5", "--", EXE],
        "choose one window, not two",
    ),
    ("zero count", ["--count", "0", "--", EXE], "--count must be >= 1, got 0"),
    ("negative count", ["--count", "-3", "--", EXE], "--count must be >= 1, got -3"),
    ("negative skip", ["--skip", "-1", "--count", "3", "--", EXE], "--skip must be >= 0, got -1"),
    ("skip alone", ["--skip", "10", "--", EXE], "--skip needs --count M"),
    ("unknown window", ["--window", "graph", "--", EXE], "unknown window 'graph'"),
    ("nvtx without a range", ["--window", "nvtx:", "--", EXE], "needs the range's name"),
    (
        "nonexistent command",
        ["--window", "profiler-api", "--", "no-such-program-orion-test", "--flag"],
        "error: no-such-program-orion-test: command not found",
    ),
    (
        "a name that is no folder",
        ["--window", "profiler-api", "--name", "a/b", "--", EXE],
        "profile name 'a/b' cannot name a folder",
    ),
    (
        "workload options with a program",
        ["-b", "4", "--mode", "infer", "--window", "profiler-api", "--", EXE],
        "--mode, --batch-size apply only to a workload, not to a program after --",
    ),
    (
        "--from-ncu with a program",
        ["--from-ncu", "x.csv", "--window", "profiler-api", "--", EXE],
        "--from-ncu applies only to a workload",
    ),
    (
        "window options with a workload",
        ["resnet50", "--skip", "1", "--count", "2"],
        "--skip, --count apply only to a program after --",
    ),
    (
        "bad replay mode for a program",
        ["--replay-mode", "range", "--window", "profiler-api", "--", EXE],
        "unknown replay mode 'range'",
    ),
]


@pytest.mark.parametrize(("case", "args", "message"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_error_line_before_any_work(
    case: str, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)  # present, and never started
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU check would fail
    monkeypatch.chdir(tmp_path)
    result = _invoke(*args)
    # 2: called wrongly (usage); 1: a command that is not there (what the machine lacks)
    assert result.exit_code == (1 if case == "nonexistent command" else 2), result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.output
    assert message in result.output
    assert "Traceback" not in result.output and "NVIDIA GPU" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "argv.jsonl").exists()  # ncu never ran
    assert not list(tmp_path.glob("**/profile_run.json"))


@pytest.mark.parametrize(
    ("application_replay", "label"),
    [(False, "profiling with ncu:"), (True, "profiling with ncu (application replay), pass 1:")],
)
def test_a_live_bar_without_a_total_says_application_replay_only_when_it_is(
    application_replay: bool, label: str
) -> None:
    import io

    from rich.console import Console
    from rich.progress import Progress

    from orion_cli.profile_views import RichListener

    with Progress(console=Console(file=io.StringIO())) as progress:
        listener = RichListener(progress, application_replay)
        listener.phase_started("ncu")  # a program's marker window: no kernel total
        listener.ncu_pass(1)
        listener.kernel_profiled(3, None, "kernel")
        assert progress.tasks[0].description == label
