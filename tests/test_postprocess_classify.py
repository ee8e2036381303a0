"""Kernel classes by rule orion-v1, including the tensor-pipe term the original Orion lacked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from postprocess.build import build_profile
from postprocess.classify import CLASSIFICATION_RULE, classify_kernels
from postprocess.ncu_csv import read_ncu_raw_csv

RAW = Path(__file__).parent / "data" / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"
NAN = np.nan


@pytest.mark.parametrize(
    ("compute", "memory", "tensor", "expected"),
    [
        (60.0, 20.0, NAN, "compute"),
        (20.0, 60.0, NAN, "memory"),
        (40.0, 40.0, NAN, "compute"),  # a tie counts as compute
        (20.0, 45.0, 70.0, "compute"),  # tensor cores busy: compute despite low SM throughput
        (20.0, 45.0, 30.0, "memory"),  # tensor pipe reported but below memory
        (NAN, 45.0, 70.0, "compute"),  # SM throughput missing, the tensor term still counts
        (NAN, 45.0, NAN, "unknown"),
        (60.0, NAN, NAN, "unknown"),
        (60.0, NAN, 90.0, "unknown"),
    ],
)
def test_rule_orion_v1(compute: float, memory: float, tensor: float, expected: str) -> None:
    kernels = pd.DataFrame(
        {
            "compute_throughput_pct": [compute],
            "memory_throughput_pct": [memory],
            "tensor_pipe_pct": [tensor],
        }
    )
    assert classify_kernels(kernels).tolist() == [expected]


def test_works_without_a_tensor_column() -> None:
    kernels = pd.DataFrame({"compute_throughput_pct": [1.0, 9.0], "memory_throughput_pct": [5, 5]})
    assert classify_kernels(kernels).tolist() == ["memory", "compute"]


def test_rule_name_is_recorded() -> None:
    assert CLASSIFICATION_RULE == "orion-v1"


def test_class_counts_of_the_fixture() -> None:
    # No tensor-pipe metric was collected on this run, so the TF32 tensor-core convolutions are
    # classified on SM vs memory throughput alone, and every one of them comes out "memory".
    profile = build_profile(read_ncu_raw_csv(RAW), {})
    counts = profile.kernels["kernel_class"].value_counts().to_dict()
    assert counts == {"memory": 396, "compute": 63}
    gemm = profile.kernels["demangled_name"].str.contains("xmma|cutlass|gemm", regex=True)
    assert (profile.kernels.loc[gemm, "kernel_class"] == "memory").all()
