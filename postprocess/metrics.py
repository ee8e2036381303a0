"""The one declared mapping from Nsight Compute's raw-page columns to orion's kernel columns.

Everything that reads or requests ncu metrics goes through :data:`METRICS`: the parser uses it to
find, type and rename columns, and the profiler builds ``ncu --metrics`` from
:data:`NCU_METRIC_SETS` (derived from :data:`METRICS`) and :data:`OPTIONAL_TENSOR_METRIC_BASES`.
Keeping one list means a metric cannot be requested under one name and parsed under another.

The two throughputs can be had two ways, which the metric sets choose between: ncu's
speed-of-light (SOL) metrics (set ``full``: exact, but 10 replay passes per kernel), or the
row-wise maximum of their main sub-metrics (set ``fast``, the default: 4 passes). The parser
takes the SOL column when the CSV has it, else the sub-metrics; see
:data:`COMPUTE_SOL_SUBMETRICS`.

Our column names carry their unit (``_ns``, ``_pct``, ``_bytes``); counts such as blocks,
threads and registers carry none. Occupancy limits are in blocks per SM, as ncu reports them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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
    sub_metrics: tuple[str, ...] = ()
    """ncu columns whose row-wise maximum stands in for ``ncu_name`` when the CSV lacks it (the
    throughputs under the ``fast`` metric set). A required spec with sub-metrics is satisfied by
    its own column or by any one of them."""

    @property
    def is_metric(self) -> bool:
        """ncu metric names contain ``__``; fixed columns such as "Kernel Name" do not.

        Only metrics can (and need to) be requested with ``--metrics``.
        """
        return "__" in self.ncu_name

    def source_in(self, header: Collection[str]) -> str | None:
        """How a CSV with ``header`` gives this throughput column (a spec with sub-metrics):
        :data:`FROM_SOL` (ncu's own column, preferred), :data:`FROM_SUBMETRICS` (the maximum of
        whichever sub-metrics it has), or None when it has neither."""
        if self.ncu_name in header:
            return FROM_SOL
        if any(name in header for name in self.sub_metrics):
            return FROM_SUBMETRICS
        return None

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


FROM_SOL = "sol"
"""A throughput read from ncu's own (speed-of-light) column."""
FROM_SUBMETRICS = "sub-metric-max"
"""A throughput computed as the row-wise maximum of the sub-metric columns present."""

ELAPSED_PCT_SUFFIX = ".avg.pct_of_peak_sustained_elapsed"
"""ncu's column for a unit's throughput: the average unit's share of its peak over the kernel."""

COMPUTE_SOL_METRIC = "sm__throughput" + ELAPSED_PCT_SUFFIX
MEMORY_SOL_METRIC = "gpu__compute_memory_throughput" + ELAPSED_PCT_SUFFIX

COMPUTE_SOL_SUBMETRICS: tuple[str, ...] = (
    "sm__issue_active",
    "sm__inst_executed_pipe_adu",
    "sm__pipe_shared_cycles_active",
    "sm__inst_executed_pipe_lsu",
    "sm__inst_executed_pipe_xu",
    "sm__inst_executed",
)
"""Base names of the sub-metrics standing in for :data:`COMPUTE_SOL_METRIC` (each requested and
read with :data:`ELAPSED_PCT_SUFFIX`).

ncu computes each SOL throughput as the maximum over its breakdown (``ncu --metrics
breakdown:<metric>`` lists them); asking for the SOL metric makes ncu collect the whole breakdown,
10 replay passes per kernel on an H200. On an H200 with ncu 2025.3.1, over 200 kernels (ResNet-50
inference, ResNet-50 training backward, BERT inference; benchmarks/results/nvidia-h200/
ncu_metric_cost/) the sub-metric that set the maximum was one of this tuple's (compute) or of
:data:`MEMORY_SOL_SUBMETRICS` (memory) for every kernel but one near-idle BERT elementwise kernel
(memory 0.60 % instead of 0.91 %, set by ``gpu__compute_memory_access_throughput_internal_
activity``). Asked for instead of the SOL metrics, these twelve need 4 passes instead of 10
(ncu_metric_cost/orion-fast/ there). With the ``fast`` metric set a throughput is therefore the
maximum of the listed sub-metrics:
a lower bound of ncu's SOL value, equal to it whenever one of them is the limiter. A kernel
limited by another unit (fp64, texture or TMA work, say) reads lower than its SOL value; use the
``full`` set where the exact value matters.
"""

MEMORY_SOL_SUBMETRICS: tuple[str, ...] = (
    "lts__xbar2lts_cycles_active",
    "l1tex__data_pipe_lsu_wavefronts",
    "dram__cycles_active",
    "lts__t_tag_requests",
    "lts__lts2xbar_cycles_active",
    "l1tex__lsuin_requests",
)
"""Base names of the sub-metrics standing in for :data:`MEMORY_SOL_METRIC`; see
:data:`COMPUTE_SOL_SUBMETRICS` for where they come from and what the maximum means."""


def _elapsed_pct(bases: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(base + ELAPSED_PCT_SUFFIX for base in bases)


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
        COMPUTE_SOL_METRIC,
        "float",
        "pct",
        required=True,
        sub_metrics=_elapsed_pct(COMPUTE_SOL_SUBMETRICS),
    ),
    MetricSpec(
        "memory_throughput_pct",
        MEMORY_SOL_METRIC,
        "float",
        "pct",
        required=True,
        sub_metrics=_elapsed_pct(MEMORY_SOL_SUBMETRICS),
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

METRIC_SETS: tuple[str, ...] = ("fast", "full")
"""``fast``: the throughputs from :data:`COMPUTE_SOL_SUBMETRICS` / :data:`MEMORY_SOL_SUBMETRICS`
(4 replay passes per kernel on an H200); ``full``: ncu's exact SOL metrics (10 passes)."""
DEFAULT_METRIC_SET = "fast"


def _metric_set(name: str) -> tuple[str, ...]:
    """The required metrics in :data:`METRICS` order, throughputs as SOL or as sub-metrics."""
    metrics: list[str] = []
    for spec in METRICS:
        if not (spec.required and spec.is_metric):
            continue
        if spec.sub_metrics and name == "fast":
            metrics.extend(spec.sub_metrics)
        else:
            metrics.append(spec.ncu_name)
    return tuple(metrics)


NCU_METRIC_SETS: dict[str, tuple[str, ...]] = {name: _metric_set(name) for name in METRIC_SETS}
"""Metric set -> exactly what ``ncu --metrics`` must be given for a profile to be buildable (the
profiler appends the tensor-pipe metrics this ncu offers)."""

THROUGHPUT_COLUMNS: tuple[str, ...] = tuple(spec.column for spec in METRICS if spec.sub_metrics)


def metric_set_of(sources: Mapping[str, str | None]) -> str | None:
    """The set a CSV's throughput columns correspond to, from ``column -> source``
    (:meth:`MetricSpec.source_in`): ``full`` when all came from SOL columns, ``fast`` when all
    from sub-metrics, None when mixed or unknown."""
    values = {sources.get(column) for column in THROUGHPUT_COLUMNS}
    if values == {FROM_SOL}:
        return "full"
    if values == {FROM_SUBMETRICS}:
        return "fast"
    return None


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
