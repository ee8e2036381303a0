"""Run directories → tables, ratios against a dedicated run, figures and a Markdown report.

Analysis functions return DataFrames (``metrics``, ``series``); ``stats`` gives the bootstrap
intervals every p99 and ratio carries; ``plots`` draws them into PNG files; ``tail`` attributes
each slow HP request to what delayed it; ``memory`` and ``shares`` follow each client's GPU
memory and share of GPU time against their live limits (``per_client``: what the two have in
common); ``summary`` puts all of it into ``report.md`` or a plain-JSON dict; ``benchmark``
sums a benchmark scenario's rounds up into ``summary.json``. Nothing here prints: problems a
user can fix raise :class:`orion_common.errors.OrionError`.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each module with the public names it gives the package, imported on first use (PEP 562): every
# module here loads pandas, and ``plots`` matplotlib, so ``import reporting.shares`` (or a
# command that imports one small piece, as `orion report` does for the plan check) pays only for
# what it uses, and `orion status` or `orion run` beside a latency-critical service for none.
_SOURCES: dict[str, tuple[str, ...]] = {
    "reporting.benchmark": ("build_summary", "load_summary", "validate_summary"),
    "reporting.memory": ("memory_series", "memory_summary"),
    "reporting.metrics": (
        "BE_FRACTION_MIN",
        "HP_P99_SLOWDOWN_MAX",
        "client_summary",
        "compare_runs",
        "find_baseline",
        "headline",
        "latency_sample",
        "measured_window",
        "percentile_summary",
        "relative_to_dedicated",
        "run_labels",
        "scheduler_table",
        "window_rows",
        "work_sample",
    ),
    "reporting.plots": (
        "plot_gpu_shares_over_time",
        "plot_gpu_utilisation",
        "plot_kernel_timeline",
        "plot_latency_cdf",
        "plot_latency_over_time",
        "plot_memory_over_time",
        "plot_tail_attribution",
        "plot_tradeoff",
    ),
    "reporting.rundata": ("ClientInfo", "Environment", "RunData", "load_run", "load_runs"),
    "reporting.series": ("gpu_clock_summary", "gpu_samples", "kernel_slice", "request_latencies"),
    "reporting.shares": ("shares_series", "shares_summary"),
    "reporting.stats": ("bootstrap_percentile_ci", "ratio_over_rounds_ci"),
    "reporting.summary": (
        "ReportTables",
        "environment_table",
        "report_json",
        "report_tables",
        "run_warnings",
        "tail_lines",
        "verdicts",
        "write_report",
    ),
    "reporting.tail": (
        "LatencySplit",
        "be_launches",
        "service_alone_ms",
        "slow_requests",
        "split_latency",
        "tail_summary",
    ),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """``reporting.NAME`` (and ``from reporting import NAME``): NAME from its module, which is
    imported now; kept in the package's namespace so the next look-up is a plain one."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
