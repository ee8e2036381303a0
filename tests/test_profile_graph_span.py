"""A graph profile's wall time: measured from the step's trace, and used when none was recorded."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from postprocess.graphs import graph_wall_time_ns, is_graph_profile
from postprocess.profile_format import Profile
from profiler.measure import gpu_span_ns, read_span_median, write_spans


def _kernel(ts_us: float, dur_us: float) -> dict:
    return {"cat": "kernel", "ph": "X", "name": "k", "ts": ts_us, "dur": dur_us, "args": {}}


def test_the_gpu_span_runs_from_the_first_start_to_the_last_end_gaps_included() -> None:
    trace = {
        "traceEvents": [
            _kernel(1000.0, 10.0),
            {"cat": "cuda_runtime", "ph": "X", "ts": 900.0, "dur": 500.0},  # not a kernel
            _kernel(1012.0, 5.5),
            _kernel(1020.0, 2.0),
        ]
    }
    assert gpu_span_ns(trace) == 22_000.0  # 1000 us -> 1022 us
    assert gpu_span_ns({"traceEvents": []}) is None


def test_spans_are_written_with_their_median(tmp_path: Path) -> None:
    path = tmp_path / "measured_span.json"
    write_spans([1500.0, None, 1300.0, 1400.0], path)
    assert read_span_median(path) == 1400.0
    assert read_span_median(tmp_path / "missing.json") is None
    path.write_text("{not json")
    assert read_span_median(path) is None


def _profile(metadata: dict) -> Profile:
    kernels = pd.DataFrame(
        {"duration_ns": [100.0, 200.0, 300.0], "measured_duration_ns": [110.0, None, 290.0]}
    )
    return Profile({"format": "orion-profile", "version": 1, **metadata}, kernels)


def test_a_graph_profile_holds_the_gpu_for_its_measured_span() -> None:
    profile = _profile({"cuda_graph": True, "step_gpu_span_ns": 1_400_000.0})
    assert is_graph_profile(profile)
    assert graph_wall_time_ns(profile) == 1_400_000.0


def test_without_a_span_the_kernels_durations_add_up() -> None:
    # measured where known, the replayed duration otherwise: 110 + 200 + 290
    assert graph_wall_time_ns(_profile({"cuda_graph": True})) == 600.0
    assert not is_graph_profile(_profile({}))
