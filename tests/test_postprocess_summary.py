"""Summary numbers for the 459-kernel ResNet-50 fixture, and SM bins derived from the SM count."""

from __future__ import annotations

from pathlib import Path

import pytest

from postprocess.build import build_profile
from postprocess.ncu_csv import read_ncu_raw_csv
from postprocess.summary import sm_needed_bins, summarize_profile

RAW = Path(__file__).parent / "data" / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"


@pytest.mark.parametrize(
    ("sm_count", "bins"),
    [
        (132, [(1, 8), (9, 16), (17, 33), (34, 66), (67, 99), (100, 131), (132, 132)]),  # H200
        (108, [(1, 6), (7, 13), (14, 27), (28, 54), (55, 81), (82, 107), (108, 108)]),  # A100
        (8, [(1, 1), (2, 2), (3, 4), (5, 6), (7, 7), (8, 8)]),
        (2, [(1, 1), (2, 2)]),
        (1, [(1, 1)]),
    ],
)
def test_bins_come_from_the_sm_count(sm_count: int, bins: list[tuple[int, int]]) -> None:
    assert sm_needed_bins(sm_count) == bins


def test_summary_of_the_fixture() -> None:
    summary = summarize_profile(build_profile(read_ncu_raw_csv(RAW), {}), top_n=5)
    assert summary.kernel_count == 459
    assert summary.identity_count == 67
    assert summary.total_duration_ns == 3_015_712.0
    by_class = summary.by_class.set_index("kernel_class")
    assert by_class.loc["compute", "kernels"] == 63
    assert by_class.loc["memory", "kernels"] == 396
    assert by_class.loc["unknown", "kernels"] == 0
    assert by_class["duration_ns"].sum() == summary.total_duration_ns
    assert by_class["share_pct"].sum() == pytest.approx(100.0)

    histogram = summary.sm_needed_histogram
    assert histogram["bin"].tolist() == [
        "1-8", "9-16", "17-33", "34-66", "67-99", "100-131", "all (132)"
    ]  # fmt: skip
    assert histogram["kernels"].tolist() == [10, 38, 88, 138, 50, 52, 83]
    assert histogram["duration_ns"].sum() == summary.total_duration_ns

    top = summary.top_kernels
    assert len(top) == 5
    assert top["duration_ns"].is_monotonic_decreasing
    # The 8x7 = 56-block Hopper convolution (cluster of 7), 12 launches, leads the time.
    assert top.loc[0, "demangled_name"].startswith("sm90_xmma_fprop_implicit_gemm")
    assert (top.loc[0, "grid_x"], top.loc[0, "grid_y"], top.loc[0, "launches"]) == (8, 7, 12)
