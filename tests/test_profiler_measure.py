"""The measurement pass: torch.profiler traces -> per-step kernels -> per-position medians;
and the target process's exit codes and silence on stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orion_common.errors import OrionError
from postprocess import MEASURED_COLUMNS
from profiler.measure import (
    MEDIAN_COLUMNS,
    STEP_COLUMNS,
    check_steps,
    kernel_rows_from_trace,
    kernel_times_from_trace,
    median_per_position,
    read_measured,
    steps_table,
    write_table,
)
from profiler.target import EXIT_USAGE, EXIT_WORKLOAD

ROOT = Path(__file__).resolve().parent.parent
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(T1::Params)"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"  # noqa: E501


def _kernel(name: str, ts: float, dur: float, correlation: int, grid=(4, 1, 1), block=(128, 1, 1)):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": correlation, "grid": list(grid), "block": list(block), "stream": 7},
    }


def _trace(*durations: float, names: tuple[str, ...] = (GEMM, RELU)) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 0.5, "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.1, "dur": 2.0},
    ]
    for index, (name, dur) in enumerate(zip(names, durations, strict=True)):
        events.append(_kernel(name, ts=10.0 * (index + 1), dur=dur, correlation=100 + index))
    return {"traceEvents": list(reversed(events))}


def test_trace_gives_kernels_in_launch_order_with_shapes_and_ns() -> None:
    rows = kernel_rows_from_trace(_trace(12.345, 3.5))
    assert [row["demangled_name"] for row in rows] == [GEMM, RELU]  # memset, runtime call dropped
    assert rows[0]["duration_ns"] == pytest.approx(12345.0)
    assert (rows[0]["grid_x"], rows[0]["grid_y"], rows[0]["block_x"]) == (4, 1, 128)
    assert set(rows[0]) == set(MEASURED_COLUMNS)


def test_kernel_times_are_by_start_and_keep_the_graphs_shared_launch_apart() -> None:
    # Two kernel nodes of one graph replay share one launch (correlation): only their start
    # times order them. Memset and runtime records are not kernels.
    trace = _trace(12.0, 3.0)
    trace["traceEvents"] += [_kernel("node_b", ts=40.0, dur=2.0, correlation=7)]
    trace["traceEvents"] += [_kernel("node_a", ts=35.0, dur=4.0, correlation=7)]
    assert kernel_times_from_trace(trace) == [
        (GEMM, 10.0, 12.0),
        (RELU, 20.0, 3.0),
        ("node_a", 35.0, 4.0),
        ("node_b", 40.0, 2.0),
    ]


def test_launch_order_follows_correlation_not_start_time() -> None:
    trace = {
        "traceEvents": [
            _kernel("second", ts=1.0, dur=1.0, correlation=9),  # other stream, started first
            _kernel("first", ts=5.0, dur=1.0, correlation=3),
        ]
    }
    assert [row["demangled_name"] for row in kernel_rows_from_trace(trace)] == ["first", "second"]


def test_kernel_without_launch_shape_is_an_error() -> None:
    event = _kernel("k", 1.0, 1.0, 1)
    del event["args"]["grid"]
    with pytest.raises(OrionError, match="no grid/block"):
        kernel_rows_from_trace({"traceEvents": [event]})


def test_consistent_steps_give_the_median_per_position() -> None:
    steps = steps_table(
        kernel_rows_from_trace(_trace(gemm, relu))
        for gemm, relu in [(10.0, 2.0), (11.0, 2.2), (30.0, 2.1), (12.0, 9.0), (10.5, 2.05)]
    )
    assert list(steps.columns) == list(STEP_COLUMNS)
    medians, consistency = median_per_position(steps)
    assert consistency.consistent and consistency.steps == 5 and consistency.agreeing_steps == 5
    assert list(medians.columns) == list(MEDIAN_COLUMNS)
    assert medians["duration_ns"].tolist() == pytest.approx([11000.0, 2100.0])
    assert medians["order"].tolist() == [0, 1]
    assert (medians["steps_used"] == 5).all()


def test_a_step_with_another_sequence_is_reported_and_left_out() -> None:
    odd = _trace(99.0, 99.0, 99.0, names=(GEMM, "void extra_kernel(float*)", RELU))
    steps = steps_table(
        kernel_rows_from_trace(trace) for trace in [_trace(10.0, 2.0), odd, _trace(12.0, 4.0)]
    )
    medians, consistency = median_per_position(steps)
    assert not consistency.consistent
    assert (consistency.steps, consistency.agreeing_steps) == (3, 2)
    assert consistency.kernels_per_step == (2, 3, 2)
    difference = consistency.first_difference or ""
    assert "step 1" in difference and "extra_kernel" in difference
    assert medians["duration_ns"].tolist() == pytest.approx([11000.0, 3000.0])
    assert (medians["steps_used"] == 2).all()


def test_no_kernels_at_all_is_inconsistent_and_empty() -> None:
    medians, consistency = median_per_position(steps_table([[], []]))
    assert medians.empty and not consistency.consistent


def test_tables_round_trip_names_with_commas_and_hashes(tmp_path: Path) -> None:
    steps = steps_table([kernel_rows_from_trace(_trace(10.0, 2.0))])
    medians, _ = median_per_position(steps)
    write_table(medians, tmp_path / "measured.csv")
    back = read_measured(tmp_path / "measured.csv")
    assert back["demangled_name"].tolist() == [GEMM, RELU]
    assert check_steps(pd.read_csv(tmp_path / "measured.csv").assign(step=0)).consistent


def test_read_measured_names_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("demangled_name,duration_ns\nk,1\n")
    with pytest.raises(OrionError, match="lacks column"):
        read_measured(path)
    with pytest.raises(OrionError, match="not found"):
        read_measured(tmp_path / "absent.csv")


# --- the target process ---------------------------------------------------------------------------


def _run_target(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "profiler.target", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


BASE = ["--mode", "infer", "--batch-size", "2", "--dtype", "fp32", "--warmup", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "resnet50", *BASE, "--pass", "bogus", "--output", "x"], "invalid choice"),
        (["--workload", "resnet50", *BASE], "required"),
        (["--workload", "nope", *BASE, "--pass", "ncu", "--output", "x"], "unknown workload"),
        (
            ["--workload", "resnet50", *BASE, "--pass", "ncu", "--output", "x", "--options", "[1"],
            "not valid JSON",
        ),
    ],
)
def test_target_bad_arguments_exit_2_with_nothing_on_stdout(args: list[str], message: str) -> None:
    result = _run_target(*args)
    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_target_workload_error_exits_3_with_the_message(tmp_path: Path) -> None:
    # synthetic kernels are CUDA-only: building on the CPU fails on every machine.
    result = _run_target(
        "--workload",
        "synthetic-memory",
        *BASE,
        "--device",
        "cpu",
        "--pass",
        "measure",
        "--output",
        str(tmp_path / "measured.csv"),
    )
    assert result.returncode == EXIT_WORKLOAD
    assert result.stdout == ""
    assert "error: workload 'synthetic-memory' cannot run on device 'cpu'" in result.stderr
    assert not (tmp_path / "measured.csv").exists()
