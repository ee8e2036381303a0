"""benchmarks/gpu_timeline.py's analysis, from made-up kernel timelines (recording needs a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def timeline():
    return load_benchmark("gpu_timeline")


def trace(tmp_path: Path, name: str, events: list[dict], marker_ts: float, wall_us: float) -> Path:
    path = tmp_path / f"{name}.json"
    document = {"wall_us_at_marker": wall_us, "marker_ts": marker_ts, "events": events}
    path.write_text(json.dumps(document))
    return path


def kernel(name: str, ts: float, dur: float, correlation: int | None = None) -> dict:
    return {"kind": "kernel", "name": name, "ts": ts, "dur": dur, "stream": 7,
            "correlation": correlation}  # fmt: skip


def call(ts: float, dur: float, correlation: int) -> dict:
    return {"kind": "call", "name": "cudaLaunchKernel", "ts": ts, "dur": dur, "stream": None,
            "correlation": correlation}  # fmt: skip


def test_a_wait_is_counted_from_the_later_of_its_call_and_its_predecessor(
    timeline, tmp_path: Path
) -> None:
    # HP: kernel 1 called at 0 (ends its call at 5), runs 10-20: waited 5 us. Kernel 2 called at
    # 6 (call ends 8), ready when kernel 1 ends at 20, runs 520-530: waited 500 us, during which
    # the BE kernel ran 100-400 (the BE trace's clock is 1000 us behind the HP's). Kernel 1 was
    # ready before both traces had begun, so its wait is not counted.
    hp = trace(tmp_path, "hp", [call(0, 5, 1), kernel("h1", 10, 10, 1), call(6, 2, 2),
                                kernel("h2", 520, 10, 2)], marker_ts=0, wall_us=0)  # fmt: skip
    be = trace(tmp_path, "be", [kernel("be_early", 1000, 5), kernel("be_gemm", 1100, 300)],
               marker_ts=1000, wall_us=0)  # fmt: skip
    long, summary = timeline.analyse(
        timeline.load_trace(hp), [timeline.load_trace(be)], min_wait_us=100
    )
    assert list(long["name"]) == ["h2"]
    assert long.iloc[0]["wait"] == pytest.approx(500)
    assert long.iloc[0]["neighbour_us"] == pytest.approx(300)
    assert summary["hp_wait_us"]["total"] == pytest.approx(500)
    assert summary["neighbour_kernels_in_long_waits"] == [{"name": "be_gemm", "us": 300.0}]
    page = timeline.summary_markdown(summary)
    assert "| share of those waits with a neighbour's kernel on the GPU | 0.600 |" in page


def test_overlapping_neighbour_kernels_are_counted_once(timeline) -> None:
    import pandas as pd

    be = pd.DataFrame(
        {"name": ["a", "b", "c"], "start": [0.0, 50.0, 300.0], "end": [100.0, 150.0, 320.0]}
    )
    covered, ran = timeline.neighbour_time(be, 20.0, 310.0)
    assert covered == pytest.approx(130.0 + 10.0)
    assert [name for name, _ in ran] == ["a", "b", "c"]


def test_the_kept_events_are_launch_calls_kernels_and_the_marker(timeline) -> None:
    raw = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "ts": 5,
                "dur": 2,
                "args": {"stream": 7, "correlation": 3},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": 1,
                "dur": 2,
                "args": {"correlation": 3},
            },
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 1, "dur": 2},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2},
            {"ph": "X", "cat": "user_annotation", "name": timeline.MARKER, "ts": 0, "dur": 1},
            {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1},
        ]
    }
    kinds = [(e["kind"], e["name"]) for e in timeline.kept_events(raw)]
    assert kinds == [("kernel", "k"), ("call", "cudaLaunchKernel"), ("marker", timeline.MARKER)]
