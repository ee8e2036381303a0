"""Named, buildable jobs (models and synthetic kernels) with one step API.

Importing this package imports no framework; :func:`build_workload` imports what the chosen
workload needs.
"""

from workloads.base import Workload
from workloads.build import build_workload
from workloads.registry import OptionInfo, WorkloadInfo, get_workload_info, list_workloads
from workloads.spec import DTYPES, MODES, WorkloadSpec

__all__ = [
    "DTYPES",
    "MODES",
    "OptionInfo",
    "Workload",
    "WorkloadInfo",
    "WorkloadSpec",
    "build_workload",
    "get_workload_info",
    "list_workloads",
]
