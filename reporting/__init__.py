"""Run directories → tables, ratios against a dedicated run, figures and a Markdown report.

Analysis functions return DataFrames (``metrics``, ``series``); ``plots`` draws them into PNG
files; ``summary`` puts both into ``report.md`` or a plain-JSON dict. Nothing here prints:
problems a user can fix raise :class:`orion_common.errors.OrionError`.
"""

from reporting.metrics import (
    BE_FRACTION_MIN,
    HP_P99_SLOWDOWN_MAX,
    client_summary,
    compare_runs,
    find_baseline,
    headline,
    percentile_summary,
    relative_to_dedicated,
    run_labels,
    scheduler_table,
    window_rows,
)
from reporting.plots import (
    plot_gpu_utilisation,
    plot_kernel_timeline,
    plot_latency_cdf,
    plot_latency_over_time,
    plot_tradeoff,
)
from reporting.rundata import ClientInfo, Environment, RunData, load_run, load_runs
from reporting.series import gpu_samples, kernel_slice, request_latencies
from reporting.summary import (
    ReportTables,
    environment_table,
    report_json,
    report_tables,
    run_warnings,
    verdicts,
    write_report,
)

__all__ = [
    "BE_FRACTION_MIN",
    "HP_P99_SLOWDOWN_MAX",
    "ClientInfo",
    "Environment",
    "ReportTables",
    "RunData",
    "client_summary",
    "compare_runs",
    "environment_table",
    "find_baseline",
    "gpu_samples",
    "headline",
    "kernel_slice",
    "load_run",
    "load_runs",
    "percentile_summary",
    "plot_gpu_utilisation",
    "plot_kernel_timeline",
    "plot_latency_cdf",
    "plot_latency_over_time",
    "plot_tradeoff",
    "relative_to_dedicated",
    "report_json",
    "report_tables",
    "request_latencies",
    "run_labels",
    "run_warnings",
    "scheduler_table",
    "verdicts",
    "window_rows",
    "write_report",
]
