"""What `orion profile` shows: progress while it runs, and the summary of the profile it made.

Kept apart from the command (:mod:`orion_cli.profile`), which checks what the user typed: these
views need the profiler (the listeners are its :class:`~profiler.pipeline.ProgressListener`),
so this module is imported only once a profile is made, and `orion --help` does not pay for
the profiler's imports.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from orion_cli._common import console, interactive
from orion_cli.console import print_table, warn
from profiler.pipeline import ProgressListener

if TYPE_CHECKING:
    import pandas as pd

    from profiler.pipeline import ProfileResult

_PHASE_LABELS = {
    "measure": "measuring (un-instrumented pass)",
    "ncu": "profiling with ncu",
    "postprocess": "post-processing",
}
_PATH_LABELS = {"ncu_report": "ncu report (Nsight Compute GUI)"}
_TOP_KERNELS = 10
_NAME_WIDTH = 52
_BAR_WIDTH = 30


# --- progress -------------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class RichListener(ProgressListener):
    """A live bar per phase; kernels profiled of the total, with time remaining."""

    def __init__(self, progress: Progress, application_replay: bool) -> None:
        self.progress = progress
        self.application_replay = application_replay
        self.task: Any = None
        self.total: int | None = None
        self.passes = 0
        self.done = 0

    def phase_started(
        self, phase: str, *, total: int | None = None, estimate_s: float | None = None
    ) -> None:
        label = _PHASE_LABELS.get(phase, phase)
        if estimate_s:
            label += f" (first guess: {_seconds(estimate_s)})"
        self.total, self.passes, self.done = total, 0, 0
        self.task = self.progress.add_task(label, total=total, count="")

    def kernel_profiled(self, done: int, total: int | None, name: str) -> None:
        self.done = done
        if total is not None:
            self.progress.update(
                self.task, completed=done, total=total, count=f"{done}/{total} kernels"
            )
        else:
            self.progress.update(
                self.task,
                completed=done,
                count=f"{done} kernels",
                description=self._unknown_total_text(),
            )

    def ncu_pass(self, number: int) -> None:
        self.passes = number
        if self.total is None:
            self.progress.update(self.task, description=self._unknown_total_text())

    def _unknown_total_text(self) -> str:
        """Without a total: which pass under application replay (a program's window under
        kernel replay has one pass, and its length is not known in advance)."""
        if not self.application_replay:
            return "profiling with ncu:"
        return f"profiling with ncu (application replay), pass {max(self.passes, 1)}:"

    def phase_finished(self, phase: str, seconds: float) -> None:
        total = self.total if self.total is not None else max(self.done, 1)
        self.progress.update(
            self.task,
            total=total,
            completed=total,
            description=f"{_PHASE_LABELS.get(phase, phase)}: done in {_seconds(seconds)}",
        )


class PlainListener(ProgressListener):
    """Plain lines for logs and pipes: phase boundaries and every tenth of the kernels."""

    def __init__(self, application_replay: bool) -> None:
        self.application_replay = application_replay
        self.next_report = 0
        self.step = 50

    def phase_started(
        self, phase: str, *, total: int | None = None, estimate_s: float | None = None
    ) -> None:
        text = f"{_PHASE_LABELS.get(phase, phase)}"
        if total is not None:
            text += f": {total} kernels"
        if estimate_s:
            text += f" (first guess: {_seconds(estimate_s)})"
        console.print(text + " ...", highlight=False)
        self.step = max(1, math.ceil(total / 10)) if total else 50
        self.next_report = self.step

    def kernel_profiled(self, done: int, total: int | None, name: str) -> None:
        if done >= self.next_report or (total is not None and done == total):
            of = f"/{total}" if total is not None else ""
            console.print(f"  ncu: {done}{of} kernels profiled", highlight=False)
            self.next_report = done + self.step

    def ncu_pass(self, number: int) -> None:
        if number > 1 and self.application_replay:
            console.print(f"  ncu: pass {number}", highlight=False)
            self.next_report = self.step

    def phase_finished(self, phase: str, seconds: float) -> None:
        label = _PHASE_LABELS.get(phase, phase)
        console.print(f"{label}: done in {_seconds(seconds)}", highlight=False)


@contextmanager
def progress_listener(application_replay: bool = True) -> Iterator[ProgressListener]:
    """``application_replay``: whether a phase without a kernel total is application replay's
    (a workload's ncu phase has a total otherwise; a program's window may not)."""
    if not interactive():
        yield PlainListener(application_replay)
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}", justify="right"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        yield RichListener(progress, application_replay)


# --- summary --------------------------------------------------------------------------------------


def short_kernel_name(name: str, limit: int | None = _NAME_WIDTH) -> str:
    """``void at::native::f<float, 4>(int, float*)`` -> ``at::native::f<...>``, then namespaces
    dropped from the left until it fits ``limit`` (``None``: keep them all): a table needs which
    kernel, not its signature; the full name is in the profile."""
    text = str(name).strip().removeprefix("void ")
    text = text.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    out: list[str] = []
    depth = 0
    for char in text:
        if char == "<":
            if depth == 0:
                out.append("<...>")
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif char == "(" and depth == 0 and out:
            break
        elif depth == 0:
            out.append(char)
    short = "".join(out).strip() or text
    if limit is None:
        return short
    while len(short) > limit and "::" in short:
        short = short.split("::", 1)[1]
    return short if len(short) <= limit else short[: limit - 3] + "..."


def _ms(ns: float) -> str:
    return "-" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else f"{ns / 1e6:.3f}"


def _dims(row: Any, prefix: str) -> str:
    values = [row[f"{prefix}_{axis}"] for axis in "xyz"]
    return "x".join("?" if _missing(value) else str(int(value)) for value in values)


def _missing(value: Any) -> bool:
    try:
        return bool(value is None or math.isnan(float(value)))
    except (TypeError, ValueError):
        return False


def _bar(part: float, whole: float) -> str:
    if whole <= 0 or part <= 0:
        return ""
    return "█" * max(1, round(_BAR_WIDTH * part / whole))


def show_summary(result: ProfileResult) -> None:
    """The short report after profiling: where things are, how long, and what the job looks like."""
    console.print()
    console.print(f"[bold green]profile written:[/] {result.profile_path}", highlight=False)
    _paths_table(result)
    _timings_table(result)
    _kernel_counts(result)
    _classes_table(result)
    _top_kernels_table(result)
    _sm_histogram_table(result)
    _match_line(result)
    for warning in result.warnings:
        warn(warning)


def _paths_table(result: ProfileResult) -> None:
    table = Table(title="files", title_justify="left", show_header=False, box=None)
    table.add_column("what", style="bold")
    table.add_column("path", overflow="fold")
    for name, path in result.paths.items():
        if name == "profile" or not Path(path).exists():
            continue
        label = _PATH_LABELS.get(name, name.replace("_", " "))
        table.add_row(label, str(path))
    print_table(table)


def _timings_table(result: ProfileResult) -> None:
    table = Table(title="wall time", title_justify="left")
    table.add_column("phase")
    table.add_column("time", justify="right")
    labels = {
        "measure_s": "measuring",
        "ncu_s": "ncu",
        "ncu_import_s": "  of which report -> CSV",
        "postprocess_s": "post-processing",
        "total_s": "total",
    }
    for key, label in labels.items():
        if key in result.timings:
            table.add_row(label, _seconds(result.timings[key]))
    print_table(table)


def _kernel_counts(result: ProfileResult) -> None:
    where = "in the profiled step" if result.window is None else f"profiled, {result.window},"
    text = (
        f"[bold]{result.kernel_count}[/] kernels {where} "
        f"({result.summary.identity_count} distinct name/grid/block)"
    )
    if result.measured_kernels is not None:
        text += f"; the measured step launched {result.measured_kernels}"
    if result.replay_mode:
        text += f"; ncu replay mode: {result.replay_mode}"
    console.print(text, highlight=False)
    console.print(_throughput_line(result.profile.metadata), highlight=False)


_THROUGHPUT_SOURCES = {
    "sol": "ncu's SOL metrics",
    "sub-metric-max": "the maximum of their main SOL sub-metrics (a lower bound of SOL)",
}


def _throughput_line(metadata: dict[str, Any]) -> str:
    """Which metric set the profile used and how its throughputs were computed."""
    metric_set = metadata.get("metric_set") or "unknown"
    sources = metadata.get("throughput_source") or {}
    described = {_THROUGHPUT_SOURCES.get(str(how), str(how)) for how in sources.values()}
    if len(described) == 1:
        how = described.pop()
    elif described:
        how = ", ".join(f"{column}: {value}" for column, value in sources.items())
    else:
        how = "not recorded"
    return f"metric set: {metric_set}; throughputs from {how}"


def _classes_table(result: ProfileResult) -> None:
    table = Table(title="time by kernel class", title_justify="left")
    table.add_column("class")
    table.add_column("kernels", justify="right")
    table.add_column("ncu ms", justify="right")
    table.add_column("ncu %", justify="right")
    measured = result.measured_summary
    if measured is not None:
        table.add_column("measured ms", justify="right")
        table.add_column("measured %", justify="right")
    for index, row in result.summary.by_class.iterrows():
        cells = [
            str(row["kernel_class"]),
            str(int(row["kernels"])),
            _ms(row["duration_ns"]),
            f"{row['share_pct']:.1f}",
        ]
        if measured is not None:
            other = measured.by_class.loc[index]
            cells += [_ms(other["duration_ns"]), f"{other['share_pct']:.1f}"]
        table.add_row(*cells)
    print_table(table)


def _top_kernels_table(result: ProfileResult) -> None:
    summary = result.measured_summary or result.summary
    which = "measured" if result.measured_summary is not None else "ncu (replayed)"
    top: pd.DataFrame = summary.top_kernels.head(_TOP_KERNELS)
    table = Table(title=f"top {len(top)} kernels by {which} time", title_justify="left")
    # template arguments elided (<...>); the whole name is in the profile
    table.add_column("kernel")
    table.add_column("grid")
    table.add_column("block")
    table.add_column("launches", justify="right")
    table.add_column("class")
    table.add_column("SMs", justify="right")
    table.add_column("ms", justify="right")
    table.add_column("%", justify="right")
    for _, row in top.iterrows():
        table.add_row(
            short_kernel_name(row["demangled_name"], limit=None),
            _dims(row, "grid"),
            _dims(row, "block"),
            str(int(row["launches"])),
            str(row["kernel_class"]),
            "?" if _missing(row["sm_needed"]) else str(int(row["sm_needed"])),
            _ms(row["duration_ns"]),
            f"{row['share_pct']:.1f}",
        )
    print_table(table)


def _sm_histogram_table(result: ProfileResult) -> None:
    summary = result.measured_summary or result.summary
    histogram = summary.sm_needed_histogram
    sm_count = result.profile.metadata.get("sm_count")
    title = "SMs each kernel needs" + (f" (of {sm_count})" if sm_count else "")
    table = Table(title=title, title_justify="left")
    table.add_column("SMs needed")
    table.add_column("kernels", justify="right")
    table.add_column("")
    table.add_column("ms", justify="right")
    most = float(histogram["kernels"].max()) if len(histogram) else 0.0
    for _, row in histogram.iterrows():
        table.add_row(
            str(row["bin"]),
            str(int(row["kernels"])),
            f"[cyan]{_bar(float(row['kernels']), most)}[/]",
            _ms(row["duration_ns"]),
        )
    print_table(table)


def _match_line(result: ProfileResult) -> None:
    report = result.match_report
    if report is None:
        console.print("measured durations: none (no measured kernel table)")
        return
    text = (
        f"measured durations: {report.matched} of {result.kernel_count} kernels matched"
        f" ({report.only_in_ncu} only in ncu, {report.only_in_measured} only in the measured pass"
    )
    if report.matched_by_base_name:
        text += f", {report.matched_by_base_name} by bare function name"
    console.print(text + ")", highlight=False)
