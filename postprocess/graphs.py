"""What the scheduler needs of a profile made with ``orion profile --cuda-graph``.

A step captured as a CUDA graph reaches the driver as one graph launch, so the scheduler gates it
as a unit: it needs the SMs of its widest kernel for as long as the graph occupies the GPU. That
time is the step's GPU span measured in the un-instrumented pass (the rows' ``graph_duration_ns``,
format version 2, and ``step_gpu_span_ns`` in the metadata): from the first kernel's start to the
last kernel's end, gaps included. A
profile without it (made before it was recorded) falls back to the sum of its kernels' measured
durations, which leaves the gaps out and so errs short.
"""

from __future__ import annotations

import math

import pandas as pd

from postprocess.profile_format import Profile


def is_graph_profile(profile: Profile) -> bool:
    """The profile was made with the step captured as a CUDA graph."""
    return profile.metadata.get("cuda_graph") is True


def graph_wall_time_ns(profile: Profile) -> float:
    """How long the profiled graph occupies the GPU, in ns (see the module docstring)."""
    kernels = profile.kernels
    if "graph_duration_ns" in kernels.columns:
        recorded = pd.to_numeric(kernels["graph_duration_ns"], errors="coerce").dropna()
        if not recorded.empty and float(recorded.iloc[0]) > 0:
            return float(recorded.iloc[0])
    span = profile.metadata.get("step_gpu_span_ns")
    if isinstance(span, (int, float)) and math.isfinite(span) and span > 0:
        return float(span)
    measured = pd.to_numeric(kernels.get("measured_duration_ns"), errors="coerce")
    replayed = pd.to_numeric(kernels.get("duration_ns"), errors="coerce")
    return float(measured.fillna(replayed).fillna(0.0).sum())
