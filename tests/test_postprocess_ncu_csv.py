"""Reading ncu's raw CSV: the real H200 fixture, each of ncu's quirks, and each user error."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import pytest

from orion_common.errors import OrionError
from postprocess.demangle import demangle, demangler_available
from postprocess.metrics import (
    METRICS,
    NCU_METRIC_SETS,
    OPTIONAL_TENSOR_METRIC_BASES,
    TENSOR_PIPE_SUFFIX,
)
from postprocess.ncu_csv import KERNEL_COLUMNS, read_ncu_raw_csv

DATA = Path(__file__).parent / "data" / "ncu"
RAW = DATA / "h200_resnet50_infer_bs4_x2_raw.csv"
FULLSET = DATA / "h200_resnet50_infer_bs4_first3_fullset.csv"

# A real mangled kernel: PyTorch's clamp (ReLU) kernel, a lambda in an anonymous namespace.
MANGLED_CLAMP = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_12_GLOBAL__N_119launch_clamp_scalar"
    "ERNS_18TensorIteratorBaseEN3c106ScalarES6_NS0_6detail11ClampLimitsEENKUlvE_clEvENKUlvE5_clEv"
    "EUlfE_St5arrayIPcLm2EEEEviT0_T1_"
)


def _fixture_parts() -> tuple[list[str], list[str], list[str], list[list[str]]]:
    """(ncu's leading lines, header, units row, kernel rows) of the real raw CSV."""
    lines = RAW.read_text().splitlines()
    records = list(csv.reader(lines[3:]))
    return lines[:3], records[0], records[1], records[2:]


def _write(
    path: Path,
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    units: Sequence[str] | None = None,
    prefix: Iterable[str] = (),
) -> Path:
    buffer = io.StringIO()
    for line in prefix:
        buffer.write(line + "\n")
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(header)
    if units is not None:
        writer.writerow(units)
    writer.writerows(rows)
    path.write_text(buffer.getvalue())
    return path


def _small_csv(tmp_path: Path, n_rows: int = 3, edit=None, drop: Sequence[str] = ()) -> Path:
    """The first ``n_rows`` kernels of the real file, optionally edited or with columns dropped.

    ``edit(header, units, rows)`` may change the lists in place.
    """
    prefix, header, units, rows = _fixture_parts()
    rows = [list(row) for row in rows[:n_rows]]
    header, units = list(header), list(units)
    if edit is not None:
        edit(header, units, rows)
    keep = [i for i, name in enumerate(header) if name not in drop]
    return _write(
        tmp_path / "small.csv",
        [header[i] for i in keep],
        [[row[i] for i in keep] for row in rows],
        units=[units[i] for i in keep],
        prefix=prefix,
    )


def _set(header: list[str], rows: list[list[str]], column: str, row: int, value: str) -> None:
    rows[row][header.index(column)] = value


# --- the real fixture -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace():
    return read_ncu_raw_csv(RAW)


def test_reads_every_kernel_of_the_fixture(trace) -> None:
    # The shared README says 460 kernels (230 per pass); the file holds 459 rows with ncu IDs
    # 0..458: torch.randn's kernel, then two identical forward passes of 229 kernels each.
    kernels = trace.kernels
    assert len(kernels) == 459
    assert kernels["ncu_id"].tolist() == list(range(459))
    assert list(kernels.columns) == list(KERNEL_COLUMNS)
    assert kernels.dtypes.astype(str).to_dict() == {k: str(v) for k, v in KERNEL_COLUMNS.items()}
    identity = ["kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    first_pass = kernels.loc[1:229, identity].reset_index(drop=True)
    second_pass = kernels.loc[230:458, identity].reset_index(drop=True)
    pd.testing.assert_frame_equal(first_pass, second_pass)


def test_reads_device_limits(trace) -> None:
    device = trace.device
    assert device.name == "NVIDIA H200"
    assert device.sm_count == 132
    assert device.compute_capability == "9.0"
    assert device.max_threads_per_sm == 2048
    assert device.max_blocks_per_sm == 32
    assert device.max_registers_per_sm == 65536  # "65,536" in the file
    assert device.max_shared_memory_per_sm_bytes == 233472  # "233,472"
    assert device.max_warps_per_sm == 64
    assert device.warp_size == 32
    assert device.reserved_shared_memory_per_block_bytes == 1024
    assert device.to_metadata() == {
        "max_threads_per_sm": 2048,
        "max_blocks_per_sm": 32,
        "max_registers_per_sm": 65536,
        "max_shared_memory_per_sm_bytes": 233472,
        "max_warps_per_sm": 64,
    }


def test_first_kernel_values_and_units(trace) -> None:
    first = trace.kernels.iloc[0]
    assert first["demangled_name"].startswith(
        "void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4,"
    )
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == (1056, 1, 1)  # "(1056, 1, 1)"
    assert (first["block_x"], first["block_y"], first["block_z"]) == (256, 1, 1)
    assert first["grid_blocks"] == 1056  # "1,056"
    assert first["duration_ns"] == 5920.0  # "5,920" ns
    assert first["compute_throughput_pct"] == 48.96
    assert first["memory_throughput_pct"] == 8.62
    assert first["registers_per_thread"] == 44
    assert first["shared_memory_config_bytes"] == 32768  # "32,768"
    assert pd.isna(first["tensor_pipe_pct"])  # not requested in this run


def test_quoted_names_with_commas_stay_whole(trace) -> None:
    assert trace.kernels.loc[1, "kernel_name"] == (
        "void engines_precompiled::nchwToNhwcKernel<float, float, float, 0, 1, 2>"
        "(engines_precompiled::nchw2nhwc_params_t<T3>, const T1 *, T2 *)"
    )
    # ncu printed demangled names, so the identity name and the readable one are the same.
    assert (trace.kernels["kernel_name"] == trace.kernels["demangled_name"]).all()


# --- the declared mapping -----------------------------------------------------------------------


def test_required_metrics_are_what_the_profiler_must_request() -> None:
    # The full set: today's SOL-based request (the fast set is tested in test_postprocess_fast).
    full = NCU_METRIC_SETS["full"]
    assert set(full) == {
        "gpu__time_duration.sum",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "launch__grid_size",
        "launch__block_size",
        "launch__registers_per_thread",
        "launch__occupancy_limit_registers",
        "launch__occupancy_limit_shared_mem",
        "launch__occupancy_limit_warps",
        "launch__occupancy_limit_blocks",
        "launch__shared_mem_per_block_static",
        "launch__shared_mem_per_block_dynamic",
    }
    assert len(full) == 12
    assert OPTIONAL_TENSOR_METRIC_BASES == (
        "sm__pipe_tensor_op_hmma_cycles_active",
        "sm__pipe_tensor_op_gmma_cycles_active",
        "sm__pipe_tensor_cycles_active",
        "sm__pipe_fp16_cycles_active",
        "sm__pipe_shared_cycles_active",
    )
    tensor_specs = [spec for spec in METRICS if spec.tensor_pipe]
    assert [spec.ncu_name for spec in tensor_specs] == [
        base + TENSOR_PIPE_SUFFIX for base in OPTIONAL_TENSOR_METRIC_BASES
    ]
    columns = [column for spec in METRICS for column in spec.columns]
    assert len(columns) == len(set(columns))


# --- quirks -------------------------------------------------------------------------------------


def test_skips_anything_before_the_header_and_blank_lines(tmp_path: Path) -> None:
    _, header, units, rows = _fixture_parts()
    noise = [
        "",
        "==PROF== Connected to process 42 (/usr/bin/python3.12)",
        "epoch 1, loss 0.3 (the application's own stdout, with a comma)",
        "==WARNING== Note: Running with unmodified GPU clocks.",
        "",
    ]
    path = _write(tmp_path / "noisy.csv", header, rows[:4], units=units, prefix=noise)
    text = path.read_text().replace('"\n"0",', '"\n\n"0",')  # a blank line after the units row
    path.write_text(text + "\n==PROF== Disconnected from process 42\n\n")
    kernels = read_ncu_raw_csv(path).kernels
    assert kernels["ncu_id"].tolist() == [0, 1, 2, 3]


def test_units_row_is_optional(tmp_path: Path) -> None:
    _, header, _, rows = _fixture_parts()
    path = _write(tmp_path / "no_units.csv", header, rows[:2])
    kernels = read_ncu_raw_csv(path).kernels
    assert kernels["duration_ns"].tolist() == [5920.0, 10624.0]


def test_thousands_separators_in_any_number(tmp_path: Path) -> None:
    def edit(header, units, rows):
        _set(header, rows, "gpu__time_duration.sum", 0, "3,186,486,486.49")
        _set(header, rows, "launch__registers_per_thread", 1, "1,024")

    kernels = read_ncu_raw_csv(_small_csv(tmp_path, edit=edit)).kernels
    assert kernels.loc[0, "duration_ns"] == 3186486486.49
    assert kernels.loc[1, "registers_per_thread"] == 1024


def test_missing_values_become_nan_and_the_kernel_still_loads(tmp_path: Path) -> None:
    def edit(header, units, rows):
        _set(header, rows, "sm__throughput.avg.pct_of_peak_sustained_elapsed", 0, "n/a")
        _set(
            header, rows, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", 1, ""
        )
        _set(header, rows, "launch__occupancy_limit_registers", 2, "N/A")
        _set(header, rows, "gpu__time_duration.sum", 2, "(!) not a number")

    kernels = read_ncu_raw_csv(_small_csv(tmp_path, edit=edit)).kernels
    assert len(kernels) == 3
    assert math.isnan(kernels.loc[0, "compute_throughput_pct"])
    assert math.isnan(kernels.loc[1, "memory_throughput_pct"])
    assert pd.isna(kernels.loc[2, "occupancy_limit_registers"])
    assert math.isnan(kernels.loc[2, "duration_ns"])
    assert kernels.loc[0, "memory_throughput_pct"] == 8.62  # the rest of the row is intact


def test_time_in_other_units_is_converted_to_ns(tmp_path: Path) -> None:
    def edit(header, units, rows):
        units[header.index("gpu__time_duration.sum")] = "usecond"
        for row in rows:
            row[header.index("gpu__time_duration.sum")] = "5.92"

    kernels = read_ncu_raw_csv(_small_csv(tmp_path, edit=edit)).kernels
    assert kernels["duration_ns"].round(6).tolist() == [5920.0] * 3


def test_scaled_byte_units_are_refused(tmp_path: Path) -> None:
    def edit(header, units, rows):
        units[header.index("launch__shared_mem_per_block_dynamic")] = "Kbyte/block"

    with pytest.raises(OrionError) as error:
        read_ncu_raw_csv(_small_csv(tmp_path, edit=edit))
    assert "launch__shared_mem_per_block_dynamic" in error.value.message
    assert "--print-units base" in error.value.hint


def test_tensor_pipe_is_the_max_of_the_candidates_ncu_reported(tmp_path: Path) -> None:
    hmma = "sm__pipe_tensor_op_hmma_cycles_active" + TENSOR_PIPE_SUFFIX
    gmma = "sm__pipe_tensor_op_gmma_cycles_active" + TENSOR_PIPE_SUFFIX

    def edit(header, units, rows):
        header += [hmma, gmma]
        units += ["%", "%"]
        for row, values in zip(rows, [("12.5", "40.25"), ("n/a", "3"), ("n/a", "")], strict=True):
            row += values

    kernels = read_ncu_raw_csv(_small_csv(tmp_path, edit=edit)).kernels
    assert kernels.loc[0, "tensor_pipe_pct"] == 40.25
    assert kernels.loc[1, "tensor_pipe_pct"] == 3.0
    assert pd.isna(kernels.loc[2, "tensor_pipe_pct"])
    assert kernels.loc[0, "pipe_tensor_op_hmma_pct"] == 12.5
    assert kernels["pipe_fp16_pct"].isna().all()  # absent candidates are empty columns


@pytest.mark.skipif(not demangler_available(), reason="libstdc++ not loadable")
def test_mangled_names_keep_identity_and_get_demangled(tmp_path: Path) -> None:
    def edit(header, units, rows):
        _set(header, rows, "Kernel Name", 0, MANGLED_CLAMP)

    kernels = read_ncu_raw_csv(_small_csv(tmp_path, edit=edit)).kernels
    assert kernels.loc[0, "kernel_name"] == MANGLED_CLAMP
    assert kernels.loc[0, "demangled_name"].startswith(
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
        "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}"
    )
    assert kernels.loc[1, "demangled_name"] == kernels.loc[1, "kernel_name"]


def test_demangle_passes_through_what_it_cannot_demangle() -> None:
    assert demangle("sm80_xmma_fprop_implicit_gemm") == "sm80_xmma_fprop_implicit_gemm"
    assert demangle("_Znot_really_mangled") == "_Znot_really_mangled"
    if demangler_available():
        assert demangle("_Z6kernelPfi") == "kernel(float*, int)"


def test_compute_capability_falls_back_to_the_cc_column(tmp_path: Path) -> None:
    path = _small_csv(
        tmp_path,
        drop=(
            "device__attribute_compute_capability_major",
            "device__attribute_compute_capability_minor",
        ),
    )
    assert read_ncu_raw_csv(path).device.compute_capability == "9.0"


# --- errors -------------------------------------------------------------------------------------


def _error(path: Path) -> OrionError:
    with pytest.raises(OrionError) as caught:
        read_ncu_raw_csv(path)
    assert "\n" not in caught.value.message  # one clear line
    return caught.value


def test_missing_file(tmp_path: Path) -> None:
    error = _error(tmp_path / "nope.csv")
    assert "not found" in error.message
    assert "nope.csv" in error.message


def test_not_an_ncu_csv(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("name,value\na,1\n")
    error = _error(path)
    assert "not an ncu raw CSV" in error.message
    assert "--page raw" in error.hint


def test_details_page_is_refused_with_a_hint_to_use_the_raw_page() -> None:
    error = _error(FULLSET)
    assert "details page" in error.message
    assert "--csv --page raw" in error.hint


def test_missing_required_metric_is_named_with_the_flag_to_add(tmp_path: Path) -> None:
    metric = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    error = _error(_small_csv(tmp_path, drop=(metric,)))
    assert metric in error.message
    assert f"--metrics {metric}" in error.hint


def test_header_without_kernels_means_an_empty_profiled_range(tmp_path: Path) -> None:
    prefix, header, units, _ = _fixture_parts()
    path = _write(tmp_path / "empty.csv", header, [], units=units, prefix=prefix)
    error = _error(path)
    assert "no kernel rows" in error.message
    assert "contained no kernels" in error.message


def test_counter_permission_error_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "perm.csv"
    path.write_text(
        "==PROF== Connected to process 1234 (/usr/bin/python3.12)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0. For instructions on enabling permissions "
        "and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
        "==PROF== Disconnected from process 1234\n"
        "==WARNING== No kernels were profiled.\n"
    )
    error = _error(path)
    assert "ERR_NVGPUCTRPERM" in error.message
    assert "permission" in error.message
    assert "root" in error.hint
    assert "NVreg_RestrictProfilingToAdminUsers=0" in error.hint


def test_other_ncu_error_without_a_table_is_quoted(tmp_path: Path) -> None:
    path = tmp_path / "failed.csv"
    path.write_text("==ERROR== The application returned an error code (1).\n")
    assert "The application returned an error code (1)" in _error(path).message


def test_truncated_row_is_reported(tmp_path: Path) -> None:
    path = _small_csv(tmp_path)
    text = path.read_text().rstrip("\n")
    path.write_text(text[: len(text) - 200] + "\n")
    error = _error(path)
    assert "kernel row 3" in error.message


def test_kernels_from_two_gpus_are_refused(tmp_path: Path) -> None:
    def edit(header, units, rows):
        _set(header, rows, "device__attribute_display_name", 1, "NVIDIA H100 80GB HBM3")

    error = _error(_small_csv(tmp_path, edit=edit))
    assert "more than one GPU" in error.message
    assert "CUDA_VISIBLE_DEVICES" in error.hint
