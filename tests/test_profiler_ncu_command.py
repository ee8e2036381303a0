"""The ncu command lines orion builds (profiling run and report import), and how it reads ncu's
progress lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orion_common.errors import OrionError
from postprocess import NCU_METRIC_SETS, OPTIONAL_TENSOR_METRIC_BASES, TENSOR_PIPE_SUFFIX
from postprocess.metrics import (
    COMPUTE_SOL_METRIC,
    COMPUTE_SOL_SUBMETRICS,
    ELAPSED_PCT_SUFFIX,
    MEMORY_SOL_METRIC,
    MEMORY_SOL_SUBMETRICS,
)
from profiler.ncu_runner import (
    _ProgressCounter,
    build_import_command,
    build_ncu_command,
    check_metric_set,
    default_replay_mode,
    default_warmup,
    export_path,
    metric_names,
    ncu_metrics,
    parse_progress_line,
    target_command,
)

DATA = Path(__file__).parent / "data" / "profiler"
GMMA = "sm__pipe_tensor_op_gmma_cycles_active" + TENSOR_PIPE_SUFFIX
FAST = NCU_METRIC_SETS["fast"]  # the default metric set
REPORT = "/tmp/out/profile.ncu-rep"


def _target(mode: str = "infer") -> list[str]:
    return target_command(
        workload="resnet50",
        mode=mode,
        batch_size=4,
        dtype="fp32",
        options=None,
        warmup=default_warmup(mode),
        pass_="ncu",
        output="/tmp/out/software.json",
    )


def _option(command: list[str], name: str) -> str:
    assert command.count(name) == 1, f"{name} given {command.count(name)} times"
    return command[command.index(name) + 1]


def _ncu_part(command: list[str]) -> list[str]:
    return command[: command.index(sys.executable)]


def _build(
    target: list[str], replay_mode: str = "kernel", metrics: list[str] | None = None
) -> list[str]:
    return build_ncu_command(
        "ncu", target, replay_mode=replay_mode, metrics=metrics or ncu_metrics(), report=REPORT
    )


def test_profiling_run_exports_a_report_keeps_clocks_and_profiles_one_range() -> None:
    command = build_ncu_command(
        "/opt/ncu", _target(), replay_mode="kernel", metrics=ncu_metrics([GMMA]), report=REPORT
    )
    ncu_part = _ncu_part(command)
    assert command[0] == "/opt/ncu"
    assert _option(ncu_part, "--export") == REPORT
    assert "--force-overwrite" in ncu_part
    assert _option(ncu_part, "--clock-control") == "none"
    assert _option(ncu_part, "--profile-from-start") == "off"
    assert _option(ncu_part, "--metrics").split(",") == [*FAST, GMMA]
    # in CSV mode ncu prints no per-kernel progress lines: the profiling run must not use it
    for csv_only in ("--csv", "--page", "--print-kernel-base", "--print-units"):
        assert csv_only not in ncu_part, csv_only
    assert export_path(command) == Path(REPORT)


def test_import_converts_the_report_to_raw_csv_with_mangled_names_and_base_units() -> None:
    command = build_import_command("/opt/ncu", REPORT)
    assert command[0] == "/opt/ncu"
    assert _option(command, "--import") == REPORT
    assert "--csv" in command
    assert _option(command, "--page") == "raw"
    assert _option(command, "--print-kernel-base") == "mangled"
    assert _option(command, "--print-units") == "base"
    assert "--export" not in command and "--metrics" not in command


def test_export_path_needs_an_export_option() -> None:
    with pytest.raises(ValueError, match="--export"):
        export_path(build_import_command("ncu", REPORT))


def test_target_follows_ncu_options_unchanged() -> None:
    target = _target()
    command = _build(target)
    assert command[-len(target) :] == target
    assert target[:3] == [sys.executable, "-m", "profiler.target"]
    assert _option(target, "--pass") == "ncu"
    assert _option(target, "--warmup") == "10"


@pytest.mark.parametrize(
    ("mode", "replay", "warmup", "app_match"),
    [("infer", "kernel", 10, None), ("train", "application", 3, "grid")],
)
def test_replay_and_warmup_defaults_per_mode(
    mode: str, replay: str, warmup: int, app_match: str | None
) -> None:
    assert default_replay_mode(mode) == replay
    assert default_warmup(mode) == warmup
    command = _build(_target(mode), replay)
    assert _option(command, "--replay-mode") == replay
    if app_match is None:
        assert "--app-replay-match" not in command
    else:
        assert _option(command, "--app-replay-match") == app_match


def test_unknown_replay_mode_is_refused() -> None:
    with pytest.raises(OrionError, match="unknown replay mode 'range'"):
        _build(_target(), "range")


def test_metrics_are_required_ones_then_tensor_ones_without_duplicates() -> None:
    assert ncu_metrics() == list(FAST)
    assert ncu_metrics([GMMA, GMMA]) == [*FAST, GMMA]


@pytest.mark.parametrize("metric_set", ["fast", "full"])
def test_metric_set_decides_how_the_throughputs_are_requested(metric_set: str) -> None:
    metrics = ncu_metrics([GMMA], metric_set)
    command = _build(_target(), metrics=metrics)
    requested = _option(_ncu_part(command), "--metrics").split(",")
    assert requested == [*NCU_METRIC_SETS[metric_set], GMMA]
    sol = {COMPUTE_SOL_METRIC, MEMORY_SOL_METRIC}
    sub_metrics = {
        base + ELAPSED_PCT_SUFFIX for base in COMPUTE_SOL_SUBMETRICS + MEMORY_SOL_SUBMETRICS
    }
    launch = {"gpu__time_duration.sum", "launch__grid_size", "launch__occupancy_limit_warps"}
    assert launch <= set(requested)
    if metric_set == "fast":
        assert not sol & set(requested)  # no SOL metric: it would cost 10 passes
        assert sub_metrics <= set(requested)
    else:
        assert sol <= set(requested)
        assert not sub_metrics & set(requested)


def test_unknown_metric_set_is_refused() -> None:
    with pytest.raises(OrionError, match="unknown metric set 'exact'") as caught:
        ncu_metrics(metric_set="exact")
    assert "full" in (caught.value.hint or "")
    assert check_metric_set("full") == "full"


def test_target_command_carries_options_as_json() -> None:
    command = target_command(
        workload="synthetic-memory",
        mode="train",
        batch_size=2,
        dtype="bf16",
        options={"mib": 16, "grid": 264},
        warmup=3,
        pass_="measure",
        output="m.csv",
        steps=5,
        steps_output="s.csv",
    )
    assert json.loads(_option(command, "--options")) == {"grid": 264, "mib": 16}
    assert _option(command, "--steps") == "5"
    assert _option(command, "--steps-output") == "s.csv"


def test_query_metrics_output_gives_base_names() -> None:
    text = (DATA / "fake_ncu.py").read_text()
    query = text.split('QUERY_OUTPUT = """\\\n', 1)[1].split('"""', 1)[0]
    names = metric_names(query)
    assert "sm__pipe_tensor_op_gmma_cycles_active" in names
    assert "Metric" not in names and not any(name.startswith("--") for name in names)
    kept = [base for base in OPTIONAL_TENSOR_METRIC_BASES if base in names]
    assert kept == ["sm__pipe_tensor_op_gmma_cycles_active", "sm__pipe_shared_cycles_active"]


# --- progress lines -------------------------------------------------------------------------------


def test_progress_lines_in_ncu_format() -> None:
    event = parse_progress_line(
        '==PROF== Profiling "_ZN2at6native29vectorized_el..." - 12: 0%....50%....100% - 9 passes\n'
    )
    assert event is not None and event.kind == "kernel"
    assert (event.index, event.name) == (12, "_ZN2at6native29vectorized_el...")
    older = parse_progress_line('==PROF== Profiling "add_kernel": 0%....50%....100% - 18 passes')
    assert older is not None and (older.index, older.name) == (None, "add_kernel")
    connected = parse_progress_line("==PROF== Connected to process 531 (/usr/bin/python3.12)")
    assert connected is not None and connected.kind == "connected"
    for other in (
        "==PROF== Disconnected from process 531",
        "==WARNING== Note: Running with unmodified GPU clocks.",
        "....50%....100% - 9 passes",
        '"ID","Process ID","Process Name"',
    ):
        assert parse_progress_line(other) is None


def test_progress_fixture_counts_each_kernel_once() -> None:
    calls: list[tuple[int, int | None, str]] = []
    passes: list[int] = []
    counter = _ProgressCounter(5, lambda d, t, n: calls.append((d, t, n)), passes.append)
    for line in (DATA / "ncu_progress_kernel_replay.txt").read_text().splitlines(keepends=True):
        counter.feed(line)
    assert [done for done, _, _ in calls] == [1, 2, 3, 4, 5]
    assert {total for _, total, _ in calls} == {5}
    assert calls[1][2] == "cudnn_infer_ampere_scudnn_wi..."
    assert passes == [1]
    assert (counter.lines, counter.most_in_a_pass, counter.passes) == (5, 5, 1)


def test_application_replay_counts_restart_per_pass() -> None:
    calls: list[int] = []
    counter = _ProgressCounter(None, lambda d, t, n: calls.append(d), None)
    for _ in range(2):
        counter.feed("==PROF== Connected to process 7 (/usr/bin/python3.12)")
        for index in range(3):
            counter.feed(f'==PROF== Profiling "k" - {index}: 0%....50%....100% - 1 pass')
    assert calls == [1, 2, 3, 1, 2, 3]
    assert (counter.passes, counter.most_in_a_pass) == (2, 3)
