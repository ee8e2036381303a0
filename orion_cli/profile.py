"""`orion profile`: Nsight Compute over one step of a workload, or over a window of any program
(`orion profile [window] -- CMD`) -> the scheduler's profile file.

The work is :func:`profiler.pipeline.profile_workload`, :func:`profiler.program_run.
profile_program` (or :func:`~profiler.pipeline.profile_from_ncu` for ``--from-ncu``); this module
only validates the request. What is shown while it runs and after (the progress, the summary) is
:mod:`orion_cli.profile_views`. The profiler and those views are imported inside the command so
that ``orion --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand

from orion_cli._common import (
    BatchSizeOpt,
    CudaGraphOpt,
    DTypeOpt,
    ModeOpt,
    as_usage,
    handle_errors,
)
from orion_common.errors import OrionError, UsageError

if TYPE_CHECKING:
    from profiler.pipeline import ProfileResult
    from profiler.program import ProgramTarget
    from workloads import WorkloadSpec

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
    given = {key for key in (*WORKLOAD_ONLY, *PROGRAM_ONLY) if _typed(ctx, key)}
    if program is not None:
        _one_target(workload, True, given)
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
    else:
        _one_target(workload, False, given)
        result = _profile_workload(
            str(workload),
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
    from orion_cli.profile_views import show_summary

    show_summary(result)


_EXAMPLES = "orion profile resnet50 -b 4, or orion profile --window profiler-api -- CMD"


def _one_target(workload: str | None, program_given: bool, given: set[str]) -> None:
    """Refuses a request that names no target or both (a workload and a program after --), or
    options of the other kind of target (``given``: the options typed): each in one line
    before anything is looked at, so a mistyped command never costs a profiling run."""
    if program_given:
        if workload is not None:
            raise UsageError(
                f"give a workload or a program after --, not both (got workload {workload!r})",
                hint=_EXAMPLES,
            )
        _refuse(given, WORKLOAD_ONLY, "a workload, not to a program after --")
    elif workload is None:
        raise UsageError(
            "nothing to profile: give a workload, or a program after --", hint=_EXAMPLES
        )
    else:
        _refuse(given, PROGRAM_ONLY, "a program after --; a workload's window is its one step")


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
    _check_from_ncu_options(replay_mode, warmup, cuda_graph, metric_set)
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


def _check_from_ncu_options(
    replay_mode: str | None, warmup: int | None, cuda_graph: bool, metric_set: str | None
) -> None:
    """Refuses the options of a live run with --from-ncu, which runs nothing: each says what
    decides instead, rather than being silently ignored."""
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
    """Check everything the user typed (:func:`_program_target`), then profile: the program
    runs with the user's environment minus orion's (:func:`_ungated_environment`)."""
    from orion_cli.profile_views import progress_listener
    from orion_daemon.joining import find_command
    from profiler.ncu_runner import check_metric_set, check_replay_mode
    from profiler.program_run import DEFAULT_PROGRAM_REPLAY_MODE, profile_program

    target = _program_target(program, name, cuda_graph, (window, skip, count))
    with as_usage():
        replay = check_replay_mode(replay_mode or DEFAULT_PROGRAM_REPLAY_MODE)
        if metric_set is not None:
            check_metric_set(metric_set)
    if output is not None:
        _check_output_folder(output)
    if find_command(program) is None:
        raise OrionError(f"{program[0]}: command not found")
    with progress_listener(application_replay=replay == "application") as listener:
        return profile_program(
            target,
            output,
            env=_ungated_environment(),
            replay_mode=replay,
            metric_set=metric_set,
            progress=listener,
        )


def _program_target(
    program: list[str],
    name: str | None,
    cuda_graph: bool,
    window: tuple[str | None, int | None, int | None],
) -> ProgramTarget:
    """What to profile, every value checked as a usage error (status 2) before the machine is
    looked at: a window typed wrong must not cost an ncu start. ``window``: the --window,
    --skip and --count typed."""
    from orion_cli.run import default_name
    from profiler.program import ProgramTarget, choose_window

    if not program:
        raise UsageError(
            "no program after --", hint="orion profile --window profiler-api -- python serve.py"
        )
    with as_usage():
        target = ProgramTarget(
            tuple(program),
            name or default_name(program),
            choose_window(*window),
            cuda_graph,
        )
        target.validate()
    return target


def _ungated_environment() -> dict[str, str]:
    """The user's environment without orion's preload library and join variables: a program
    profiled under orion's gates would be profiled as it runs held back, not as it runs."""
    from orion_daemon.joining import ORION_VARIABLES
    from profiler.program import program_environment
    from scheduler_core.library import PRELOAD_LIBRARY_NAME

    return program_environment(
        os.environ,
        drop=ORION_VARIABLES,
        preloads=(PRELOAD_LIBRARY_NAME, os.environ.get("ORION_PRELOAD_LIBRARY", "")),
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
    spec: WorkloadSpec,
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
    from orion_cli.profile_views import progress_listener

    with progress_listener() as listener:
        return profile_workload(
            spec,
            output,
            replay_mode=replay_mode,
            warmup=warmup,
            progress=listener,
            metric_set=metric_set,
        )
