"""Building a profile: hand-checked kernels, duration matching, and the per-identity table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orion_common.errors import OrionError
from postprocess.build import (
    attach_measured_durations,
    build_profile,
    kernel_base_name,
    kernel_identity_table,
)
from postprocess.ncu_csv import read_ncu_raw_csv
from postprocess.profile_format import PROFILE_COLUMNS, Profile

RAW = Path(__file__).parent / "data" / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"
METADATA = {"workload": "resnet50", "mode": "infer", "batch_size": 4, "dtype": "fp32"}


@pytest.fixture(scope="module")
def trace():
    return read_ncu_raw_csv(RAW)


@pytest.fixture(scope="module")
def profile(trace) -> Profile:
    return build_profile(trace, METADATA)


# Each row worked out by hand from the raw CSV (132 SMs on the H200).
HAND_CHECKED = [
    pytest.param(
        0,
        "void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4,",
        # grid 1056, 256 threads; limits reg 5 smem 32 warps 8 blocks 32 -> 5 blocks/SM
        5,
        # ceil(1056/5) = 212 > 132 -> 132 SMs; more than one wave
        132,
        1056 / (5 * 132),  # 1.6 waves
        "compute",  # sm 48.96 >= memory 8.62
        5920.0,  # "5,920"
        id="elementwise-randn-multi-wave",
    ),
    pytest.param(
        6,
        "void at::vectorized_elementwise_kernel<4, at::<unnamed>::launch_clamp_scalar(",
        # ReLU: grid 3136, 128 threads; limits reg 16 smem 32 warps 16 blocks 32 -> 16
        16,
        132,  # ceil(3136/16) = 196 > 132
        3136 / (16 * 132),  # 1.48 waves
        "memory",  # sm 17.05 < memory 39.28
        7712.0,
        id="elementwise-relu",
    ),
    pytest.param(
        3,
        "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc",
        # cuDNN conv1: grid (2,392,1) = 784, 128 threads, 124 regs;
        # limits reg 4 smem 12 warps 16 blocks 32 -> 4
        4,
        132,  # ceil(784/4) = 196 > 132
        784 / (4 * 132),
        "memory",  # sm 41.24 < memory 48.90 (TF32 tensor work, no tensor-pipe metric collected)
        31200.0,
        id="cudnn-conv",
    ),
    pytest.param(
        7,
        "void at::<unnamed>::max_pool_forward_nchw<float, int>(",
        # grid 3136, 256 threads; limits reg 10 smem 32 warps 8 blocks 32 -> 8
        8,
        132,  # ceil(3136/8) = 392 > 132
        3136 / (8 * 132),  # 2.97 waves
        "compute",  # sm 67.30 >= memory 18.94
        15776.0,
        id="max-pool",
    ),
    pytest.param(
        13,
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32",
        # grid (1,98,1) = 98, 122,880 B dynamic smem: (122880 + 1024) fits once in the 233,472 B
        # carveout; limits reg 3 smem 1 warps 16 blocks 32 -> 1 (shared-memory bound)
        1,
        98,  # ceil(98/1) = 98 <= 132
        98 / 132,
        "memory",  # sm 22.55 < memory 29.79
        12512.0,
        id="cudnn-conv-smem-bound",
    ),
    pytest.param(
        191,
        "void at::vectorized_elementwise_kernel<4, at::<unnamed>::launch_clamp_scalar(",
        # ReLU on the last stage: grid 98, 128 threads -> 16 blocks/SM as above
        16,
        7,  # ceil(98/16) = 7: a small-grid kernel leaving 125 SMs free
        98 / (16 * 132),
        "memory",  # sm 1.99 < memory 5.10
        2400.0,
        id="small-grid-relu",
    ),
    pytest.param(
        228,
        "void at::reduce_kernel<512, 1, at::ReduceOp<float, at::MeanOps<float, float, float,",
        # adaptive average pool as a mean reduction: grid 512, block (32,16,1) = 512 threads;
        # limits reg 4 smem 14 warps 4 blocks 32 -> 4
        4,
        128,  # ceil(512/4) = 128 <= 132
        512 / (4 * 132),
        "compute",  # sm 36.63 >= memory 7.61
        4704.0,
        id="reduction",
    ),
    pytest.param(
        229,
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, 1, cublasGemvTensorStridedBatched",
        # cuBLAS GEMV for the fc layer: grid 125, 128 threads, 96 regs, 6,144 B static smem;
        # limits reg 5 smem 14 warps 16 blocks 32 -> 5
        5,
        25,  # ceil(125/5) = 25
        125 / (5 * 132),
        "memory",  # sm 8.80 < memory 18.30
        12800.0,
        id="cublas-gemv",
    ),
    pytest.param(
        51,
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32",
        # Hopper cluster kernel (cluster of 2): grid 98, 384 threads, 231,424 B dynamic smem;
        # limits reg 1 smem 1 warps 5 blocks 32 -> 1
        1,
        98,
        98 / 132,
        "memory",  # sm 16.95 < memory 25.86
        10976.0,
        id="cudnn-conv-cluster",
    ),
]


@pytest.mark.parametrize(
    ("order", "name_prefix", "per_sm", "needed", "wave_count", "kernel_class", "duration"),
    HAND_CHECKED,
)
def test_hand_checked_kernels(
    profile: Profile,
    order: int,
    name_prefix: str,
    per_sm: int,
    needed: int,
    wave_count: float,
    kernel_class: str,
    duration: float,
) -> None:
    row = profile.kernels.iloc[order]
    assert row["order"] == order
    assert row["demangled_name"].startswith(name_prefix)
    assert row["blocks_per_sm"] == per_sm
    assert row["sm_needed"] == needed
    assert row["waves"] == pytest.approx(wave_count)
    assert row["kernel_class"] == kernel_class
    assert row["duration_ns"] == duration
    assert pd.isna(row["measured_duration_ns"])


def test_profile_table_and_metadata(profile: Profile, trace) -> None:
    kernels = profile.kernels
    assert list(kernels.columns) == list(PROFILE_COLUMNS)
    assert kernels["order"].tolist() == list(range(459))
    assert profile.metadata["format"] == "orion-profile"
    assert profile.metadata["version"] == 2
    assert profile.kernels["graph"].isna().all()  # an eager step
    assert profile.metadata["gpu_name"] == "NVIDIA H200"
    assert profile.metadata["sm_count"] == 132
    assert profile.metadata["compute_capability"] == "9.0"
    assert profile.metadata["classification_rule"] == "orion-v1"
    assert profile.metadata["device_limits"] == trace.device.to_metadata()
    assert profile.metadata["workload"] == "resnet50"
    assert profile.metadata["created_utc"].endswith("+00:00")


def test_occurrence_counts_earlier_launches_of_the_same_identity(profile: Profile) -> None:
    kernels = profile.kernels
    # Row 1 (NCHW->NHWC transform, grid (1568,1,4)) comes back as row 230 in the second pass.
    assert kernels.loc[1, "occurrence"] == 0
    assert kernels.loc[230, "occurrence"] == 1
    assert kernels.loc[230, "kernel_name"] == kernels.loc[1, "kernel_name"]
    # Batch norm with grid (64,4,1), block 512: 7 launches per pass.
    bn = kernels[
        kernels["demangled_name"].str.startswith("void cudnn::bn_fw_inf_1C11_kernel_NCHW")
        & (kernels["grid_x"] == 64)
        & (kernels["grid_y"] == 4)
        & (kernels["block_x"] == 512)
    ]
    assert bn["occurrence"].tolist() == list(range(14))
    # Same name, different grid: a different identity, counted separately.
    assert kernels.loc[6, "occurrence"] == 0 and kernels.loc[191, "occurrence"] == 0


# --- matching measured durations ----------------------------------------------------------------

_SHAPE = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def _measured_from(profile: Profile) -> pd.DataFrame:
    """The un-instrumented pass as torch.profiler would give it; durations tag their ncu row."""
    measured = profile.kernels[["demangled_name", *_SHAPE]].copy()
    measured["duration_ns"] = profile.kernels["order"].astype(float) + 100_000.0
    return measured


def _extra_kernel() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "demangled_name": ["void at::native::extra_warmup_kernel<float>(float*)"],
            **{column: [7 if column == "grid_x" else 1] for column in _SHAPE},
            "duration_ns": [-1.0],
        }
    )


def test_an_extra_and_a_missing_kernel_do_not_shift_the_rest(profile: Profile) -> None:
    measured = _measured_from(profile)
    removed = 100  # vectorized add (1568 blocks) between a batch norm and a ReLU
    measured = measured.drop(index=removed)
    measured = pd.concat(
        [measured.iloc[:50], _extra_kernel(), measured.iloc[50:]], ignore_index=True
    )
    matched, report = attach_measured_durations(profile, measured)

    assert (report.matched, report.only_in_ncu, report.only_in_measured) == (458, 1, 1)
    assert report.matched_by_base_name == 0
    durations = matched.kernels["measured_duration_ns"]
    assert pd.isna(durations[removed])
    others = matched.kernels.drop(index=removed)
    # Every other row got its own launch's duration, before and after the insertion/removal.
    assert (others["measured_duration_ns"] == others["order"].astype(float) + 100_000.0).all()
    assert (durations != -1.0).all()
    assert profile.kernels["measured_duration_ns"].isna().all()  # the input is not modified


def test_scattered_differences_do_not_pull_one_pass_onto_the_other(profile: Profile) -> None:
    # Both forward passes launch the same 229 kernels. A plain SequenceMatcher over (name, grid,
    # block) aligned pass 1 of ncu with pass 2 of these measurements (227 matches, 222 measured
    # launches left over), because after these ten deletions the longest common run crossed the
    # passes. Numbering launches per identity first keeps each launch on its own.
    removed = [2, 3, 12, 56, 182, 190, 216, 240, 297, 306]
    matched, report = attach_measured_durations(
        profile, _measured_from(profile).drop(index=removed)
    )
    assert (report.matched, report.only_in_ncu, report.only_in_measured) == (449, 10, 0)
    kernels = matched.kernels
    assert kernels.loc[removed, "measured_duration_ns"].isna().all()
    kept = kernels.drop(index=removed)
    assert (kept["measured_duration_ns"] == kept["order"].astype(float) + 100_000.0).all()


def test_names_in_another_demanglers_spelling_still_match(profile: Profile) -> None:
    # torch.profiler reports libstdc++'s spelling; ncu's default output uses its own.
    measured = _measured_from(profile)
    measured["demangled_name"] = (
        measured["demangled_name"]
        .str.replace("at::<unnamed>::", "at::native::(anonymous namespace)::", regex=False)
        .str.replace(" *", "*", regex=False)
        .str.replace("const T1*", "float const*", regex=False)
    )
    measured = measured.drop(index=[10]).reset_index(drop=True)
    matched, report = attach_measured_durations(profile, measured)
    assert report.matched == 458
    assert report.matched_by_base_name > 0
    assert (report.only_in_ncu, report.only_in_measured) == (1, 0)
    kernels = matched.kernels.drop(index=10)
    assert (kernels["measured_duration_ns"] == kernels["order"].astype(float) + 100_000.0).all()


def test_measured_table_must_have_its_columns(profile: Profile) -> None:
    with pytest.raises(OrionError, match="duration_ns"):
        attach_measured_durations(profile, pd.DataFrame({"demangled_name": ["x"]}))


@pytest.mark.parametrize(
    ("name", "base"),
    [
        (
            "void at::<unnamed>::max_pool_forward_nchw<float, int>(T2, const T1 *)",
            "max_pool_forward_nchw",
        ),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(float*)",
            "max_pool_forward_nchw",
        ),
        ("sm80_xmma_fprop_implicit_gemm_tf32f32", "sm80_xmma_fprop_implicit_gemm_tf32f32"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(T1::Params)", "Kernel2"),
    ],
)
def test_kernel_base_name(name: str, base: str) -> None:
    assert kernel_base_name(name) == base


# --- identity table -----------------------------------------------------------------------------


def test_identity_table_of_the_fixture(profile: Profile) -> None:
    table = kernel_identity_table(profile)
    assert table["launches"].sum() == 459
    assert len(table) == 67
    assert table.loc[0, "launches"] == 1  # torch.randn's kernel, first launch
    bn = table[
        table["demangled_name"].str.startswith("void cudnn::bn_fw_inf_1C11_kernel_NCHW")
        & (table["grid_x"] == 64)
        & (table["block_x"] == 512)
    ].iloc[0]
    launches = profile.kernels.loc[
        (profile.kernels["kernel_name"] == bn["kernel_name"])
        & (profile.kernels["grid_x"] == 64)
        & (profile.kernels["block_x"] == 512)
    ]
    assert bn["launches"] == 14
    assert bn["duration_ns"] == launches["duration_ns"].median()  # nothing measured yet
    assert bn["sm_needed"] == 64  # ceil(256 blocks / 4 per SM)


def _tiny_profile(rows: list[dict]) -> Profile:
    table = pd.DataFrame(
        [
            {
                "order": i,
                "kernel_name": row["name"],
                "demangled_name": row["name"],
                "grid_x": row.get("grid", 10),
                "grid_y": 1,
                "grid_z": 1,
                "block_x": 128,
                "block_y": 1,
                "block_z": 1,
                "occurrence": 0,
                "registers_per_thread": 32,
                "static_shared_memory_bytes": 0,
                "dynamic_shared_memory_bytes": 0,
                "blocks_per_sm": 1,
                "sm_needed": row["sm"],
                "waves": 0.1,
                "compute_throughput_pct": 1.0,
                "memory_throughput_pct": 1.0,
                "tensor_pipe_pct": np.nan,
                "kernel_class": row["cls"],
                "duration_ns": row["ncu"],
                "measured_duration_ns": row.get("measured", np.nan),
                "graph": pd.NA,
                "graph_duration_ns": np.nan,
            }
            for i, row in enumerate(rows)
        ]
    ).astype(PROFILE_COLUMNS)
    return Profile(metadata={"sm_count": 132}, kernels=table)


def test_identity_table_aggregates_repeated_kernels() -> None:
    profile = _tiny_profile(
        [
            {"name": "A", "sm": 4, "cls": "compute", "ncu": 10.0, "measured": 12.0},
            {"name": "B", "sm": 2, "cls": "compute", "ncu": 50.0},
            {"name": "A", "sm": 8, "cls": "memory", "ncu": 30.0},
            {"name": "A", "grid": 99, "sm": 99, "cls": "memory", "ncu": 7.0},
            {"name": "A", "sm": 6, "cls": "compute", "ncu": 20.0, "measured": 14.0},
            {"name": "B", "sm": 2, "cls": "memory", "ncu": 70.0},
            {"name": "C", "sm": 1, "cls": "unknown", "ncu": 5.0},
            {"name": "C", "sm": 1, "cls": "memory", "ncu": 9.0},
            {"name": "D", "sm": 3, "cls": "unknown", "ncu": 1.0},
        ]
    )
    table = kernel_identity_table(profile).set_index(["kernel_name", "grid_x"])
    assert list(table.index) == [("A", 10), ("B", 10), ("A", 99), ("C", 10), ("D", 10)]
    a = table.loc[("A", 10)]
    assert a["launches"] == 3
    assert a["sm_needed"] == 8  # max of 4, 8, 6
    assert a["kernel_class"] == "compute"  # 2 compute vs 1 memory
    assert a["duration_ns"] == 13.0  # median of the measured 12 and 14 (ncu's 10/30/20 unused)
    b = table.loc[("B", 10)]
    assert b["kernel_class"] == "unknown"  # 1 compute vs 1 memory: a tie
    assert b["duration_ns"] == 60.0  # nothing measured: median ncu duration of 50 and 70
    assert table.loc[("A", 99), "launches"] == 1  # same name, other grid: other identity
    assert table.loc[("C", 10), "kernel_class"] == "memory"  # a missing counter loses a tie
    assert table.loc[("D", 10), "kernel_class"] == "unknown"
