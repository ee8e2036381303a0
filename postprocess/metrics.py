"""The one declared mapping from Nsight Compute's raw-page columns to orion's kernel columns.

Everything that reads or requests ncu metrics goes through :data:`METRICS`: the parser uses it to
find, type and rename columns, and the profiler builds ``ncu --metrics`` from
:data:`REQUIRED_NCU_METRICS` and :data:`OPTIONAL_TENSOR_METRIC_BASES`. Keeping one list means a
metric cannot be requested under one name and parsed under another.

Our column names carry their unit (``_ns``, ``_pct``, ``_bytes``); counts such as blocks,
threads and registers carry none. Occupancy limits are in blocks per SM, as ncu reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dtype = Literal["int", "float", "str", "dim3"]
"""``dim3`` is ncu's ``(x, y, z)`` text; it expands to ``<column>_x``, ``_y`` and ``_z``."""

Unit = Literal["ns", "pct", "bytes", "count", "text"]


@dataclass(frozen=True)
class MetricSpec:
    """How one raw-page column becomes one of our columns.

    ``required`` columns must be in the CSV (a missing one is an error naming it); optional ones
    become all-NaN columns when absent, so the table's schema never depends on the GPU.
    """

    column: str
    ncu_name: str
    dtype: Dtype
    unit: Unit
    required: bool
    tensor_pipe: bool = False
    """True for the per-GPU tensor/reduced-precision pipe candidates feeding ``tensor_pipe_pct``."""

    @property
    def is_metric(self) -> bool:
        """ncu metric names contain ``__``; fixed columns such as "Kernel Name" do not.

        Only metrics can (and need to) be requested with ``--metrics``.
        """
        return "__" in self.ncu_name

    @property
    def columns(self) -> tuple[str, ...]:
        """The column(s) this spec produces in the kernel table."""
        if self.dtype == "dim3":
            return (f"{self.column}_x", f"{self.column}_y", f"{self.column}_z")
        return (self.column,)


TENSOR_PIPE_SUFFIX = ".avg.pct_of_peak_sustained_active"
"""ncu's column for a pipe base name: busy cycles as a share of the peak while the SM was active."""

OPTIONAL_TENSOR_METRIC_BASES: tuple[str, ...] = (
    "sm__pipe_tensor_op_hmma_cycles_active",
    "sm__pipe_tensor_op_gmma_cycles_active",
    "sm__pipe_tensor_cycles_active",
    "sm__pipe_fp16_cycles_active",
    "sm__pipe_shared_cycles_active",
)
"""Candidate pipe metrics whose availability differs per architecture (HMMA up to Ampere, GMMA on
Hopper, the FP16/shared pipe on Volta/Turing). The profiler keeps those ``ncu --query-metrics``
lists and appends :data:`TENSOR_PIPE_SUFFIX`; the parser takes the row-wise maximum of whichever
are present as ``tensor_pipe_pct``."""


def _tensor_pipe_column(base: str) -> str:
    # sm__pipe_tensor_op_hmma_cycles_active -> pipe_tensor_op_hmma_pct
    short = base.removeprefix("sm__").removesuffix("_cycles_active")
    return f"{short}_pct"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ncu_id", "ID", "int", "count", required=True),
    MetricSpec("kernel_name", "Kernel Name", "str", "text", required=True),
    MetricSpec("grid", "Grid Size", "dim3", "count", required=True),
    MetricSpec("block", "Block Size", "dim3", "count", required=True),
    MetricSpec("duration_ns", "gpu__time_duration.sum", "float", "ns", required=True),
    MetricSpec(
        "compute_throughput_pct",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "float",
        "pct",
        required=True,
    ),
    MetricSpec(
        "memory_throughput_pct",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "float",
        "pct",
        required=True,
    ),
    MetricSpec("grid_blocks", "launch__grid_size", "int", "count", required=True),
    MetricSpec("block_threads", "launch__block_size", "int", "count", required=True),
    MetricSpec("registers_per_thread", "launch__registers_per_thread", "int", "count", True),
    MetricSpec(
        "occupancy_limit_registers", "launch__occupancy_limit_registers", "int", "count", True
    ),
    MetricSpec(
        "occupancy_limit_shared_memory", "launch__occupancy_limit_shared_mem", "int", "count", True
    ),
    MetricSpec("occupancy_limit_warps", "launch__occupancy_limit_warps", "int", "count", True),
    MetricSpec("occupancy_limit_blocks", "launch__occupancy_limit_blocks", "int", "count", True),
    MetricSpec(
        "static_shared_memory_bytes", "launch__shared_mem_per_block_static", "int", "bytes", True
    ),
    MetricSpec(
        "dynamic_shared_memory_bytes", "launch__shared_mem_per_block_dynamic", "int", "bytes", True
    ),
    # The shared-memory carveout the driver picked for this launch: ncu's shared-memory limit is
    # computed against it, not against the device maximum. Always on the raw page, never requested.
    MetricSpec(
        "shared_memory_config_bytes", "launch__shared_mem_config_size", "int", "bytes", False
    ),
    *(
        MetricSpec(
            _tensor_pipe_column(base),
            base + TENSOR_PIPE_SUFFIX,
            "float",
            "pct",
            required=False,
            tensor_pipe=True,
        )
        for base in OPTIONAL_TENSOR_METRIC_BASES
    ),
)

REQUIRED_NCU_METRICS: tuple[str, ...] = tuple(
    spec.ncu_name for spec in METRICS if spec.required and spec.is_metric
)
"""Exactly what ``ncu --metrics`` must be given for a profile to be buildable."""

TENSOR_PIPE_COLUMNS: tuple[str, ...] = tuple(spec.column for spec in METRICS if spec.tensor_pipe)

DEVICE_ATTRIBUTES: dict[str, str] = {
    "name": "device__attribute_display_name",
    "sm_count": "device__attribute_multiprocessor_count",
    "max_threads_per_sm": "device__attribute_max_threads_per_multiprocessor",
    "max_blocks_per_sm": "device__attribute_max_blocks_per_multiprocessor",
    "max_registers_per_sm": "device__attribute_max_registers_per_multiprocessor",
    "max_shared_memory_per_sm_bytes": "device__attribute_max_shared_memory_per_multiprocessor",
    "max_warps_per_sm": "device__attribute_max_warps_per_multiprocessor",
}
""":class:`~postprocess.ncu_csv.DeviceLimits` field -> raw-page column; all required (ncu prints
every ``device__attribute_*`` on the raw page whatever ``--metrics`` says)."""

OPTIONAL_DEVICE_ATTRIBUTES: dict[str, str] = {
    "warp_size": "device__attribute_warp_size",
    "reserved_shared_memory_per_block_bytes": "device__attribute_reserved_shared_memory_per_block",
    "cc_major": "device__attribute_compute_capability_major",
    "cc_minor": "device__attribute_compute_capability_minor",
}
"""Device facts with a fallback when absent (see :class:`~postprocess.ncu_csv.DeviceLimits`)."""

COMPUTE_CAPABILITY_COLUMN = "CC"
"""ncu's fixed "CC" column ("9.0"), the fallback for the compute capability attributes."""
