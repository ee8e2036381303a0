"""Occupancy: computed limits reproduce ncu's on every fixture kernel and follow the GPU."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from postprocess.ncu_csv import DeviceLimits, read_ncu_raw_csv
from postprocess.occupancy import (
    LIMIT_COLUMNS,
    blocks_per_sm,
    computed_occupancy_limits,
    occupancy_columns,
)

RAW = Path(__file__).parent / "data" / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"


@pytest.fixture(scope="module")
def trace():
    return read_ncu_raw_csv(RAW)


def _mismatches(kernels: pd.DataFrame, computed: pd.Series, column: str) -> pd.DataFrame:
    reported = kernels[column].astype("float64")
    wrong = computed != reported
    return kernels.loc[wrong, ["demangled_name", column]].assign(computed=computed[wrong])


@pytest.mark.parametrize("limit", ["registers", "warps", "blocks"])
def test_computed_limits_equal_ncus_for_every_kernel(trace, limit: str) -> None:
    computed = computed_occupancy_limits(trace.kernels, trace.device)
    column = LIMIT_COLUMNS[limit]
    assert _mismatches(trace.kernels, computed[column], column).empty
    assert len(trace.kernels) == 459


def test_computed_shared_memory_limit_equals_ncus_with_the_drivers_carveout(trace) -> None:
    # ncu computes this limit against the carveout the driver chose for the launch
    # (launch__shared_mem_config_size: 16 KiB ... 228 KiB here), not the device maximum.
    kernels = trace.kernels
    computed = computed_occupancy_limits(
        kernels, trace.device, shared_memory_per_sm_bytes=kernels["shared_memory_config_bytes"]
    )
    column = LIMIT_COLUMNS["shared_memory"]
    assert _mismatches(kernels, computed[column], column).empty


def test_blocks_per_sm_from_device_limits_alone_equals_ncus(trace) -> None:
    # With the largest carveout as the budget the shared-memory limit itself can be higher than
    # ncu's (e.g. 32 KiB carveout: 32 blocks of 1 KiB), but the driver only picks a smaller
    # carveout when that does not lower occupancy, so the minimum of the four limits agrees.
    kernels = trace.kernels
    reported = kernels[list(LIMIT_COLUMNS.values())].astype("float64").min(axis=1)
    computed = computed_occupancy_limits(kernels, trace.device).min(axis=1)
    assert (computed == reported).all()


def test_missing_ncu_limits_fall_back_to_computed_ones(trace) -> None:
    kernels = trace.kernels.copy()
    expected = occupancy_columns(kernels, trace.device)
    for column in LIMIT_COLUMNS.values():
        kernels[column] = pd.array([pd.NA] * len(kernels), dtype="Int64")
    pd.testing.assert_frame_equal(occupancy_columns(kernels, trace.device), expected)


def test_waves_equal_ncus_own_waves_per_sm(trace) -> None:
    # ncu prints launch__waves_per_multiprocessor rounded to 2 decimals; read it independently.
    raw = pd.read_csv(RAW, skiprows=3, dtype=str, keep_default_na=False).iloc[1:]
    ncu_waves = raw["launch__waves_per_multiprocessor"].astype(float).to_numpy()
    ours = occupancy_columns(trace.kernels, trace.device)["waves"].to_numpy()
    assert abs(ours - ncu_waves).max() <= 0.005 + 1e-9


def test_limits_follow_the_gpu_not_constants(trace) -> None:
    # A Turing-class GPU (CC 7.5): 40 SMs, 1024 threads / 32 warps / 16 blocks per SM,
    # 64 KiB shared memory, no reserved shared memory per block.
    turing = DeviceLimits(
        name="Tesla T4",
        sm_count=40,
        compute_capability="7.5",
        max_threads_per_sm=1024,
        max_blocks_per_sm=16,
        max_registers_per_sm=65536,
        max_shared_memory_per_sm_bytes=65536,
        max_warps_per_sm=32,
        reserved_shared_memory_per_block_bytes=0,
    )
    kernel = trace.kernels.iloc[[229]].copy()  # cuBLAS gemmSN_TN_kernel, 128 threads
    assert kernel["demangled_name"].iloc[0].startswith("void gemmSN_TN_kernel<float, 128,")
    limits = computed_occupancy_limits(kernel, turing).iloc[0]
    # warps/block = ceil(128/32) = 4
    # registers: 96/thread (multiple of 8) * 32 = 3072/warp; 65536 // 3072 = 21 warps; 21 // 4 = 5
    assert limits[LIMIT_COLUMNS["registers"]] == 5
    # shared memory: 6144 static + 0 dynamic + 0 reserved = 6144 (multiple of 128); 65536 // 6144
    assert limits[LIMIT_COLUMNS["shared_memory"]] == 10
    assert limits[LIMIT_COLUMNS["warps"]] == 8  # 32 // 4
    assert limits[LIMIT_COLUMNS["blocks"]] == 16
    for column in LIMIT_COLUMNS.values():
        kernel[column] = pd.array([pd.NA], dtype="Int64")
    assert blocks_per_sm(kernel, turing).iloc[0] == 5
    columns = occupancy_columns(kernel, turing).iloc[0]
    assert columns["sm_needed"] == 25  # ceil(125 / 5) = 25 <= 40
    assert columns["waves"] == pytest.approx(125 / (5 * 40))


def test_register_rounding_to_allocation_units(trace) -> None:
    device = trace.device
    kernel = trace.kernels.iloc[[0]].copy()  # 256 threads = 8 warps/block
    for registers, expected in [(44, 5), (40, 6), (33, 6), (32, 8), (24, 10), (0, None)]:
        kernel["registers_per_thread"] = pd.array([registers], dtype="Int64")
        value = computed_occupancy_limits(kernel, device)[LIMIT_COLUMNS["registers"]].iloc[0]
        # 44 -> 48*32 = 1536/warp -> 42 warps -> 5 blocks; 40 -> 1280 -> 51 -> 6;
        # 33 -> 40 -> 6; 32 -> 1024 -> 64 -> 8; 24 -> 768 -> 85 -> 10; 0 -> no register limit
        if expected is None:
            assert pd.isna(value)
        else:
            assert value == expected
