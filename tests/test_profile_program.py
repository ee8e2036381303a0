"""`orion profile -- CMD` as a library: the window -> ncu's arguments, the program's environment,
the profile and run record it leaves, and what happens when ncu fails or is interrupted.

Only the process boundary is faked: ncu is tests/data/profiler/fake_ncu.py (it never runs the
program; it records its argv and prints a real ResNet-50 run's progress and CSV), and the GPU
check answers "an H200".
"""

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

from orion_common.errors import OrionError
from postprocess import read_profile
from profiler import ncu_runner, pipeline
from profiler.ncu_runner import NCU_LOG, RAW_CSV, REPORT, build_ncu_command, run_ncu
from profiler.program import (
    ProgramTarget,
    Window,
    check_profile_name,
    choose_window,
    program_environment,
)
from profiler.program_run import NO_GRAPH_SPAN, profile_program
from workloads import WorkloadSpec

PROGRAM = (sys.executable, "serve_resnet.py", "--port", "8000")


def _target(window: Window, **changes: object) -> ProgramTarget:
    fields: dict[str, object] = {"command": PROGRAM, "name": "serve_resnet", "window": window}
    fields.update(changes)
    return ProgramTarget(**fields)  # type: ignore[arg-type]


def _profiling_argv(tmp_path: Path) -> list[str]:
    """The fake ncu's argv of the last profiling run (the one exporting a report)."""
    return next(argv for argv in reversed(recorded_argv(tmp_path)) if "--export" in argv)


def _option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times"
    return argv[argv.index(name) + 1]


# --- the window -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "args"),
    [
        (Window("profiler-api"), ["--profile-from-start", "off"]),
        (Window("nvtx", nvtx_range="step"), ["--nvtx", "--nvtx-include", "step/"]),
        (Window("nvtx", nvtx_range="step/"), ["--nvtx", "--nvtx-include", "step/"]),
        (Window("nvtx", nvtx_range="serve/step"), ["--nvtx", "--nvtx-include", "serve/step/"]),
        (
            Window("kernels", skip=100, count=25),
            ["--launch-skip", "100", "--launch-count", "25", "--kill", "yes"],
        ),
    ],
)
def test_each_window_becomes_its_ncu_arguments(window: Window, args: list[str]) -> None:
    assert window.ncu_args() == args
    assert _target(window).ncu_args() == args
    assert _target(window, cuda_graph=True).ncu_args() == [*args, "--graph-profiling", "node"]


@pytest.mark.parametrize(
    ("window", "skip", "count", "expected"),
    [
        ("profiler-api", None, None, Window("profiler-api")),
        ("nvtx:step", None, None, Window("nvtx", nvtx_range="step")),
        ("nvtx:my range", None, None, Window("nvtx", nvtx_range="my range")),
        (None, 5, 10, Window("kernels", skip=5, count=10)),
        (None, None, 10, Window("kernels", skip=0, count=10)),
    ],
)
def test_choose_window(
    window: str | None, skip: int | None, count: int | None, expected: Window
) -> None:
    assert choose_window(window, skip, count) == expected


@pytest.mark.parametrize(
    ("window", "skip", "count", "message"),
    [
        (None, None, None, "choose which kernels of the program to profile: --window "),
        ("profiler-api", 1, 2, "choose one window, not two"),
        ("nvtx:step", None, 2, "choose one window, not two"),
        (None, 0, 0, "--count must be >= 1, got 0"),
        (None, None, -4, "--count must be >= 1, got -4"),
        (None, -1, 5, "--skip must be >= 0, got -1"),
        (None, 3, None, "--skip needs --count M"),
        ("nvtx:", None, None, "--window nvtx:RANGE needs the range's name"),
        ("cuda", None, None, "unknown window 'cuda'; allowed: profiler-api, nvtx:RANGE"),
    ],
)
def test_bad_windows_are_one_line(
    window: str | None, skip: int | None, count: int | None, message: str
) -> None:
    with pytest.raises(OrionError) as caught:
        choose_window(window, skip, count)
    assert caught.value.message.startswith(message)
    assert "\n" not in caught.value.message


def test_the_missing_window_error_lists_the_three_ways() -> None:
    with pytest.raises(OrionError) as caught:
        choose_window(None, None, None)
    message = caught.value.message
    for way in ("--window profiler-api", "--window nvtx:RANGE", "--skip N --count M"):
        assert way in message


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "", "x" * 65, "two words"])
def test_a_name_that_cannot_be_a_folder_is_refused(name: str) -> None:
    with pytest.raises(OrionError, match="cannot name a folder"):
        check_profile_name(name)


def test_names_that_make_good_folders_pass() -> None:
    for name in ("serve_resnet", "web-1.2", "llama+lora", "x" * 64):
        assert check_profile_name(name) == name


# --- the program's environment --------------------------------------------------------------------


def test_the_environment_loses_orion_preload_and_join_variables_only() -> None:
    base = {
        "LD_PRELOAD": "/opt/orion/liborion_preload.so:/opt/user/libuser.so /usr/lib/libtc.so",
        "ORION_RUN": "run-1",
        "ORION_CLIENT": "3",
        "CUDA_VISIBLE_DEVICES": "1",
        "PATH": "/usr/bin",
    }
    env = program_environment(
        base, drop=("ORION_RUN", "ORION_CLIENT"), preloads=("liborion_preload.so",)
    )
    assert env == {
        "LD_PRELOAD": "/opt/user/libuser.so:/usr/lib/libtc.so",
        "CUDA_VISIBLE_DEVICES": "1",
        "PATH": "/usr/bin",
    }
    only_orion = program_environment(
        {"LD_PRELOAD": "/x/liborion_preload.so"}, preloads=("liborion_preload.so",)
    )
    assert "LD_PRELOAD" not in only_orion


def test_a_preload_given_as_a_path_matches_only_itself() -> None:
    base = {"LD_PRELOAD": "/build/liborion.so:/other/liborion.so"}
    env = program_environment(base, preloads=("/build/liborion.so",))
    assert env["LD_PRELOAD"] == "/other/liborion.so"


# --- the live run ---------------------------------------------------------------------------------


def test_a_kernel_range_run_writes_the_profile_and_a_record_of_command_and_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    monkeypatch.setenv("ORION_TEST_SECRET", "s3cr3t-value-never-written")
    out = tmp_path / "out"
    target = _target(Window("kernels", skip=100, count=FIXTURE_KERNELS))
    totals: list[int | None] = []

    class Recorder(pipeline.ProgressListener):
        def phase_started(self, phase, *, total=None, estimate_s=None):  # type: ignore[override]
            totals.append(total)

    result = profile_program(target, out, env=dict(os.environ), progress=Recorder())

    argv = _profiling_argv(tmp_path)
    assert (_option(argv, "--launch-skip"), _option(argv, "--launch-count")) == ("100", "459")
    assert _option(argv, "--kill") == "yes"
    assert "--profile-from-start" not in argv and "--nvtx" not in argv
    assert _option(argv, "--clock-control") == "none"
    assert argv[-len(PROGRAM) :] == list(PROGRAM)  # the program, last and unchanged
    assert totals[0] == FIXTURE_KERNELS  # the progress total is the count asked for
    assert result.kernel_count == FIXTURE_KERNELS
    assert result.window == "kernel launches 101 to 559"
    assert any("no measured pass" in warning for warning in result.warnings)

    profile = read_profile(out / "profile.csv")
    meta = profile.metadata
    assert meta["program"] == "serve_resnet" and meta["workload"] is None
    assert meta["window"] == {"kind": "kernels", "skip": 100, "count": FIXTURE_KERNELS}
    assert meta["gpu_name"] == "NVIDIA H200" and meta["cuda_graph"] is False
    assert profile.kernels["measured_duration_ns"].isna().all()
    assert profile.kernels["graph"].isna().all()

    record_text = (out / "profile_run.json").read_text()
    record = json.loads(record_text)
    assert (record["format"], record["version"]) == ("orion-profile-run", 2)
    assert record["target"] == "program" and record["name"] == "serve_resnet"
    assert record["command"] == list(PROGRAM)
    assert record["window"] == {"kind": "kernels", "skip": 100, "count": FIXTURE_KERNELS}
    assert "workload" not in record and "mode" not in record
    assert not [key for key in record if "env" in key.lower()]
    assert "s3cr3t-value-never-written" not in record_text
    assert "s3cr3t-value-never-written" not in (out / "profile.csv").read_text()
    assert set(record["commands"]) == {"ncu", "ncu_import"}
    assert record["kernels"]["profiled"] == FIXTURE_KERNELS
    assert record["kernels"]["measured_per_step"] is None


@pytest.mark.parametrize(
    ("window", "expected_args", "recorded"),
    [
        (
            Window("nvtx", nvtx_range="step"),
            ["--nvtx", "--nvtx-include", "step/"],
            {"kind": "nvtx", "range": "step", "ncu_include": "step/"},
        ),
        (Window("profiler-api"), ["--profile-from-start", "off"], {"kind": "profiler-api"}),
    ],
)
def test_marker_windows_reach_ncu_and_the_record(
    window: Window,
    expected_args: list[str],
    recorded: dict[str, object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    totals: list[int | None] = []

    class Recorder(pipeline.ProgressListener):
        def phase_started(self, phase, *, total=None, estimate_s=None):  # type: ignore[override]
            totals.append(total)

    profile_program(_target(window), tmp_path / "out", env=dict(os.environ), progress=Recorder())
    argv = _profiling_argv(tmp_path)
    start = argv.index(expected_args[0])
    assert argv[start : start + len(expected_args)] == expected_args
    assert "--launch-count" not in argv and "--kill" not in argv
    assert totals[0] is None  # nothing says in advance how many kernels the window holds
    record = json.loads((tmp_path / "out" / "profile_run.json").read_text())
    assert record["window"] == recorded


def test_the_program_gets_the_environment_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    seen: list[dict[str, str] | None] = []
    original = ncu_runner._start

    def start(command, *, stdout, stderr, env):  # type: ignore[no-untyped-def]
        seen.append(None if env is None else dict(env))
        return original(command, stdout=stdout, stderr=stderr, env=env)

    monkeypatch.setattr(ncu_runner, "_start", start)
    env = {**os.environ, "MY_SETTING": "kept"}
    env.pop("ORION_TEST_ONLY_HERE", None)
    monkeypatch.setenv("ORION_TEST_ONLY_HERE", "not passed")
    profile_program(_target(Window("profiler-api")), tmp_path / "out", env=env)
    profiling = seen[0]
    assert profiling is not None and profiling["MY_SETTING"] == "kept"
    assert "ORION_TEST_ONLY_HERE" not in profiling  # the given environment, not this process's


def test_a_graph_replaying_program_gets_graph_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    target = _target(Window("profiler-api"), cuda_graph=True)
    result = profile_program(target, env=dict(os.environ))
    expected = tmp_path / "profiles" / "nvidia-h200" / "serve_resnet-graph" / "profile.csv"
    assert result.profile_path == expected
    assert _option(_profiling_argv(tmp_path), "--graph-profiling") == "node"
    profile = read_profile(expected)
    assert profile.metadata["cuda_graph"] is True
    assert (profile.kernels["graph"] == 0).all()  # one graph, as a workload's --cuda-graph
    assert NO_GRAPH_SPAN in result.warnings
    assert json.loads((expected.parent / "profile_run.json").read_text())["cuda_graph"] is True


def test_the_default_folder_is_the_name_under_the_gpu_profile_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    result = profile_program(_target(Window("profiler-api"), name="web"), env=dict(os.environ))
    assert result.profile_path == tmp_path / "profiles" / "nvidia-h200" / "web" / "profile.csv"


def test_ctrl_c_stops_ncu_and_leaves_nothing_that_looks_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch, mode="sleep")
    monkeypatch.setenv("FAKE_NCU_PID", str(tmp_path / "pid"))
    pretend_gpu(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile.csv").write_text("an earlier run's profile\n")
    (out / "profile_run.json").write_text("{}\n")

    class Impatient(pipeline.ProgressListener):
        def kernel_profiled(self, done, total, name):  # type: ignore[override]
            if done == 4:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        profile_program(
            _target(Window("kernels", count=50)), out, env=dict(os.environ), progress=Impatient()
        )
    assert (out / NCU_LOG).read_text().count('==PROF== Profiling "') == 4
    for name in ("profile.csv", "profile_run.json", RAW_CSV):
        assert not (out / name).exists(), name
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_an_empty_window_names_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_ncu(tmp_path, monkeypatch, mode="nokernels")
    pretend_gpu(monkeypatch)
    with pytest.raises(OrionError) as caught:
        profile_program(
            _target(Window("nvtx", nvtx_range="step")), tmp_path / "out", env=dict(os.environ)
        )
    assert caught.value.message.startswith(
        "ncu profiled no kernels: the program launched nothing ncu could see inside NVTX "
        "push/pop range 'step' (--nvtx-include step/)"
    )
    assert not (tmp_path / "out" / "profile.csv").exists()


def test_a_failing_exit_after_the_count_is_ncu_ending_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake's "fail" mode profiles 3 kernels, then exits with status 1 (and keeps the report).
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="fail")
    command = build_ncu_command(
        ncu, list(PROGRAM), replay_mode="kernel", metrics=["m"], report=tmp_path / REPORT
    )
    run = run_ncu(command, tmp_path, ends_program_after=3)
    assert run.returncode == 1 and (tmp_path / RAW_CSV).is_file()
    with pytest.raises(OrionError, match="ncu exited with status 1"):
        run_ncu(command, tmp_path, ends_program_after=4)


def test_from_ncu_refuses_a_program_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    out = tmp_path / "out"
    profile_program(_target(Window("profiler-api")), out, env=dict(os.environ))
    with pytest.raises(OrionError, match="profiled the program 'serve_resnet'"):
        pipeline.profile_from_ncu(
            out / RAW_CSV,
            workload="resnet50",
            mode="infer",
            batch_size=4,
            dtype="fp32",
            out_dir=tmp_path / "again",
        )


def test_a_workload_record_says_its_target_and_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    out = tmp_path / "out"
    pipeline.profile_workload(WorkloadSpec("resnet50", batch_size=4), out)
    record = json.loads((out / "profile_run.json").read_text())
    assert record["version"] == 2 and record["target"] == "workload"
    assert record["window"] == {"kind": "profiler-api"}
    assert (record["workload"], record["batch_size"]) == ("resnet50", 4)
    assert "command" not in record
    assert _option(_profiling_argv(tmp_path), "--profile-from-start") == "off"
