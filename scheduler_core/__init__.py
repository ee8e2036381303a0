"""The scheduler: a C++ LD_PRELOAD library (``native/``) and its Python controller side.

Data flow: a profile's kernel identity table (``postprocess``) is loaded into a run's shared
memory by :class:`SchedulerRun`; each client process gets the preload library and its client
index through its environment; the library gates best-effort launches by the chosen policy.
"""

from scheduler_core.library import check_preload_library, native_module, preload_library_path
from scheduler_core.run_state import (
    HP_COMPLETION_MODES,
    NATIVE_POLICIES,
    TRACE_COLUMNS,
    SchedulerRun,
    SchedulerSettings,
)
from scheduler_core.thresholds import default_queue_limit_ns, default_unknown_duration_ns

__all__ = [
    "HP_COMPLETION_MODES",
    "NATIVE_POLICIES",
    "TRACE_COLUMNS",
    "SchedulerRun",
    "SchedulerSettings",
    "check_preload_library",
    "default_queue_limit_ns",
    "default_unknown_duration_ns",
    "native_module",
    "preload_library_path",
]
