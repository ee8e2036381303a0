"""Kernel classes for the scheduler: rule ``orion-v1``.

Orion co-schedules a compute-bound kernel with a memory-bound one, so each kernel needs a class.

Rule ``orion-v1``, per kernel row:

- ``compute = max(compute_throughput_pct, tensor_pipe_pct)``, where ``tensor_pipe_pct`` counts
  only when ncu reported it. ``compute_throughput_pct`` is ncu's SM throughput
  (``sm__throughput``), or with the ``fast`` metric set the maximum of its main sub-metrics
  (:data:`postprocess.metrics.COMPUTE_SOL_SUBMETRICS`); the tensor/half-precision pipe term is
  what makes tensor-core and reduced-precision work count as compute, which Orion's original
  FP32-FLOP roofline missed.
- ``memory = memory_throughput_pct`` (ncu's ``gpu__compute_memory_throughput``, or the maximum
  of :data:`postprocess.metrics.MEMORY_SOL_SUBMETRICS`).
- If ``compute`` or ``memory`` is missing (NaN): ``unknown``; the scheduler treats those
  conservatively rather than guessing.
- Otherwise ``compute`` when ``compute >= memory``, else ``memory``.

Both throughputs are percentages of their own peaks, so comparing them asks which resource the
kernel stresses more, which is what decides whether two kernels interfere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CLASSIFICATION_RULE = "orion-v1"
"""Recorded in every profile's metadata so a later rule change is detectable."""

KERNEL_CLASSES: tuple[str, ...] = ("compute", "memory", "unknown")


def compute_intensity_pct(kernels: pd.DataFrame) -> pd.Series:
    """The rule's ``compute`` term: SM throughput or tensor-pipe use, whichever is higher."""
    sm = kernels["compute_throughput_pct"].astype("float64")
    if "tensor_pipe_pct" not in kernels.columns:
        return sm
    # fmax ignores a NaN on one side, so a missing tensor metric never hides the SM throughput.
    return pd.Series(
        np.fmax(sm.to_numpy(), kernels["tensor_pipe_pct"].astype("float64").to_numpy()),
        index=kernels.index,
    )


def classify_kernels(kernels: pd.DataFrame) -> pd.Series:
    """``compute`` / ``memory`` / ``unknown`` for every row, by rule :data:`CLASSIFICATION_RULE`."""
    compute = compute_intensity_pct(kernels)
    memory = kernels["memory_throughput_pct"].astype("float64")
    classes = np.select(
        [compute.isna() | memory.isna(), compute >= memory],
        ["unknown", "compute"],
        default="memory",
    )
    return pd.Series(classes, index=kernels.index, dtype="string", name="kernel_class")
