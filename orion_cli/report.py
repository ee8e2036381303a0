"""`orion report RUN_DIR [RUN_DIR ...]`: tables in the terminal, pictures and a Markdown summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.panel import Panel
from rich.table import Table

from orion_cli._common import console, handle_errors
from reporting import load_runs, report_json, report_tables, write_report

# (column, header, format) for each table; formats are str.format specs.
_CLIENT_VIEW = [
    ("run", "run", "{}"),
    ("client", "client", "{}"),
    ("role", "role", "{}"),
    ("workload", "workload", "{}"),
    ("mode", "mode", "{}"),
    ("count", "requests/iters", "{:.0f}"),
    ("p50_ms", "p50 ms", "{:.2f}"),
    ("p95_ms", "p95 ms", "{:.2f}"),
    ("p99_ms", "p99 ms", "{:.2f}"),
    ("max_ms", "max ms", "{:.2f}"),
    ("throughput_per_s", "per s", "{:.2f}"),
    ("samples_per_s", "samples/s", "{:.1f}"),
    ("errors", "errors", "{}"),
]
_HEADLINE_VIEW = [
    ("run", "run", "{}"),
    ("policy", "policy", "{}"),
    ("hp_p99_text", "HP p99 ms [95% CI]", "{}"),
    ("hp_p99_slowdown_text", "HP p99 / alone [95% CI]", "{}"),
    ("be_throughput_per_s", "BE per s", "{:.2f}"),
    ("be_throughput_fraction_text", "BE / alone [95% CI]", "{}"),
    ("target_met", "target met", "{}"),
]
# Each figure with its bootstrap interval: (value column, interval columns, format).
_INTERVAL_TEXT = {
    "hp_p99_text": ("hp_p99_ms", "hp_p99_ci_lo_ms", "hp_p99_ci_hi_ms", "{:.2f}"),
    "hp_p99_slowdown_text": (
        "hp_p99_slowdown",
        "hp_p99_slowdown_ci_lo",
        "hp_p99_slowdown_ci_hi",
        "{:.3f}",
    ),
    "be_throughput_fraction_text": (
        "be_throughput_fraction",
        "be_throughput_fraction_ci_lo",
        "be_throughput_fraction_ci_hi",
        "{:.3f}",
    ),
}
_GPU_VIEW = [
    ("run", "run", "{}"),
    ("samples", "samples", "{}"),
    ("sm_util_median_pct", "SM util % (median)", "{:.0f}"),
    ("sm_clock_median_mhz", "SM MHz (median)", "{:.0f}"),
    ("sm_clock_min_mhz", "SM MHz (min)", "{:.0f}"),
    ("mem_clock_median_mhz", "memory MHz (median)", "{:.0f}"),
]


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value is pd.NA:
        return "-"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def _with_interval_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``value [lo, hi]`` columns for the terminal; the bare value when no interval is known."""
    frame = frame.copy()
    for name, (value, lo, hi, spec) in _INTERVAL_TEXT.items():
        if value not in frame.columns:
            continue
        texts = []
        for row in frame.to_dict("records"):
            text = _cell(row.get(value), spec)
            bounds = (_cell(row.get(lo), spec), _cell(row.get(hi), spec))
            if text != "-" and "-" not in bounds:
                text += f" [{bounds[0]}, {bounds[1]}]"
            texts.append(text)
        frame[name] = texts
    return frame


def _table(title: str, frame: pd.DataFrame, view: list[tuple[str, str, str]]) -> Table:
    table = Table(title=title, title_justify="left")
    columns = [(name, header, spec) for name, header, spec in view if name in frame.columns]
    for _, header, spec in columns:
        table.add_column(header, justify="left" if spec == "{}" else "right")
    for row in frame.to_dict("records"):
        table.add_row(*(_cell(row.get(name), spec) for name, _, spec in columns))
    return table


@handle_errors
def report_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="One or more run directories written by `orion colocate`.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the figures as JSON for scripts, nothing else.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write report.md and the PNGs (default: RUN_DIR/report for one run, "
            "./orion-report for several).",
        ),
    ] = None,
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Write the pictures and report.md.")
    ] = True,
) -> None:
    """Latency percentiles, throughput and comparisons of co-location runs.

    With a `dedicated` run among the arguments, every other run is also shown relative to it:
    HP p99 slowdown (p99 shared / p99 alone) and BE throughput as a fraction of alone.
    """
    runs = load_runs(run_dirs)
    if as_json:
        typer.echo(json.dumps(report_json(runs), indent=2, allow_nan=False))
        return
    tables = report_tables(runs)
    for run, label in zip(runs, tables.labels, strict=True):
        if not run.complete:
            console.print(
                Panel(
                    f"run {label} is [bold]{run.status}[/]: it did not finish normally; "
                    "its numbers cover only what was recorded",
                    style="yellow",
                    title="incomplete run",
                )
            )
    console.print(_table("clients", tables.clients, _CLIENT_VIEW))
    if len(runs) > 1 or not tables.relative.empty:
        headline = _with_interval_text(tables.headline)
        console.print(_table("policies side by side", headline, _HEADLINE_VIEW))
    if not tables.gpu.empty and tables.gpu["samples"].gt(0).any():
        console.print(_table("GPU during the window (NVML)", tables.gpu, _GPU_VIEW))
    for verdict in tables.verdicts:
        console.print(f"- {verdict}", highlight=False)
    for warning in tables.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if plots:
        out_dir = output or (run_dirs[0] / "report" if len(run_dirs) == 1 else Path("orion-report"))
        path = write_report(runs, out_dir)
        console.print(f"report: [bold]{path}[/] (pictures beside it)")
