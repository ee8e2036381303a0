"""The ncu runner and the whole pipeline driven end to end against a fake `ncu`.

The fake (tests/data/profiler/fake_ncu.py) plays ncu's two roles for a real ResNet-50 run: the
profiling run (`--export`) prints a progress line per kernel and writes a placeholder report, the
import (`--import`) prints the real run's CSV. Only the process boundary is faked, plus the GPU
checks and the measurement pass (both need a GPU). Helpers here are also used by
test_profiler_cli.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from orion_common import sysinfo
from orion_common.errors import OrionError
from orion_common.sysinfo import GpuFacts
from postprocess import NCU_METRIC_SETS, read_ncu_raw_csv, read_profile
from profiler import pipeline
from profiler.measure import write_table
from profiler.ncu_runner import (
    NCU_LOG,
    PARTIAL_RAW_CSV,
    RAW_CSV,
    REPORT,
    available_tensor_metrics,
    build_import_command,
    build_ncu_command,
    ncu_metrics,
    run_ncu,
)
from workloads import WorkloadSpec

DATA = Path(__file__).parent / "data"
FAKE_NCU = DATA / "profiler" / "fake_ncu.py"
FIXTURE = DATA / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"
METRIC_SETS_DATA = DATA / "ncu" / "metric_sets"
FIXTURE_KERNELS = 459
H200 = GpuFacts(0, "NVIDIA H200", 143771, "580.159.04", "13.0", 132, "9.0")


def install_fake_ncu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "ok", query: str = "ok"
) -> Path:
    """An executable `ncu` in ``tmp_path`` running the fake, found through ORION_NCU."""
    wrapper = tmp_path / "bin" / "ncu"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_NCU}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("ORION_NCU", str(wrapper))
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    monkeypatch.setenv("FAKE_NCU_QUERY", query)
    monkeypatch.delenv("FAKE_NCU_IMPORT", raising=False)
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.jsonl"))
    available_tensor_metrics.cache_clear()
    return wrapper


def recorded_argv(tmp_path: Path) -> list[list[str]]:
    lines = (tmp_path / "argv.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def fake_measured(steps: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the measurement pass would write for the fixture's run: its own kernels, in order."""
    kernels = read_ncu_raw_csv(FIXTURE).kernels
    columns = ["demangled_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    one = kernels[columns].copy()
    one["duration_ns"] = kernels["duration_ns"] * 0.8
    per_step = pd.concat(
        [one.assign(step=step, order=range(len(one))) for step in range(steps)], ignore_index=True
    )
    medians = one.assign(order=range(len(one)), steps_used=steps)
    return medians, per_step


def pretend_gpu(monkeypatch: pytest.MonkeyPatch, counters: bool | None = True) -> None:
    monkeypatch.setattr(pipeline, "detect_gpu", lambda: H200)
    monkeypatch.setattr(sysinfo, "profiling_counters_allowed", lambda: (counters, "test"))


def pretend_measure_pass(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Replace the measurement subprocess (it needs a GPU) by writing its outputs."""
    calls: list[list[str]] = []

    def measure(command: list[str], log: Path, env: dict[str, str]) -> None:
        calls.append(command)
        medians, per_step = fake_measured()
        write_table(medians, command[command.index("--output") + 1])
        write_table(per_step, command[command.index("--steps-output") + 1])
        log.write_text("[orion target] measured (fake)\n")

    monkeypatch.setattr(pipeline, "run_measure_pass", measure)
    return calls


def _command(ncu: Path, out: Path, replay_mode: str = "kernel") -> list[str]:
    return build_ncu_command(
        ncu,
        ["python", "-m", "profiler.target"],
        replay_mode=replay_mode,
        metrics=ncu_metrics(),
        report=out / REPORT,
    )


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --- the runner -----------------------------------------------------------------------------------


def test_progress_fires_once_per_kernel_in_the_export_run_and_the_import_gives_the_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    out = tmp_path / "out"
    seen: list[tuple[int, int | None, str]] = []
    run = run_ncu(
        _command(ncu, out),
        out,
        total=FIXTURE_KERNELS,
        on_kernel=lambda d, t, n: seen.append((d, t, n)),
    )
    assert run.returncode == 0 and run.passes == 1
    assert run.kernels_profiled == run.progress_lines == FIXTURE_KERNELS
    assert [done for done, _, _ in seen] == list(range(1, FIXTURE_KERNELS + 1))
    assert all(total == FIXTURE_KERNELS for _, total, _ in seen)
    # the import's stdout, unchanged, is the CSV postprocess reads
    assert run.raw_csv == out / RAW_CSV
    assert run.raw_csv.read_text() == FIXTURE.read_text()
    assert len(read_ncu_raw_csv(run.raw_csv).kernels) == FIXTURE_KERNELS
    assert run.report == out / REPORT and run.report.read_text() == "fake ncu report\n"
    # the profiling run's stdout and stderr (ncu's and the program's) went to the log
    log = (out / NCU_LOG).read_text()
    assert log.count('==PROF== Profiling "') == FIXTURE_KERNELS
    assert "building workload (fake)" in log and '"ID",' not in log
    export, conversion = recorded_argv(tmp_path)[-2:]
    assert export[:2] == ["--export", str(out / REPORT)] and "--csv" not in export
    assert conversion == build_import_command(ncu, out / REPORT)[1:]
    assert run.import_command == tuple(build_import_command(ncu, out / REPORT))
    assert run.wall_s > 0 and run.import_wall_s > 0


def test_progress_lines_on_stderr_count_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_NCU_PROGRESS_STREAM", "stderr")
    seen: list[int] = []
    run = run_ncu(_command(ncu, tmp_path), tmp_path, on_kernel=lambda d, t, n: seen.append(d))
    assert run.progress_lines == FIXTURE_KERNELS and seen[-1] == FIXTURE_KERNELS
    assert (tmp_path / NCU_LOG).read_text().count("==PROF== Profiling") == FIXTURE_KERNELS
    assert "==PROF== Profiling" not in (tmp_path / RAW_CSV).read_text()


def test_application_replay_reports_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="app")
    passes: list[int] = []
    run = run_ncu(_command(ncu, tmp_path, "application"), tmp_path, on_pass=passes.append)
    assert passes == [1, 2, 3]
    assert (run.passes, run.kernels_profiled) == (3, FIXTURE_KERNELS)
    assert len(read_ncu_raw_csv(run.raw_csv).kernels) == FIXTURE_KERNELS


def test_runner_failure_shows_the_log_tail_and_keeps_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="fail")
    command = _command(ncu, tmp_path)
    with pytest.raises(OrionError) as caught:
        run_ncu(command, tmp_path)
    error = caught.value
    assert "ncu exited with status 1" in error.message
    assert "The application returned an error code (3)" in error.message
    assert "\n" not in error.message
    hint = error.hint or ""
    assert "CUDA out of memory (fake)" in hint
    assert "--clock-control none" in hint  # the command
    assert (tmp_path / REPORT).is_file() and (tmp_path / NCU_LOG).is_file()
    assert not (tmp_path / RAW_CSV).exists()
    assert "--import" not in recorded_argv(tmp_path)[-1]  # nothing to convert


def test_counter_permission_error_is_recognised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="perm")
    with pytest.raises(OrionError, match="ERR_NVGPUCTRPERM") as caught:
        run_ncu(_command(ncu, tmp_path), tmp_path)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in (caught.value.hint or "")
    assert str(tmp_path / NCU_LOG) in (caught.value.hint or "")


def test_zero_kernels_profiled_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="nokernels")
    with pytest.raises(OrionError, match="ncu profiled no kernels"):
        run_ncu(_command(ncu, tmp_path), tmp_path)
    assert not (tmp_path / RAW_CSV).exists() and not (tmp_path / REPORT).exists()
    assert "--import" not in recorded_argv(tmp_path)[-1]


def test_import_without_a_kernel_table_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_NCU_IMPORT", "empty")
    with pytest.raises(OrionError, match="ncu profiled no kernels"):
        run_ncu(_command(ncu, tmp_path), tmp_path)
    assert not (tmp_path / RAW_CSV).exists()
    assert "No kernels were profiled" in (tmp_path / PARTIAL_RAW_CSV).read_text()


def test_import_failure_names_the_import_and_keeps_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_NCU_IMPORT", "fail")
    with pytest.raises(OrionError) as caught:
        run_ncu(_command(ncu, tmp_path), tmp_path)
    error = caught.value
    assert error.message.startswith("ncu --import (the report to CSV) exited with status 1")
    assert "Failed to import report" in error.message and "\n" not in error.message
    hint = error.hint or ""
    assert "the report is damaged (fake)" in hint  # the import's stderr, from the log
    assert "building workload (fake)" not in hint  # not the profiling run's lines
    assert "--import" in hint and "--print-kernel-base mangled" in hint
    assert (tmp_path / PARTIAL_RAW_CSV).is_file() and not (tmp_path / RAW_CSV).exists()
    assert (tmp_path / REPORT).is_file()
    log = (tmp_path / NCU_LOG).read_text()
    assert log.count('==PROF== Profiling "') == FIXTURE_KERNELS  # the profiling run's, kept
    assert "the report is damaged (fake)" in log  # the import's stderr, appended


def test_fake_import_refuses_a_missing_report(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(FAKE_NCU), "--import", str(tmp_path / "none.ncu-rep"), "--csv"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "FAKE_NCU_ARGV": ""},
    )
    assert result.returncode == 1 and result.stdout.startswith("==ERROR==")


def test_missing_executable_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(OrionError, match="could not start ncu") as caught:
        run_ncu(_command(tmp_path / "no-such-ncu", tmp_path), tmp_path)
    assert "ORION_NCU" in (caught.value.hint or "")
    assert not (tmp_path / RAW_CSV).exists()


def test_keyboard_interrupt_from_the_callback_stops_ncu_and_keeps_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="sleep")
    monkeypatch.setenv("FAKE_NCU_PID", str(tmp_path / "pid"))
    out = tmp_path / "out"

    def interrupt(done: int, total: int | None, name: str) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ncu(_command(ncu, out), out, on_kernel=interrupt)
    assert (out / NCU_LOG).read_text().count('==PROF== Profiling "') == 3
    assert not (out / RAW_CSV).exists()
    assert "--import" not in recorded_argv(tmp_path)[-1]
    assert _process_gone(int((tmp_path / "pid").read_text()))


@pytest.fixture
def ctrl_c_as_a_terminal_sends_it():
    """SIGINT handled as a terminal's Ctrl-C finds it (Python's handler, not blocked), whoever
    started pytest: a pytest started in the background by a non-interactive shell (`pytest &` in
    a script, as some CI runners and agents do) inherits SIGINT ignored, and Python then leaves it
    ignored, so these tests' own SIGINT would do nothing. (No test leaves it changed:
    tests/conftest.py fails one that would.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    signal.signal(signal.SIGINT, previous)


def _interrupt_when(path: Path, timeout_s: float = 120.0) -> threading.Thread:
    """SIGINT to this process once ``path`` exists (the fake writes it when it is running)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and path.read_text():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("ctrl_c_as_a_terminal_sends_it")
def test_sigint_while_waiting_for_ncu_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, mode="sleep")
    monkeypatch.setenv("FAKE_NCU_PID", str(tmp_path / "pid"))
    watcher = _interrupt_when(tmp_path / "pid")
    with pytest.raises(KeyboardInterrupt):
        run_ncu(_command(ncu, tmp_path), tmp_path)
    watcher.join()
    assert not (tmp_path / "pid.ended").exists()  # stopped, not waited for
    assert (tmp_path / NCU_LOG).is_file() and not (tmp_path / RAW_CSV).exists()
    assert _process_gone(int((tmp_path / "pid").read_text()))


@pytest.mark.usefixtures("ctrl_c_as_a_terminal_sends_it")
def test_sigint_during_the_import_keeps_report_log_and_partial_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_NCU_IMPORT", "sleep")
    monkeypatch.setenv("FAKE_NCU_PID", str(tmp_path / "pid"))
    watcher = _interrupt_when(tmp_path / "pid")
    with pytest.raises(KeyboardInterrupt):
        run_ncu(_command(ncu, tmp_path), tmp_path)
    watcher.join()
    assert not (tmp_path / "pid.ended").exists()  # stopped, not waited for
    assert not (tmp_path / RAW_CSV).exists()
    partial = (tmp_path / PARTIAL_RAW_CSV).read_text()
    assert partial.splitlines() == FIXTURE.read_text().splitlines()[:6]
    assert (tmp_path / REPORT).is_file()
    assert (tmp_path / NCU_LOG).read_text().count('==PROF== Profiling "') == FIXTURE_KERNELS
    assert _process_gone(int((tmp_path / "pid").read_text()))


def test_tensor_metrics_are_queried_once_per_ncu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch)
    first = available_tensor_metrics(str(ncu))
    second = available_tensor_metrics(str(ncu))
    assert first is second and first.error is None
    assert [m.split(".")[0] for m in first.metrics] == [
        "sm__pipe_tensor_op_gmma_cycles_active",
        "sm__pipe_shared_cycles_active",
    ]
    assert sum("--query-metrics" in argv for argv in recorded_argv(tmp_path)) == 1


def test_failed_tensor_metric_query_leaves_them_out_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = install_fake_ncu(tmp_path, monkeypatch, query="fail")
    query = available_tensor_metrics(str(ncu))
    assert query.metrics == ()
    assert "exited with status 1" in (query.error or "")


# --- the pipeline ---------------------------------------------------------------------------------


def test_profile_workload_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    measure_calls = pretend_measure_pass(monkeypatch)
    events: list[tuple[str, object]] = []

    class Recorder(pipeline.ProgressListener):
        def phase_started(self, phase, *, total=None, estimate_s=None):  # type: ignore[override]
            events.append(("start", (phase, total, estimate_s)))

        def phase_finished(self, phase, seconds):  # type: ignore[override]
            events.append(("end", phase))

        def kernel_profiled(self, done, total, name):  # type: ignore[override]
            events.append(("kernel", done))

    out = tmp_path / "out"
    spec = WorkloadSpec("resnet50", mode="infer", batch_size=4, dtype="fp32")
    result = pipeline.profile_workload(spec, out, progress=Recorder())

    assert result.kernel_count == FIXTURE_KERNELS
    report = result.match_report
    assert report is not None and report.matched == FIXTURE_KERNELS and report.only_in_ncu == 0
    for name in (
        "measured.csv",
        "software.json",
        "profile.ncu-rep",
        "ncu_raw.csv",
        "ncu.log",
        "profile.csv",
    ):
        assert (out / name).is_file(), name
    assert result.paths["ncu_report"] == out / "profile.ncu-rep"
    profile = read_profile(out / "profile.csv")
    assert len(profile.kernels) == FIXTURE_KERNELS
    assert profile.kernels["measured_duration_ns"].notna().all()
    meta = profile.metadata
    assert (meta["workload"], meta["mode"], meta["batch_size"], meta["dtype"]) == (
        "resnet50",
        "infer",
        4,
        "fp32",
    )
    assert meta["source"] == "ncu" and meta["replay_mode"] == "kernel"
    assert meta["torch_version"] == "2.11.0+cu130" and meta["cudnn_version"] == "9.19.0"
    assert meta["ncu_version"] == "2025.3.1.0"
    assert "--clock-control none" in meta["ncu_command"]
    assert f"--export {out / 'profile.ncu-rep'}" in meta["ncu_command"]
    assert "--csv" not in meta["ncu_command"]
    assert meta["tensor_metrics"] == [
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active",
    ]
    # progress: measure, then ncu with the measured kernel count as total and a time estimate
    starts = [value for kind, value in events if kind == "start"]
    assert [phase for phase, _, _ in starts] == ["measure", "ncu", "postprocess"]
    assert starts[1][1] == FIXTURE_KERNELS
    per_kernel = pipeline.SECONDS_PER_KERNEL_ESTIMATE["fast"]  # the default metric set
    assert 459 * per_kernel <= starts[1][2] < 459 * per_kernel + 10  # plus the startup time
    assert [value for kind, value in events if kind == "kernel"][-1] == FIXTURE_KERNELS
    # the run record
    record = json.loads((out / "profile_run.json").read_text())
    assert set(record["timings_s"]) == {
        "measure_s",
        "ncu_s",
        "ncu_import_s",
        "postprocess_s",
        "total_s",
    }
    assert 0 < record["timings_s"]["ncu_import_s"] <= record["timings_s"]["ncu_s"]
    assert record["kernels"]["measured_per_step"] == record["kernels"]["profiled"] == 459
    assert record["kernels"]["ncu_progress_lines"] == FIXTURE_KERNELS
    assert record["match"]["matched"] == FIXTURE_KERNELS
    assert record["measured_steps"]["consistent"] is True
    assert "--pass measure" in record["commands"]["measure"]
    assert record["commands"]["ncu"] == meta["ncu_command"]
    assert "--warmup 10" in record["commands"]["ncu"]
    assert record["commands"]["ncu_import"] == result.commands["ncu_import"]
    assert record["commands"]["ncu_import"].endswith(
        f"--import {out / 'profile.ncu-rep'} --csv --page raw --print-kernel-base mangled "
        "--print-units base"
    )
    assert measure_calls and "--warmup" in measure_calls[0]
    # the fixture holds ncu's demangled names: a quality warning says so
    assert any("demangled spelling" in warning for warning in result.warnings)
    assert result.summary.kernel_count == FIXTURE_KERNELS
    assert result.measured_summary is not None


def test_the_metric_set_reaches_ncu_the_profile_and_the_run_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    estimates: list[float | None] = []

    class Recorder(pipeline.ProgressListener):
        def phase_started(self, phase, *, total=None, estimate_s=None):  # type: ignore[override]
            if phase == "ncu":
                estimates.append(estimate_s)

    spec = WorkloadSpec("resnet50", mode="infer", batch_size=4, dtype="fp32")
    for metric_set in ("fast", "full"):
        out = tmp_path / metric_set
        result = pipeline.profile_workload(spec, out, metric_set=metric_set, progress=Recorder())
        assert result.metric_set == metric_set
        requested = result.commands["ncu"].split("--metrics ", 1)[1].split(" ", 1)[0].split(",")
        assert requested[: len(NCU_METRIC_SETS[metric_set])] == list(NCU_METRIC_SETS[metric_set])
        meta = read_profile(out / "profile.csv").metadata
        assert meta["metric_set"] == metric_set
        # The fake ncu prints the SOL fixture whatever was asked: the source says what happened.
        assert set(meta["throughput_source"].values()) == {"sol"}
        record = json.loads((out / "profile_run.json").read_text())
        assert record["metric_set"] == metric_set
        assert record["throughput_source"] == meta["throughput_source"]
    fast_estimate, full_estimate = estimates
    assert fast_estimate is not None and full_estimate is not None
    per_kernel = pipeline.SECONDS_PER_KERNEL_ESTIMATE
    assert full_estimate - fast_estimate == pytest.approx(
        FIXTURE_KERNELS * (per_kernel["full"] - per_kernel["fast"]), abs=5
    )


def test_estimate_per_metric_set() -> None:
    # Calibrated on whole ResNet-50 runs on an H200: 0.31 s per kernel with the SOL metrics
    # (10 passes), 0.17 s with the fast set's sub-metrics (4 passes).
    assert pipeline.estimate_ncu_seconds(100, "kernel", 5.0, "full") == pytest.approx(36.0)
    assert pipeline.estimate_ncu_seconds(100, "kernel", 5.0, "fast") == pytest.approx(22.0)
    assert pipeline.estimate_ncu_seconds(100, "kernel") == pytest.approx(17.0)  # fast: default
    assert pipeline.estimate_ncu_seconds(100, "application", 5.0, "fast") is None


def test_training_defaults_to_application_replay_and_short_warmup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch, mode="app")
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    totals: list[int | None] = []

    class Recorder(pipeline.ProgressListener):
        def kernel_profiled(self, done, total, name):  # type: ignore[override]
            totals.append(total)

    spec = WorkloadSpec("resnet50", mode="train", batch_size=4, dtype="fp32")
    result = pipeline.profile_workload(spec, tmp_path / "out", progress=Recorder())
    assert result.replay_mode == "application"
    assert "--replay-mode application --app-replay-match grid" in result.commands["ncu"]
    assert "--warmup 3" in result.commands["ncu"]
    assert set(totals) == {None}  # no misleading total under application replay


def test_prerequisites_are_checked_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend_gpu(monkeypatch)
    calls = pretend_measure_pass(monkeypatch)
    monkeypatch.setenv("ORION_NCU", str(tmp_path / "missing-ncu"))
    spec = WorkloadSpec("resnet50", batch_size=4)
    with pytest.raises(OrionError, match=r"Nsight Compute \(ncu\) not found") as caught:
        pipeline.profile_workload(spec, tmp_path / "out")
    assert "ORION_NCU" in (caught.value.hint or "")
    assert calls == [] and not (tmp_path / "out").exists()


def test_counters_not_permitted_stops_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch, counters=False)
    calls = pretend_measure_pass(monkeypatch)
    with pytest.raises(OrionError, match="performance counters") as caught:
        pipeline.profile_workload(WorkloadSpec("resnet50"), tmp_path / "out")
    assert "NVreg_RestrictProfilingToAdminUsers" in (caught.value.hint or "")
    assert calls == []


def test_no_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = pretend_measure_pass(monkeypatch)
    with pytest.raises(OrionError, match="orion profile needs an NVIDIA GPU") as caught:
        pipeline.profile_workload(WorkloadSpec("resnet50"), tmp_path / "out")
    assert "--from-ncu" in (caught.value.hint or "")
    assert calls == []


def test_ctrl_c_during_ncu_leaves_its_log_and_no_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch, mode="sleep")
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)

    class Impatient(pipeline.ProgressListener):
        def kernel_profiled(self, done, total, name):  # type: ignore[override]
            if done == 5:
                raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        pipeline.profile_workload(WorkloadSpec("resnet50", batch_size=4), out, progress=Impatient())
    assert (out / NCU_LOG).read_text().count('==PROF== Profiling "') == 5
    assert not (out / RAW_CSV).exists()
    assert not (out / "profile.csv").exists() and not (out / "profile_run.json").exists()


def test_default_output_folder_is_the_profile_folder_for_this_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    result = pipeline.profile_workload(WorkloadSpec("resnet50", batch_size=4))
    expected = tmp_path / "profiles" / "nvidia-h200" / "resnet50-infer-bs4-fp32" / "profile.csv"
    assert result.profile_path == expected and expected.is_file()


# --- re-processing a saved CSV --------------------------------------------------------------------


def test_profile_from_ncu_on_the_real_fixture(tmp_path: Path) -> None:
    result = pipeline.profile_from_ncu(
        FIXTURE, workload="resnet50", mode="infer", batch_size=4, dtype="fp32", out_dir=tmp_path
    )
    profile = read_profile(tmp_path / "profile.csv")
    assert len(profile.kernels) == result.kernel_count == FIXTURE_KERNELS
    assert profile.metadata["source"] == "ncu-csv"
    assert profile.metadata["gpu_name"] == "NVIDIA H200" and profile.metadata["sm_count"] == 132
    assert profile.metadata["torch_version"] is None  # no software.json beside the fixture
    assert result.match_report is None and result.measured_summary is None
    assert profile.kernels["measured_duration_ns"].isna().all()


def test_profile_from_ncu_uses_the_files_beside_the_csv(tmp_path: Path) -> None:
    raw = tmp_path / "ncu_raw.csv"
    raw.write_text(FIXTURE.read_text())
    medians, _ = fake_measured()
    write_table(medians, tmp_path / "measured.csv")
    (tmp_path / "software.json").write_text(json.dumps({"torch_version": "2.11.0+cu130"}))
    (tmp_path / "profile_run.json").write_text(
        json.dumps({"ncu_version": "2025.3.1.0", "replay_mode": "kernel", "commands": {}})
    )
    result = pipeline.profile_from_ncu(
        raw, workload="resnet50", mode="infer", batch_size=4, dtype="fp32"
    )
    assert result.profile_path == tmp_path / "profile.csv"
    meta = read_profile(result.profile_path).metadata
    assert meta["torch_version"] == "2.11.0+cu130" and meta["ncu_version"] == "2025.3.1.0"
    assert result.match_report is not None and result.match_report.matched == FIXTURE_KERNELS


@pytest.mark.parametrize(
    ("csv_name", "metric_set", "source"),
    [
        ("h200_resnet50_infer_bs4_first80_breakdown.csv", "fast", "sub-metric-max"),
        ("h200_resnet50_infer_bs4_first80_sol.csv", "full", "sol"),
    ],
)
def test_profile_from_ncu_takes_the_metric_set_from_the_csv(
    tmp_path: Path, csv_name: str, metric_set: str, source: str
) -> None:
    raw = tmp_path / "ncu_raw.csv"
    raw.write_text((METRIC_SETS_DATA / csv_name).read_text())
    # A run record saying otherwise does not change what the CSV's columns are.
    other = "full" if metric_set == "fast" else "fast"
    (tmp_path / "profile_run.json").write_text(json.dumps({"metric_set": other}))
    result = pipeline.profile_from_ncu(
        raw, workload="resnet50", mode="infer", batch_size=4, dtype="fp32"
    )
    assert result.kernel_count == 80 and result.metric_set == metric_set
    meta = read_profile(result.profile_path).metadata
    assert meta["metric_set"] == metric_set
    assert set(meta["throughput_source"].values()) == {source}
    assert set(result.profile.kernels["kernel_class"]) == {"compute", "memory"}


def test_profile_from_ncu_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OrionError, match="ncu CSV not found"):
        pipeline.profile_from_ncu(
            tmp_path / "nope.csv", workload="resnet50", mode="infer", batch_size=4, dtype="fp32"
        )
