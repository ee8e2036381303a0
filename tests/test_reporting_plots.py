"""Every figure is written, non-trivial in size, and survives having nothing to show."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from rundir_factory import standard_runs

from reporting import (
    gpu_samples,
    headline,
    kernel_slice,
    load_runs,
    plot_gpu_shares_over_time,
    plot_gpu_utilisation,
    plot_kernel_timeline,
    plot_latency_cdf,
    plot_latency_over_time,
    plot_memory_over_time,
    plot_tradeoff,
    request_latencies,
    run_labels,
)
from reporting.memory import MEMORY_SERIES_COLUMNS
from reporting.plots import latency_cdf_figure
from reporting.series import GPU_SAMPLE_COLUMNS, KERNEL_COLUMNS, LATENCY_COLUMNS
from reporting.shares import SHARE_SERIES_COLUMNS

MIN_BYTES = 5_000


@pytest.fixture
def runs(tmp_path: Path):
    paths = standard_runs(tmp_path / "runs")
    return load_runs([paths["dedicated"], paths["orion"], paths["timeslice"]])


def _assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > MIN_BYTES


def test_latency_series_marks_the_window(runs) -> None:
    latencies = request_latencies(runs)
    assert set(latencies["run"]) == {"dedicated", "orion", "timeslice"}
    # 102 completed requests per run, of which 100 arrived in the window.
    assert (
        latencies.groupby("run")["in_window"].agg(["size", "sum"]).values.tolist()
        == [[102, 100]] * 3
    )


def test_all_plots_written(runs, tmp_path: Path) -> None:
    labels = run_labels(runs)
    latencies = request_latencies(runs)
    head = headline(runs)
    out = tmp_path / "fig"
    _assert_png(plot_latency_cdf(latencies, out / "cdf.png", order=labels, target_ms=104.0))
    _assert_png(plot_tradeoff(head, out / "tradeoff.png", order=labels))
    _assert_png(plot_tradeoff(head[~head["is_baseline"]], out / "tradeoff_abs.png"))
    _assert_png(plot_latency_over_time(latencies, out / "over_time.png", order=labels))
    _assert_png(plot_gpu_utilisation(gpu_samples(runs), out / "gpu.png", order=labels))
    kernels = kernel_slice(runs[1], label="orion", max_kernels=500)
    assert len(kernels) == 500
    assert set(kernels["client"]) == {"hp", "be"}
    _assert_png(plot_kernel_timeline(kernels, out / "kernels.png"))


def test_kernel_slice_caps_and_starts_mid_window(runs) -> None:
    trace = runs[1].trace
    kernels = kernel_slice(runs[1], max_kernels=100, start_s=10.05)
    assert len(kernels) == 100
    assert kernels["launch_s"].min() >= 10.05
    assert kernels["launch_s"].is_monotonic_increasing
    assert kernel_slice(runs[0]).empty  # no trace
    assert len(kernel_slice(runs[1], max_kernels=10**7)) == len(trace)


@pytest.mark.parametrize(
    ("plot", "columns"),
    [
        (plot_latency_cdf, LATENCY_COLUMNS),
        (plot_latency_over_time, LATENCY_COLUMNS),
        (plot_gpu_utilisation, GPU_SAMPLE_COLUMNS),
        (plot_kernel_timeline, KERNEL_COLUMNS),
        (plot_memory_over_time, MEMORY_SERIES_COLUMNS),
        (plot_gpu_shares_over_time, SHARE_SERIES_COLUMNS),
    ],
)
def test_empty_data_still_gives_a_figure(tmp_path: Path, plot, columns) -> None:
    path = plot(pd.DataFrame(columns=columns), tmp_path / "empty.png")
    assert path.is_file() and path.stat().st_size > 1_000


def test_latency_cdf_gives_the_tail_room(runs) -> None:
    """1 - F on an upside-down log axis labelled with percentiles, not a linear 0..1 axis."""
    fig = latency_cdf_figure(request_latencies(runs), order=run_labels(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    bottom, top = ax.get_ylim()
    assert bottom == 1.0 and top < 0.01  # p0 at the bottom, beyond p99 at the top
    labels = {tick.get_text() for tick in ax.get_yticklabels()}
    assert {"p50", "p90", "p99"} <= labels
    empty = latency_cdf_figure(pd.DataFrame(columns=LATENCY_COLUMNS))
    assert empty.axes[0].get_yscale() == "log"
