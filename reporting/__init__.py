"""Run directories → tables, ratios against a dedicated run, figures and a Markdown report.

Analysis functions return DataFrames (``metrics``, ``series``); ``stats`` gives the bootstrap
intervals every p99 and ratio carries; ``plots`` draws them into PNG files; ``tail`` attributes
each slow HP request to what delayed it; ``memory`` and ``shares`` follow each client's GPU
memory and share of GPU time against their live limits (``per_client``: what the two have in
common); ``summary`` puts all of it into ``report.md`` or a plain-JSON dict; ``benchmark``
sums a benchmark scenario's rounds up into ``summary.json``. Nothing here prints: problems a
user can fix raise :class:`orion_common.errors.OrionError`.
"""

from reporting.benchmark import build_summary, load_summary, validate_summary
from reporting.memory import memory_series, memory_summary
from reporting.metrics import (
    BE_FRACTION_MIN,
    HP_P99_SLOWDOWN_MAX,
    client_summary,
    compare_runs,
    find_baseline,
    headline,
    latency_sample,
    measured_window,
    percentile_summary,
    relative_to_dedicated,
    run_labels,
    scheduler_table,
    window_rows,
    work_sample,
)
from reporting.plots import (
    plot_gpu_shares_over_time,
    plot_gpu_utilisation,
    plot_kernel_timeline,
    plot_latency_cdf,
    plot_latency_over_time,
    plot_memory_over_time,
    plot_tail_attribution,
    plot_tradeoff,
)
from reporting.rundata import ClientInfo, Environment, RunData, load_run, load_runs
from reporting.series import gpu_clock_summary, gpu_samples, kernel_slice, request_latencies
from reporting.shares import shares_series, shares_summary
from reporting.stats import bootstrap_percentile_ci, ratio_over_rounds_ci
from reporting.summary import (
    ReportTables,
    environment_table,
    report_json,
    report_tables,
    run_warnings,
    tail_lines,
    verdicts,
    write_report,
)
from reporting.tail import (
    LatencySplit,
    be_launches,
    service_alone_ms,
    slow_requests,
    split_latency,
    tail_summary,
)

__all__ = [
    "BE_FRACTION_MIN",
    "HP_P99_SLOWDOWN_MAX",
    "ClientInfo",
    "Environment",
    "LatencySplit",
    "ReportTables",
    "RunData",
    "be_launches",
    "bootstrap_percentile_ci",
    "build_summary",
    "client_summary",
    "compare_runs",
    "environment_table",
    "find_baseline",
    "gpu_clock_summary",
    "gpu_samples",
    "headline",
    "kernel_slice",
    "latency_sample",
    "load_run",
    "load_runs",
    "load_summary",
    "measured_window",
    "memory_series",
    "memory_summary",
    "percentile_summary",
    "plot_gpu_shares_over_time",
    "plot_gpu_utilisation",
    "plot_kernel_timeline",
    "plot_latency_cdf",
    "plot_latency_over_time",
    "plot_memory_over_time",
    "plot_tail_attribution",
    "plot_tradeoff",
    "ratio_over_rounds_ci",
    "relative_to_dedicated",
    "report_json",
    "report_tables",
    "request_latencies",
    "run_labels",
    "run_warnings",
    "scheduler_table",
    "service_alone_ms",
    "shares_series",
    "shares_summary",
    "slow_requests",
    "split_latency",
    "tail_lines",
    "tail_summary",
    "validate_summary",
    "verdicts",
    "window_rows",
    "work_sample",
    "write_report",
]
