"""`orion report RUN_DIR [RUN_DIR ...]`: tables in the terminal, pictures and a Markdown summary.

`reporting` (pandas, and matplotlib for the pictures) and the plan reader are imported inside
the functions that use them: `orion_cli.app` imports this module to register the command, and
`orion status`, `orion run`, `orion up` must start without loading them (a command started beside
a latency-critical service slowed its requests while it loaded pandas and matplotlib).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from orion_cli._common import console, fail, handle_errors
from orion_cli.console import print_table as print_any_table
from orion_cli.console import warn
from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError
from orion_common.output_paths import check_output_folder

if TYPE_CHECKING:
    import pandas as pd

    from reporting.plan_check import PlanCheck
    from reporting.rundata import RunData

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
    ("target_met", "target met", "target"),
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
_TAIL_VIEW = [
    ("run", "run", "{}"),
    ("client", "client", "{}"),
    ("slow_requests", "slow", "{}"),
    ("mean_latency_ms", "mean slow ms", "{:.2f}"),
    ("be_outstanding_ms", "BE at arrival ms", "{:.2f}"),
    ("share_be_outstanding", "share", "{:.0%}"),
    ("context_switch_ms", "switch wait ms", "{:.2f}"),
    ("share_context_switch", "share", "{:.0%}"),
    ("be_admitted_ms", "BE beside ms", "{:.2f}"),
    ("share_be_admitted", "share", "{:.0%}"),
    ("queue_ms", "HP queue ms", "{:.2f}"),
    ("share_queue", "share", "{:.0%}"),
    ("rest_ms", "rest ms", "{:.2f}"),
    ("share_rest", "share", "{:.0%}"),
    ("top_be_kernel", "top BE kernel", "{}"),
    ("reasons", "reasons beside", "{}"),
]

_MEMORY_VIEW = [
    ("run", "run", "{}"),
    ("client", "client", "{}"),
    ("role", "role", "{}"),
    ("peak_used_gib", "peak in use GiB", "{:.2f}"),
    ("limits_text", "limit GiB", "{}"),
    ("refused", "refused allocations", "{}"),
]


def _shares_view() -> list[tuple[str, str, str]]:
    """The shares table's view; a function, as its header names reporting's percentile."""
    from reporting.shares import SHARE_PERCENTILE

    return [
        ("run", "run", "{}"),
        ("client", "client", "{}"),
        ("role", "role", "{}"),
        ("window_s", "window s", "{:g}"),
        ("samples", "samples", "{}"),
        ("mean_share", "mean share", "{:.3f}"),
        ("p95_share", f"p{SHARE_PERCENTILE:g} share", "{:.3f}"),
        ("min_util", "min_util at end", "{:.3f}"),
        ("max_util", "max_util at end", "{:.3f}"),
        ("share_changes", "changes", "{}"),
    ]


def _plan_view() -> list[tuple[str, str, str]]:
    """The plan check's (column, header) view with terminal formats: text columns as they are,
    the yes/no columns worded as `target met` is."""
    from reporting.plan_check import PLAN_VIEW

    return [
        (name, header, "target" if name in ("within_tolerance", "slo_met") else "{}")
        for name, header in PLAN_VIEW
    ]


# Columns repeated in every part when a table is split to fit a narrow terminal.
_KEY_COLUMNS = ("run", "client")


def _cell(value: Any, spec: str) -> str:
    import pandas as pd

    if spec == "target":
        from reporting.summary import target_met_text

        return target_met_text(value)
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


def output_console() -> Console:
    """The console every command prints with (orion_cli.console: full width in pipes)."""
    return console


def print_table(
    out: Console, title: str, frame: pd.DataFrame, view: list[tuple[str, str, str]]
) -> None:
    """``frame`` as one table, or, where the terminal is too narrow for it, as several tables of
    fewer columns each (the run and client columns repeated in each), so no number is cut."""
    view = [column for column in view if column[0] in frame.columns]
    table = Table(title=title, title_justify="left")
    for _, header, spec in view:
        table.add_column(header, justify="left" if spec in ("{}", "target") else "right")
    for row in frame.to_dict("records"):
        table.add_row(*(_cell(row.get(name), spec) for name, _, spec in view))
    keys = 0
    while keys < len(view) and view[keys][0] in _KEY_COLUMNS:
        keys += 1
    print_any_table(table, keys=keys, out=out)


@handle_errors
def report_command(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR",
            help="One or more run directories written by `orion colocate`, one plan-run "
            "directory written by `orion run-plan plan.json`, or one suite run written by "
            "benchmarks/suite.py.",
        ),
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
            "the runs' common parent folder + /report for several). With --json, the JSON is "
            "written to DIR/report.json instead of printed.",
        ),
    ] = None,
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Write the pictures and report.md.")
    ] = True,
    strict: Annotated[
        bool,
        typer.Option(
            "--check",
            help="For CI: exit 1 (after the report) when a run is incomplete or a target is "
            "missed; an undecided target does not fail.",
        ),
    ] = False,
) -> None:
    """Latency percentiles, throughput and comparisons of co-location runs.

    With a `dedicated` run among the arguments, every other run is also shown relative to it:
    HP p99 slowdown (p99 shared / p99 alone) and BE throughput as a fraction of alone.

    Given a plan-run directory, reports every GPU's run and, per planned client, the measured
    HP p99 and BE throughput against the plan's predictions (within 10%?) and each HP's SLO.

    Given a suite run (benchmarks/suite.py), reports every program pair under each mode against
    its programs alone, the worst pair under orion and the geometric mean over pairs, and writes
    summary.json; --check then fails on failed cells or a missed target.
    """
    from reporting import report_json, write_report
    from reporting.plan_check import plan_report_json, write_plan_report
    from reporting.suite import is_suite_run

    if output is not None and (as_json or plots):
        check_output_folder(output, "report folder")
    out = output_console()
    if len(run_dirs) == 1 and is_suite_run(run_dirs[0]):
        report_suite(out, run_dirs[0], as_json=as_json, output=output, strict=strict)
        return
    runs, check = load_report_input(run_dirs)
    if as_json:
        data = plan_report_json(check) if check is not None else report_json(runs)
        text = json.dumps(data, indent=2, allow_nan=False)
        if output is None:
            typer.echo(text)
        else:
            path = output / "report.json"
            write_text_atomic(path, text + "\n")
            out.print(f"report: [bold]{path}[/]")
        if strict:
            _fail_the_check(runs, data.get("headline", []))
        return
    headline_rows: list[dict[str, Any]] = []
    if runs:
        headline_rows = print_runs(out, runs)
    if check is not None:
        print_plan_check(out, check)
    if plots:
        folder = output or default_output(run_dirs)
        path = write_plan_report(check, folder) if check is not None else write_report(runs, folder)
        out.print(f"report: [bold]{path}[/] (pictures beside it)")
    if strict:
        _fail_the_check(runs, headline_rows)


_SUITE_VIEW = [
    ("pair", "pair", "{}"),
    ("order", "joined", "{}"),
    ("mode", "mode", "{}"),
    ("rounds", "rounds", "{}"),
    ("hp_p99_ratio", "HP p99 / alone [95% CI]", "{}"),
    ("be_ratios", "BE throughput / alone [95% CI]", "{}"),
    ("status_slowdown", "HP slowdown in orion status", "{}"),
    ("service_mean_ratio", "HP service time / alone, mean [95% CI]", "{}"),
    ("failures", "failed", "{}"),
]


def report_suite(
    out: Console, folder: Path, *, as_json: bool, output: Path | None, strict: bool
) -> None:
    """A suite run (``benchmarks/suite.py``): every pair under every mode against alone, the
    worst pair under orion and the geometric mean; ``summary.json`` written beside its cells
    (or in ``--output``)."""
    from reporting.suite import summarise as summarise_suite
    from reporting.suite import summary_table as suite_summary_table

    summary = summarise_suite(folder)
    text = json.dumps(summary, indent=2, allow_nan=False)
    write_text_atomic((output or folder) / "summary.json", text + "\n")
    if as_json:
        typer.echo(text)
    else:
        frame = suite_summary_table(summary)
        print_any_table(_suite_table(frame, f"suite {summary['suite']}"), keys=3, out=out)
        print_any_table(_suite_modes_table(summary), out=out)
        for pair in summary["pairs"]:
            for doubt in pair.get("reference_doubts") or []:
                out.print(
                    f"reference in doubt: {pair['pair']} under {pair['mode']}: {doubt}",
                    highlight=False,
                    markup=False,
                )
        worst = summary["worst_pair"]
        if worst is not None:
            ratio = worst["hp_p99_ratio"]
            out.print(
                f"worst pair under orion: {worst['pair']}, HP p99 {ratio['ratio']:.2f}x of alone "
                f"[{ratio['low']:.2f}, {ratio['high']:.2f}]; geometric mean over pairs "
                f"{summary['geomean_hp_p99_ratio']:.2f}x",
                highlight=False,
                markup=False,
            )
        out.print(f"summary: {(output or folder) / 'summary.json'}", highlight=False, markup=False)
    if strict:
        failures = [f"cell {cell['cell']} failed" for cell in summary["failed_cells"]]
        if summary["target"]["met"] is False:
            failures.append("the suite's target is missed")
        if failures:
            raise fail(
                f"--check: {len(failures)} problem(s): {'; '.join(failures)}",
                hint="drop --check to report without failing",
            )


def _suite_table(frame: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for _, header, spec in _SUITE_VIEW:
        table.add_column(header, justify="left" if spec == "{}" else "right")
    for row in frame.to_dict("records"):
        table.add_row(*(escape(str(row.get(name, ""))) for name, _, _ in _SUITE_VIEW))
    return table


def _suite_modes_table(summary: dict[str, Any]) -> Table:
    """Each mode scored as the suite is, so variants and competitors compare at a glance."""
    target = summary["target"]
    table = Table(title="per mode, over the pairs it ran", title_justify="left")
    for header in ("mode", "pairs", "worst pair: HP p99 / alone [95% CI]", "geometric mean",
                   f"within {target['hp_p99_ratio_at_most']:g}x",
                   f"BE together {target['be_together_at_least']:g}+", "both"):  # fmt: skip
        table.add_column(header, justify="left" if header == "mode" else "right")
    for mode, score in summary.get("by_mode", {}).items():
        worst = score["worst_pair"]
        ratio = None if worst is None else worst["hp_p99_ratio"]
        geomean = score["geomean_hp_p99_ratio"]
        table.add_row(
            escape(mode),
            str(score["pairs"]),
            "-"
            if ratio is None or ratio["ratio"] is None
            else escape(
                f"{ratio['ratio']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}] ({worst['pair']})"
            ),
            "-" if geomean is None else f"{geomean:.2f}",
            str(score["pairs_within_target"]),
            str(score["pairs_with_be_at_target"]),
            str(score["pairs_meeting_both"]),
        )
    return table


def check_failures(runs: list[RunData], headline_rows: list[dict[str, Any]]) -> list[str]:
    """What `--check` fails on: runs that are not complete, and targets missed (False)."""
    failures = [
        f"run {run.path} is not complete ({run.status})" for run in runs if not run.complete
    ]
    failures += [
        f"run {row['run']} missed the target"
        for row in headline_rows
        if row.get("target_met") is False
    ]
    return failures


def _fail_the_check(runs: list[RunData], headline_rows: list[dict[str, Any]]) -> None:
    failures = check_failures(runs, headline_rows)
    if failures:
        raise fail(
            f"--check: {len(failures)} problem(s): {'; '.join(failures)}",
            hint="drop --check to report without failing",
        )


def load_report_input(run_dirs: list[Path]) -> tuple[list[RunData], PlanCheck | None]:
    """The runs to report on and, for a plan-run directory (``orion run-plan plan.json``), its
    plan check, whose GPU runs are the runs. A plan run is reported on its own: its GPUs' runs
    are its report, and a second argument would mix another run into the plan's verdict."""
    from placement.plan_file import load_plan
    from reporting import load_runs
    from reporting.plan_check import check_plan, is_plan_run, read_plan_run

    plan_dirs = [path for path in run_dirs if is_plan_run(path)]
    if not plan_dirs:
        return load_runs(run_dirs), None
    if len(run_dirs) > 1:
        raise OrionError(
            f"{plan_dirs[0]} is a plan-run directory, which is reported on its own",
            hint="run `orion report PLAN_RUN_DIR` alone; its GPUs' runs are all in its report",
        )
    plan_run = read_plan_run(plan_dirs[0])
    check = check_plan(load_plan(plan_run.plan_path), plan_run)
    return list(check.runs), check


def print_runs(out: Console, runs: list[RunData]) -> list[dict[str, Any]]:
    """The usual tables, verdicts and warnings of ``runs``; returns the headline rows."""
    from reporting import report_tables
    from reporting.memory import with_limits_text

    tables = report_tables(runs)
    for run, label in zip(runs, tables.labels, strict=True):
        if not run.complete:
            out.print(
                Panel(
                    incomplete_banner(run, label),
                    style="yellow",
                    title="incomplete run",
                    expand=False,
                ),
                soft_wrap=False,
            )
    print_table(out, "clients", tables.clients, _CLIENT_VIEW)
    if len(runs) > 1 or not tables.relative.empty:
        headline = _with_interval_text(tables.headline)
        print_table(out, "policies side by side", headline, _HEADLINE_VIEW)
    if not tables.gpu.empty and tables.gpu["samples"].gt(0).any():
        print_table(out, "GPU during the window (NVML)", tables.gpu, _GPU_VIEW)
    if len(tables.memory):
        memory = with_limits_text(tables.memory)
        print_table(out, "GPU memory per client (orion's count)", memory, _MEMORY_VIEW)
    if len(tables.shares):
        title = "GPU time share per client (gate keeper, after the first quota window)"
        print_table(out, title, tables.shares, _shares_view())
    traced = tables.tail[tables.tail["traced"].astype(bool)] if len(tables.tail) else tables.tail
    if len(traced):
        print_table(out, "where the HP tail comes from (requests above p95)", traced, _TAIL_VIEW)
    for row in tables.tail.to_dict("records"):
        if not row["traced"]:
            note = str(row["note"]).replace("`", "")
            out.print(f"- {row['run']} ({row['client']}): {note}", highlight=False)
    for verdict in tables.verdicts:
        out.print(f"- {verdict}", highlight=False)
    for warning in tables.warnings:
        warn(warning)
    return tables.headline.to_dict("records")


def incomplete_banner(run: RunData, label: str) -> str:
    """What is really wrong with a run that is not complete: its status, or the tables that do
    not hold what its writer recorded (a run can say ``complete`` and still be damaged)."""
    if run.status == "complete" and run.cut_tables:
        return (
            f"run {label} finished, but {', '.join(run.cut_tables)} "
            f"{'is' if len(run.cut_tables) == 1 else 'are'} damaged (see the warnings): "
            "read as incomplete; figures from damaged tables are left out or wrong"
        )
    return (
        f"run {label} is [bold]{run.status}[/]: it did not finish normally; "
        "its numbers cover only what was recorded"
    )


def print_plan_check(out: Console, check: PlanCheck) -> None:
    """The plan section: each planned client's measured figure against the plan's, the verdict
    and what keeps GPUs from being judged. Printed last, where a reader of a plan run looks."""
    from reporting.plan_check import SECTION_HEADING, display_frame

    if not len(check.rows):
        out.print(f"{SECTION_HEADING}: the plan places no clients", highlight=False)
    else:
        print_table(out, SECTION_HEADING, display_frame(check.rows), _plan_view())
    for sentence in check.summary:
        out.print(f"- {sentence}", highlight=False)
    for warning in check.warnings:
        warn(warning)


def default_output(run_dirs: list[Path]) -> Path:
    """``RUN_DIR/report`` for one run; for several, ``report`` in the runs' common parent folder,
    so the report lies beside the results rather than in the current directory."""
    if len(run_dirs) == 1:
        return run_dirs[0] / "report"
    return Path(os.path.commonpath([str(path.absolute()) for path in run_dirs])) / "report"
