"""Run Nsight Compute over exactly one steady-state step, plus an un-instrumented timing pass.

The public entry points are :func:`profile_workload` (a live run on this machine's GPU),
:func:`profile_program` (any program, over the window it is given: :mod:`profiler.program`) and
:func:`profile_from_ncu` (post-processing redone from a saved ncu CSV, no GPU needed).
Attributes are imported on first use: ``python -m profiler.target`` runs inside ncu and should not
pay for pandas before it needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ProfileResult": "profiler.pipeline",
    "ProgressListener": "profiler.pipeline",
    "check_prerequisites": "profiler.pipeline",
    "profile_from_ncu": "profiler.pipeline",
    "profile_workload": "profiler.pipeline",
    "ProgramTarget": "profiler.program",
    "Window": "profiler.program",
    "choose_window": "profiler.program",
    "profile_program": "profiler.program_run",
    "NcuRun": "profiler.ncu_runner",
    "build_import_command": "profiler.ncu_runner",
    "build_ncu_command": "profiler.ncu_runner",
    "run_ncu": "profiler.ncu_runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'profiler' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
