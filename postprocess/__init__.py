"""ncu raw CSV -> typed per-kernel table -> orion profile file (docs/architecture.md).

The pipeline, one module per step: :mod:`~postprocess.ncu_csv` parses ncu's output through the
declared metric mapping in :mod:`~postprocess.metrics`; :mod:`~postprocess.occupancy` and
:mod:`~postprocess.classify` derive SM needs and kernel classes; :mod:`~postprocess.build`
assembles the profile and lines it up with un-instrumented durations;
:mod:`~postprocess.profile_format` reads and writes the file; :mod:`~postprocess.summary`
condenses it for people. Only pandas is needed, so the scheduler can import the reader anywhere.
"""

from postprocess.build import (
    IDENTITY_TABLE_COLUMNS,
    MEASURED_COLUMNS,
    MatchReport,
    attach_measured_durations,
    build_profile,
    kernel_base_name,
    kernel_identity_table,
)
from postprocess.classify import CLASSIFICATION_RULE, classify_kernels
from postprocess.demangle import demangle
from postprocess.metrics import (
    COMPUTE_SOL_SUBMETRICS,
    DEFAULT_METRIC_SET,
    MEMORY_SOL_SUBMETRICS,
    METRIC_SETS,
    METRICS,
    NCU_METRIC_SETS,
    OPTIONAL_TENSOR_METRIC_BASES,
    TENSOR_PIPE_SUFFIX,
    MetricSpec,
)
from postprocess.ncu_csv import KERNEL_COLUMNS, DeviceLimits, NcuTrace, read_ncu_raw_csv
from postprocess.occupancy import computed_occupancy_limits, occupancy_columns
from postprocess.profile_format import (
    IDENTITY_COLUMNS,
    METADATA_KEYS,
    PROFILE_COLUMNS,
    PROFILE_FORMAT,
    PROFILE_VERSION,
    SHAPE_COLUMNS,
    Profile,
    default_profile_path,
    find_profile,
    profile_compatibility_warnings,
    profile_root,
    program_profile_path,
    read_profile,
    read_profile_header,
    reference_profile_root,
    write_profile,
)
from postprocess.summary import ProfileSummary, sm_needed_bins, summarize_profile

__all__ = [
    "CLASSIFICATION_RULE",
    "COMPUTE_SOL_SUBMETRICS",
    "DEFAULT_METRIC_SET",
    "IDENTITY_COLUMNS",
    "IDENTITY_TABLE_COLUMNS",
    "KERNEL_COLUMNS",
    "MEASURED_COLUMNS",
    "MEMORY_SOL_SUBMETRICS",
    "METADATA_KEYS",
    "METRICS",
    "METRIC_SETS",
    "NCU_METRIC_SETS",
    "OPTIONAL_TENSOR_METRIC_BASES",
    "PROFILE_COLUMNS",
    "PROFILE_FORMAT",
    "PROFILE_VERSION",
    "SHAPE_COLUMNS",
    "TENSOR_PIPE_SUFFIX",
    "DeviceLimits",
    "MatchReport",
    "MetricSpec",
    "NcuTrace",
    "Profile",
    "ProfileSummary",
    "attach_measured_durations",
    "build_profile",
    "classify_kernels",
    "computed_occupancy_limits",
    "default_profile_path",
    "demangle",
    "find_profile",
    "kernel_base_name",
    "kernel_identity_table",
    "occupancy_columns",
    "profile_compatibility_warnings",
    "profile_root",
    "program_profile_path",
    "read_ncu_raw_csv",
    "read_profile",
    "read_profile_header",
    "reference_profile_root",
    "sm_needed_bins",
    "summarize_profile",
    "write_profile",
]
