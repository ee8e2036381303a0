"""`orion profile`: Nsight Compute over one step of a workload, or over a window of any program
(`orion profile [window] -- CMD`) -> the scheduler's profile file.

The work is :func:`profiler.pipeline.profile_workload`, :func:`profiler.program_run.
profile_program` (or :func:`~profiler.pipeline.profile_from_ncu` for ``--from-ncu``); this module
only validates the request, shows progress and prints the summary. The profiler is imported inside
the command so that ``orion --help`` stays fast.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from typer.core import TyperCommand

from orion_cli._common import (
    BatchSizeOpt,
    CudaGraphOpt,
    DTypeOpt,
    ModeOpt,
    as_usage,
    console,
    handle_errors,
    interactive,
)
from orion_cli.console import print_table, warn
from orion_common.errors import OrionError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pandas as pd

    from profiler.pipeline import ProfileResult, ProgressListener

PROGRAM_KEY = "orion.profile.program"
"""Where :class:`ProfileCommand` leaves the program (everything after ``--``) in ``ctx.meta``."""
WORKLOAD_ONLY = ("mode", "batch_size", "dtype", "warmup", "from_ncu", "measured")
PROGRAM_ONLY = ("name", "window", "skip", "count")

ProfileWorkloadArg = Annotated[
    str | None,
    typer.Argument(
        metavar="WORKLOAD",
        help="Workload name (see `orion workloads`); or, instead, a program after `--`.",
        show_default=False,
    ),
]
NameOpt = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="Program only: the profile's name, its folder under the profile root (default: "
        "the program's name: serve_resnet for `python serve_resnet.py`).",
        show_default=False,
    ),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        metavar="WINDOW",
        help="Program only, which kernels to profile: profiler-api (between the program's own "
        "cudaProfilerStart and cudaProfilerStop: torch.cuda.profiler.start()/stop()) or "
        "nvtx:RANGE (inside its NVTX push/pop range RANGE: torch.cuda.nvtx.range_push('step') "
        "... range_pop()). ncu waits for the program to exit.",
        show_default=False,
    ),
]
SkipOpt = Annotated[
    int | None,
    typer.Option(
        "--skip",
        metavar="N",
        help="Program only, with --count: skip the first N kernel launches (default 0).",
        show_default=False,
    ),
]
CountOpt = Annotated[
    int | None,
    typer.Option(
        "--count",
        metavar="M",
        help="Program only: profile M kernel launches (after --skip), then ncu ends the program.",
        show_default=False,
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Folder for the profile and ncu's raw output (default: the profile folder the "
        "scheduler searches, per GPU, or for a program the folder of its --name beside it; "
        "with --from-ncu, the CSV's folder, where an existing profile.csv is never replaced).",
        show_default=False,
    ),
]
ReplayModeOpt = Annotated[
    str | None,
    typer.Option(
        "--replay-mode",
        help="ncu replay mode: kernel (default for infer and programs) or application (default "
        "for train: kernel replay saves and restores all GPU memory per kernel pass).",
        show_default=False,
    ),
]
MetricSetOpt = Annotated[
    str | None,
    typer.Option(
        "--metric-set",
        help="ncu metrics: fast (default; each throughput is the maximum of its main "
        "sub-metrics, a lower bound of ncu's SOL value: 4 replay passes per kernel) or full "
        "(ncu's exact SOL throughputs: 10 passes). On an H200, ResNet-50 bs4 inference takes "
        "55 s with fast and 83 s with full.",
        show_default=False,
    ),
]
WarmupOpt = Annotated[
    int | None,
    typer.Option(
        "--warmup",
        help="Warm-up steps before the profiled one (default: 10 infer, 3 train).",
        show_default=False,
    ),
]
FromNcuOpt = Annotated[
    Path | None,
    typer.Option(
        "--from-ncu",
        help="Re-make the profile from a saved ncu raw CSV (ncu_raw.csv) without a GPU.",
        show_default=False,
    ),
]
MeasuredOpt = Annotated[
    Path | None,
    typer.Option(
        "--measured",
        help="With --from-ncu: the measured kernel table (default: measured.csv beside it).",
        show_default=False,
    ),
]

_PHASE_LABELS = {
    "measure": "measuring (un-instrumented pass)",
    "ncu": "profiling with ncu",
    "postprocess": "post-processing",
}
_PATH_LABELS = {"ncu_report": "ncu report (Nsight Compute GUI)"}
_TOP_KERNELS = 10
_NAME_WIDTH = 52
_BAR_WIDTH = 30


class ProfileCommand(TyperCommand):
    """`orion profile`, whose arguments after ``--`` are a program's, set aside before click
    parses the rest: the program's own options never meet orion's, and ``WORKLOAD -- CMD`` can
    be told apart from ``-- CMD`` (click itself drops the ``--``)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[PROGRAM_KEY] = list(args[at + 1 :])
            args = args[:at]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- CMD [ARGS]...]"]


@handle_errors
def profile_command(
    ctx: typer.Context,
    workload: ProfileWorkloadArg = None,
    mode: ModeOpt = "infer",
    batch_size: BatchSizeOpt = 1,
    dtype: DTypeOpt = "fp32",
    cuda_graph: CudaGraphOpt = False,
    output: OutputOpt = None,
    replay_mode: ReplayModeOpt = None,
    metric_set: MetricSetOpt = None,
    warmup: WarmupOpt = None,
    from_ncu: FromNcuOpt = None,
    measured: MeasuredOpt = None,
    name: NameOpt = None,
    window: WindowOpt = None,
    skip: SkipOpt = None,
    count: CountOpt = None,
) -> None:
    """Profile one steady-state step of a workload, or a window of any program, with Nsight
    Compute.

    A workload: an un-instrumented pass times the kernels, then ncu profiles exactly one step.

    A program (after --): ncu profiles the window you choose, one of three ways, and nothing
    else (a whole program kernel by kernel under ncu takes hours, and starts with its start-up):

    \b
      --window profiler-api    between its cudaProfilerStart and cudaProfilerStop
      --window nvtx:RANGE      inside its NVTX push/pop range RANGE
      --skip N --count M       kernel launches N+1 to N+M; then ncu ends it

    The result is the per-kernel profile the scheduler reads (orion run --profile PATH).

    \b
    Examples:
      orion profile resnet50 --mode infer -b 4
      orion profile --window profiler-api -- python serve_resnet.py
      orion profile --window nvtx:step --name web -- python serve.py --port 8000
      orion profile --skip 2000 --count 300 -- ./my_cuda_program
      orion profile --cuda-graph --window profiler-api -- python serve_graph.py

    Needs an NVIDIA GPU, ncu and GPU counter permission (not with --from-ncu).
    """
    program = ctx.meta.get(PROGRAM_KEY)
    if workload is not None and program is not None:
        raise UsageError(
            f"give a workload or a program after --, not both (got workload {workload!r})",
            hint="orion profile resnet50 -b 4, or orion profile --window profiler-api -- CMD",
        )
    given = {key for key in (*WORKLOAD_ONLY, *PROGRAM_ONLY) if _typed(ctx, key)}
    if program is not None:
        _refuse(given, WORKLOAD_ONLY, "a workload, not to a program after --")
        result = _profile_program(
            program,
            name=name,
            window=window,
            skip=skip,
            count=count,
            cuda_graph=cuda_graph,
            output=output,
            replay_mode=replay_mode,
            metric_set=metric_set,
        )
    elif workload is None:
        raise UsageError(
            "nothing to profile: give a workload, or a program after --",
            hint="orion profile resnet50 -b 4, or orion profile --window profiler-api -- CMD",
        )
    else:
        _refuse(given, PROGRAM_ONLY, "a program after --; a workload's window is its one step")
        result = _profile_workload(
            workload,
            mode=mode,
            batch_size=batch_size,
            dtype=dtype,
            cuda_graph=cuda_graph,
            output=output,
            replay_mode=replay_mode,
            metric_set=metric_set,
            warmup=warmup,
            from_ncu=from_ncu,
            measured=measured,
        )
    show_summary(result)


def _profile_workload(
    workload: str,
    *,
    mode: str,
    batch_size: int,
    dtype: str,
    cuda_graph: bool,
    output: Path | None,
    replay_mode: str | None,
    metric_set: str | None,
    warmup: int | None,
    from_ncu: Path | None,
    measured: Path | None,
) -> ProfileResult:
    """Today's workload profile: a live run, or post-processing redone from a saved CSV."""
    from workloads import WorkloadSpec

    with as_usage():
        spec = WorkloadSpec(
            workload, mode=mode, batch_size=batch_size, dtype=dtype, cuda_graph=cuda_graph
        )
        spec.validate()
    if output is not None:
        _check_output_folder(output)
    if from_ncu is None:
        if measured is not None:
            raise UsageError("--measured only applies with --from-ncu")
        return _profile_live(spec, output, replay_mode, warmup, metric_set)
    if replay_mode is not None or warmup is not None:
        raise UsageError("--replay-mode and --warmup apply to a live run, not to --from-ncu")
    if cuda_graph:
        raise UsageError(
            "--cuda-graph applies to a live run; --from-ncu takes what the CSV recorded"
        )
    if metric_set is not None:
        raise UsageError(
            "--metric-set applies to a live run: with --from-ncu the CSV's columns decide "
            "(SOL metrics: full, sub-metrics only: fast)"
        )
    from profiler.pipeline import profile_from_ncu

    return profile_from_ncu(
        from_ncu,
        workload=spec.name,
        mode=spec.mode,
        batch_size=spec.batch_size,
        dtype=spec.dtype,
        measured_csv=measured,
        out_dir=output,
    )


def _typed(ctx: typer.Context, key: str) -> bool:
    """The user gave option ``key`` on the command line (not its default)."""
    source = ctx.get_parameter_source(key)
    # by name: typer vendors its own click, whose enum is not click.core's
    return source is not None and source.name == "COMMANDLINE"


def _refuse(given: set[str], options: tuple[str, ...], to: str) -> None:
    """One line naming the ``options`` given on the command line, which apply only ``to``."""
    wrong = ["--" + key.replace("_", "-") for key in options if key in given]
    if wrong:
        verb = "applies" if len(wrong) == 1 else "apply"
        raise UsageError(f"{', '.join(wrong)} {verb} only to {to}")


def _profile_program(
    program: list[str],
    *,
    name: str | None,
    window: str | None,
    skip: int | None,
    count: int | None,
    cuda_graph: bool,
    output: Path | None,
    replay_mode: str | None,
    metric_set: str | None,
) -> ProfileResult:
    """Check everything the user typed, then profile: the program runs with the user's
    environment minus orion's preload library and join variables (never gated)."""
    from orion_cli.run import default_name
    from orion_daemon.joining import ORION_VARIABLES, find_command
    from profiler.ncu_runner import check_metric_set, check_replay_mode
    from profiler.program import ProgramTarget, choose_window, program_environment
    from profiler.program_run import DEFAULT_PROGRAM_REPLAY_MODE, profile_program
    from scheduler_core.library import PRELOAD_LIBRARY_NAME

    if not program:
        raise UsageError(
            "no program after --", hint="orion profile --window profiler-api -- python serve.py"
        )
    with as_usage():
        target = ProgramTarget(
            tuple(program),
            name or default_name(program),
            choose_window(window, skip, count),
            cuda_graph,
        )
        target.validate()
        replay = check_replay_mode(replay_mode or DEFAULT_PROGRAM_REPLAY_MODE)
        if metric_set is not None:
            check_metric_set(metric_set)
    if output is not None:
        _check_output_folder(output)
    if find_command(program) is None:
        raise OrionError(f"{program[0]}: command not found")
    environment = program_environment(
        os.environ,
        drop=ORION_VARIABLES,
        preloads=(PRELOAD_LIBRARY_NAME, os.environ.get("ORION_PRELOAD_LIBRARY", "")),
    )
    with _progress_listener(application_replay=replay == "application") as listener:
        return profile_program(
            target,
            output,
            env=environment,
            replay_mode=replay,
            metric_set=metric_set,
            progress=listener,
        )


def _check_output_folder(output: Path) -> None:
    """A file where -o points (or above it) is a one-line error before any work is done."""
    for part in (output, *output.parents):
        if part.exists():
            if not part.is_dir():
                where = "it is a file" if part == output else f"{part} is a file"
                raise OrionError(f"cannot write the profile to {output}: {where}")
            return


def _profile_live(
    spec: Any,
    output: Path | None,
    replay_mode: str | None,
    warmup: int | None,
    metric_set: str | None,
) -> ProfileResult:
    from profiler.ncu_runner import check_metric_set, check_replay_mode
    from profiler.pipeline import profile_workload

    with as_usage():
        if replay_mode is not None:
            check_replay_mode(replay_mode)
        if metric_set is not None:
            check_metric_set(metric_set)
    if warmup is not None and warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    with _progress_listener() as listener:
        return profile_workload(
            spec,
            output,
            replay_mode=replay_mode,
            warmup=warmup,
            progress=listener,
            metric_set=metric_set,
        )


# --- progress -------------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _listener_classes() -> tuple[type[ProgressListener], type[ProgressListener]]:
    """Built on first use: the base class lives in the lazily imported profiler."""
    from profiler.pipeline import ProgressListener

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

    return RichListener, PlainListener


@contextmanager
def _progress_listener(application_replay: bool = True) -> Iterator[ProgressListener]:
    """``application_replay``: whether a phase without a kernel total is application replay's
    (a workload's ncu phase has a total otherwise; a program's window may not)."""
    rich_listener, plain_listener = _listener_classes()
    if not interactive():
        yield plain_listener(application_replay)
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
        yield rich_listener(progress, application_replay)


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
