"""``orion profile`` as a library call: measure, profile with ncu, post-process, write.

Order matters. Prerequisites (a CUDA GPU, ncu, counter permission) are checked before anything
runs, so a missing piece costs seconds rather than a half-finished run. The measurement pass goes
first because it is cheap and tells how many kernels one step launches: the total for the ncu
progress bar and the basis of its time estimate. Post-processing is the pure
:mod:`postprocess` pipeline, so :func:`profile_from_ncu` can redo it anywhere from the files a
run leaves behind.

Files in the output folder (the profile's folder by default):

- ``measured.csv`` / ``measured_steps.csv``: the un-instrumented pass (medians / every step);
- ``software.json``: versions as the profiled process saw them;
- ``profile.ncu-rep``: ncu's report of the profiled step (open it in the Nsight Compute GUI);
- ``ncu_raw.csv``: that report as ncu's raw CSV (``ncu --import``'s stdout, unchanged);
- ``ncu.log``: the profiling run's output (ncu's progress lines and the profiled program's),
  then the conversion's stderr;
- ``profile.csv``: the profile; ``profile_run.json``: timings, counts, match report, commands,
  the metric set and how the throughputs were computed (format in docs/architecture.md).

A program rather than a workload (``orion profile -- CMD``) goes through
:func:`profiler.program_run.profile_program`, which shares this module's ncu pass
(:func:`run_ncu_pass`) and the whole tail after it (:func:`finish_profile`: post-processing,
the profile and the run record), so the two kinds of profile differ only in what
:class:`ProfiledTarget` says.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from orion_common import prerequisites, sysinfo
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.sysinfo import GpuFacts
from postprocess import (
    DEFAULT_METRIC_SET,
    MatchReport,
    Profile,
    ProfileSummary,
    attach_measured_durations,
    build_profile,
    default_profile_path,
    read_ncu_raw_csv,
    summarize_profile,
    write_profile,
)
from profiler.measure import StepConsistency, check_steps, read_measured, read_span_median
from profiler.ncu_runner import (
    NCU_LOG,
    RAW_CSV,
    REPORT,
    NcuRun,
    TensorMetricQuery,
    available_tensor_metrics,
    build_import_command,
    build_ncu_command,
    check_metric_set,
    check_replay_mode,
    command_text,
    default_replay_mode,
    default_warmup,
    ncu_metrics,
    run_ncu,
    target_command,
)
from workloads import WorkloadSpec

MEASURED_CSV = "measured.csv"
MEASURED_STEPS_CSV = "measured_steps.csv"
MEASURED_SPAN_JSON = "measured_span.json"  # written by the measure pass beside measured.csv
MEASURE_LOG = "measure.log"
SOFTWARE_JSON = "software.json"
PROFILE_CSV = "profile.csv"
RUN_JSON = "profile_run.json"
RUN_FORMAT = "orion-profile-run"
RUN_VERSION = 2
"""Version 2 added ``target`` (``workload`` or ``program``) and ``window``, and a program's
``name`` and ``command``; a program's record has no workload fields (docs/architecture.md)."""
WORKLOAD_WINDOW: dict[str, Any] = {"kind": "profiler-api"}
"""A workload's window in the run record: its one step, between cudaProfilerStart and Stop."""

PHASES: tuple[str, ...] = ("measure", "ncu", "postprocess")
DEFAULT_MEASURE_STEPS = 5
SECONDS_PER_KERNEL_ESTIMATE: dict[str, float] = {"fast": 0.17, "full": 0.31}
"""Kernel replay cost per kernel, per metric set, on an H200 with ncu 2025.3.1. Calibrated for
:func:`estimate_ncu_seconds` on whole ``orion profile resnet50 -b 4`` runs, (ncu phase - measure
phase) / 229 kernels: full (SOL metrics, 10 passes) (77.3 - 6.0) / 229 = 0.31 s
(profiles/nvidia-h200/resnet50-infer-bs4-fp32), fast (4 passes) (47.1 - 7.5) / 229 = 0.17 s
(benchmarks/results/nvidia-h200/ncu_metric_cost/orion-fast/). benchmarks/ncu_metric_cost.py over
the first 80 of those kernels gave 0.35 s (SOL) and 0.16 s (a similar 4-pass set). It grows with
the memory the process holds, which ncu saves and restores per pass, so it is only a first guess
for the progress display."""


class ProgressListener:
    """What the pipeline reports while it runs; every method is a no-op here.

    The CLI overrides them to draw progress; library callers may ignore progress entirely.
    """

    def phase_started(
        self, phase: str, *, total: int | None = None, estimate_s: float | None = None
    ) -> None:
        """``phase`` is one of :data:`PHASES`; ``total`` the kernels the ncu phase expects
        (None under application replay, whose pass count is unknown in advance)."""

    def phase_finished(self, phase: str, seconds: float) -> None:
        """``phase`` ended after ``seconds`` of wall time."""

    def kernel_profiled(self, done: int, total: int | None, name: str) -> None:
        """ncu finished profiling kernel number ``done`` (in the current pass)."""

    def ncu_pass(self, number: int) -> None:
        """ncu (re)started the program: pass ``number`` (1 for kernel replay)."""


@dataclass(frozen=True)
class Prerequisites:
    """What a live profiling run needs, found before it starts."""

    gpu: GpuFacts
    ncu: Path
    ncu_version: str | None


@dataclass(frozen=True)
class ProfileResult:
    """A finished profile and everything worth showing about how it was made.

    ``timings`` holds ``measure_s``, ``ncu_s``, ``postprocess_s`` and ``total_s`` (only the
    phases that ran), and ``ncu_import_s``: the part of ``ncu_s`` spent converting the report to
    CSV; ``summary`` uses ncu's replayed durations, ``measured_summary`` the
    un-instrumented ones (None when no launch was matched). ``metric_set`` is the set asked
    for (a live run) or the one the CSV's columns correspond to (``--from-ncu``).
    """

    profile: Profile
    out_dir: Path
    paths: dict[str, Path]
    timings: dict[str, float]
    match_report: MatchReport | None
    summary: ProfileSummary
    measured_summary: ProfileSummary | None
    warnings: tuple[str, ...] = ()
    measured_kernels: int | None = None
    replay_mode: str | None = None
    commands: dict[str, str] = field(default_factory=dict)
    metric_set: str | None = None
    window: str | None = None
    """How a program's profiled kernels were chosen, in words; None for a workload's one step."""

    @property
    def profile_path(self) -> Path:
        return self.paths["profile"]

    @property
    def kernel_count(self) -> int:
        return len(self.profile.kernels)


# --- prerequisites --------------------------------------------------------------------------------


def detect_gpu() -> GpuFacts:
    """The GPU torch will profile on, or a clear OrionError when there is none."""
    if not prerequisites.check_torch().ok:
        raise OrionError(
            "orion profile needs torch with CUDA, and torch is not installed",
            hint="pip install torch (a CUDA build matching the NVIDIA driver)",
        )
    torch_cuda = prerequisites.check_torch_cuda()
    if torch_cuda.ok is False:
        raise OrionError(
            f"orion profile needs an NVIDIA GPU: {torch_cuda.problem}",
            hint="run on a machine with an NVIDIA GPU and a CUDA build of torch "
            "(`orion doctor` shows what is missing), or re-process an existing ncu CSV with "
            "--from-ncu",
        )
    gpu = prerequisites.check_gpu(0).found
    if gpu is None:
        raise OrionError("torch reports a CUDA GPU but its properties cannot be read")
    return gpu


def check_prerequisites() -> Prerequisites:
    """GPU, then ncu, then counter permission: each missing piece is one clear error."""
    gpu = detect_gpu()
    ncu = prerequisites.require(prerequisites.check_ncu()).found
    prerequisites.require(prerequisites.check_counters())
    return Prerequisites(gpu=gpu, ncu=ncu, ncu_version=sysinfo.ncu_version(ncu))


# --- the measurement pass -------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    """The environment for the target: this orion importable even when not installed."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root + (os.pathsep + existing if existing else "")
    return env


def _target_error(log_text: str) -> str | None:
    for line in reversed(log_text.splitlines()):
        if "] error: " in line:
            return line.split("] error: ", 1)[1].strip()
    return None


def run_measure_pass(command: list[str], log: Path, env: Mapping[str, str]) -> None:
    """Run the un-instrumented pass (``profiler.target --pass measure``); output to ``log``."""
    with log.open("w", encoding="utf-8") as log_file:
        result = subprocess.run(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            check=False,
        )
    if result.returncode != 0:
        text = log.read_text(encoding="utf-8", errors="replace")
        reason = _target_error(text) or f"exit status {result.returncode}"
        raise OrionError(f"the measurement pass failed: {reason}", hint=f"its output: {log}")


# --- post-processing ------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def workload_labels(spec: WorkloadSpec) -> dict[str, Any]:
    """What a workload's profile says it profiled (the first keys of its metadata)."""
    return {
        "workload": spec.name,
        "mode": spec.mode,
        "batch_size": spec.batch_size,
        "dtype": spec.dtype,
        "cuda_graph": spec.cuda_graph,
        "options": spec.resolved_options(),
    }


def profile_metadata(
    labels: Mapping[str, Any],
    software: Mapping[str, Any],
    *,
    source: str,
    ncu_version: str | None,
    ncu_command: str | None,
    replay_mode: str | None,
    metric_set: str | None,
    tensor_metrics: list[str] | None,
    tensor_metrics_error: str | None,
) -> dict[str, Any]:
    """The profile's metadata: ``labels`` (:func:`workload_labels`, or a program's), versions
    from ``software``, and how ncu ran."""
    return {
        "gpu_name": software.get("gpu_name"),
        "driver_version": software.get("driver_version"),
        "cuda_version": software.get("cuda_version"),
        "torch_version": software.get("torch_version"),
        "cudnn_version": software.get("cudnn_version"),
        "ncu_version": ncu_version,
        **labels,
        "source": source,
        "ncu_command": ncu_command,
        "metric_set": metric_set,
        "replay_mode": replay_mode,
        "tensor_metrics": tensor_metrics,
        "tensor_metrics_error": tensor_metrics_error,
        "software": dict(software) or None,
    }


def make_profile(
    raw_csv: Path, measured: pd.DataFrame | None, metadata: dict[str, Any]
) -> tuple[Profile, MatchReport | None]:
    """The profile of ncu's raw CSV, with the measured durations attached when there are any."""
    profile = build_profile(read_ncu_raw_csv(raw_csv), metadata)
    if measured is None:
        return profile, None
    return attach_measured_durations(profile, measured)


def summaries(profile: Profile) -> tuple[ProfileSummary, ProfileSummary | None]:
    """By ncu's durations, and by the measured ones when any kernel has one."""
    summary = summarize_profile(profile)
    if profile.kernels["measured_duration_ns"].notna().any():
        return summary, summarize_profile(profile, duration_column="measured_duration_ns")
    return summary, None


def _looks_demangled(names: pd.Series) -> bool:
    """ncu's own demangled spelling (parameter lists, no ``_Z`` anywhere) instead of mangled."""
    text = names.dropna().astype(str)
    if text.empty or text.str.startswith("_Z").any():
        return False
    return bool(text.str.contains("(", regex=False).any())


def quality_warnings(
    profile: Profile,
    report: MatchReport | None,
    *,
    consistency: StepConsistency | None = None,
    measured_kernels: int | None = None,
) -> list[str]:
    """One sentence per thing a user should know before trusting the profile."""
    kernels = profile.kernels
    warnings: list[str] = []
    unknown = int((kernels["kernel_class"].astype("string").fillna("unknown") == "unknown").sum())
    if unknown:
        warnings.append(
            f"{unknown} of {len(kernels)} kernels have class 'unknown': a throughput counter was "
            "missing (n/a) for them."
        )
    if _looks_demangled(kernels["kernel_name"]):
        warnings.append(
            "kernel names are ncu's demangled spelling, not mangled names: the scheduler "
            "identifies kernels by the mangled name (run ncu with --print-kernel-base mangled)."
        )
    if report is None:
        warnings.append(
            "no measured pass: measured_duration_ns is empty and the scheduler falls back to "
            "ncu's replayed durations."
        )
    else:
        if report.only_in_ncu:
            warnings.append(
                f"{report.only_in_ncu} profiled kernels found no match in the measured pass; "
                "their measured_duration_ns is empty."
            )
        if report.only_in_measured:
            warnings.append(
                f"{report.only_in_measured} measured kernels found no match in the ncu profile."
            )
        if report.matched_by_base_name:
            warnings.append(
                f"{report.matched_by_base_name} kernels matched only by their bare function name."
            )
    if consistency is not None and not consistency.consistent:
        warnings.append(
            f"the measured steps launched different kernel sequences ({consistency.agreeing_steps}"
            f" of {consistency.steps} agree): {consistency.first_difference}."
        )
    if measured_kernels is not None and measured_kernels != len(kernels):
        warnings.append(
            f"the measured step launched {measured_kernels} kernels, the profiled step "
            f"{len(kernels)}."
        )
    error = profile.metadata.get("tensor_metrics_error")
    if error:
        warnings.append(f"no tensor-pipe metrics: {error}.")
    return warnings


# --- the live run ---------------------------------------------------------------------------------


def estimate_ncu_seconds(
    kernels: int,
    replay_mode: str,
    startup_s: float = 0.0,
    metric_set: str = DEFAULT_METRIC_SET,
) -> float | None:
    """A first guess at the ncu pass's wall time (None when there is no basis for one).

    ``startup_s`` is what the measurement pass took (interpreter, build, warm-up): the ncu pass
    pays it too before the profiled step.
    """
    if replay_mode != "kernel" or kernels <= 0:
        return None
    return startup_s + kernels * SECONDS_PER_KERNEL_ESTIMATE[metric_set]


def default_output_dir(spec: WorkloadSpec, gpu_name: str) -> Path:
    """The folder of the profile the scheduler finds by default for ``spec`` on this GPU."""
    return default_profile_path(
        spec.name, spec.mode, spec.batch_size, spec.dtype, gpu_name, cuda_graph=spec.cuda_graph
    ).parent


def clear_outputs(out_dir: Path) -> None:
    """A folder holds one run: stale outputs of an earlier one must not mix with this run's."""
    for name in (
        PROFILE_CSV,
        RUN_JSON,
        MEASURED_CSV,
        MEASURED_STEPS_CSV,
        MEASURED_SPAN_JSON,
        SOFTWARE_JSON,
    ):
        (out_dir / name).unlink(missing_ok=True)


@dataclass(frozen=True)
class NcuPass:
    """The ncu pass as it ran: what the post-processing reads and the run record keeps."""

    command: list[str]
    import_command: list[str]
    run: NcuRun
    tensor: TensorMetricQuery
    wall_s: float
    folder: Path
    """Where it wrote, and where the profile goes."""
    ncu_version: str | None
    replay: str
    metric_set: str


def run_ncu_pass(
    found: Prerequisites,
    target: Sequence[str],
    folder: Path,
    listener: ProgressListener,
    *,
    replay: str,
    metric_set: str,
    env: Mapping[str, str],
    total: int | None,
    estimate_s: float | None,
    window: Sequence[str] | None = None,
    **run_options: Any,
) -> NcuPass:
    """ncu over what ``target`` (a command line) runs, its report converted to raw CSV.

    One function for a workload's step and a program's window (``window``: ncu's arguments
    that choose the kernels, ``run_options``: :func:`run_ncu`'s for a program), so the metrics
    asked for, the progress shown and the conversion are the same whichever way a profile was
    made, and two profiles of one kernel can be compared."""
    listener.phase_started("ncu", total=total, estimate_s=estimate_s)
    started = time.monotonic()
    tensor = available_tensor_metrics(str(found.ncu))
    command = build_ncu_command(
        found.ncu,
        target,
        replay_mode=replay,
        metrics=ncu_metrics(tensor.metrics, metric_set),
        report=folder / REPORT,
        **({} if window is None else {"window": window}),
    )
    import_command = build_import_command(found.ncu, folder / REPORT)
    run = run_ncu(
        command,
        folder,
        import_command=import_command,
        total=total,
        on_kernel=listener.kernel_profiled,
        on_pass=listener.ncu_pass,
        env=env,
        **run_options,
    )
    wall_s = time.monotonic() - started
    listener.phase_finished("ncu", wall_s)
    return NcuPass(
        command, import_command, run, tensor, wall_s, folder, found.ncu_version, replay, metric_set
    )


@dataclass(frozen=True)
class ProfiledTarget:
    """What the shared tail (:func:`finish_profile`) needs to know of what was profiled, a
    workload's step or a program's window. Everything else in the tail is the same for both,
    so either way the profile has the same columns and metadata and the run the same record."""

    labels: Mapping[str, Any]
    """The profile's labels (:func:`workload_labels`, or a program's)."""
    software: Mapping[str, Any]
    """Versions, as the profiled process saw them (``software.json``) or as this machine says."""
    record: Mapping[str, Any]
    """What ``profile_run.json`` says was profiled (:func:`write_run_record`'s ``target``)."""
    window: Mapping[str, Any]
    cuda_graph: bool
    measured: pd.DataFrame | None = None
    """The un-instrumented pass's durations; None: there was none (a program)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Metadata of this kind of target only (a workload's measured GPU span)."""
    consistency: StepConsistency | None = None
    measured_kernels: int | None = None
    warnings: tuple[str, ...] = ()
    """Warnings of this kind of target only, after the profile's own."""
    paths: Mapping[str, Path] = field(default_factory=dict)
    """Files of this kind of target only (the measured pass's)."""
    commands: Mapping[str, str] = field(default_factory=dict)
    """Commands run before ncu (the measured pass's)."""
    window_text: str | None = None


def finish_profile(
    target: ProfiledTarget,
    ncu: NcuPass,
    listener: ProgressListener,
    started: float,
    timings: dict[str, float],
) -> ProfileResult:
    """The tail every live profile shares: post-process ncu's CSV into the profile, write it
    and ``profile_run.json``, and say what was made. ``started``: when the whole run began
    (``time.monotonic()``); ``timings``: the phases before ncu, to which ncu's and this one's
    are added."""
    folder, replay, metric_set = ncu.folder, ncu.replay, ncu.metric_set
    timings["ncu_s"] = ncu.wall_s
    timings["ncu_import_s"] = ncu.run.import_wall_s
    listener.phase_started("postprocess")
    phase_start = time.monotonic()
    metadata = profile_metadata(
        target.labels,
        target.software,
        source="ncu",
        ncu_version=ncu.ncu_version,
        ncu_command=command_text(ncu.command),
        replay_mode=replay,
        metric_set=metric_set,
        tensor_metrics=list(ncu.tensor.metrics),
        tensor_metrics_error=ncu.tensor.error,
    )
    metadata.update(target.metadata)
    profile, report = make_profile(ncu.run.raw_csv, target.measured, metadata)
    profile_path = write_profile(profile, folder / PROFILE_CSV)
    summary, measured_summary = summaries(profile)
    warnings = _target_warnings(target, profile, report)
    timings["postprocess_s"] = time.monotonic() - phase_start
    timings["total_s"] = time.monotonic() - started
    paths = {
        "profile": profile_path,
        "ncu_report": ncu.run.report,
        "ncu_raw": ncu.run.raw_csv,
        "ncu_log": ncu.run.log,
        **target.paths,
        "run": folder / RUN_JSON,
    }
    commands = {
        **target.commands,
        "ncu": command_text(ncu.command),
        "ncu_import": command_text(ncu.import_command),
    }
    write_run_record(
        paths["run"],
        target.record,
        window=target.window,
        cuda_graph=target.cuda_graph,
        replay_mode=replay,
        timings=timings,
        profile=profile,
        summary=summary,
        report=report,
        consistency=target.consistency,
        measured_per_step=target.measured_kernels,
        ncu_run=ncu.run,
        commands=commands,
        warnings=warnings,
    )
    listener.phase_finished("postprocess", timings["postprocess_s"])
    return ProfileResult(
        profile=profile,
        out_dir=folder,
        paths=paths,
        timings=timings,
        match_report=report,
        summary=summary,
        measured_summary=measured_summary,
        warnings=tuple(warnings),
        measured_kernels=target.measured_kernels,
        replay_mode=replay,
        commands=commands,
        metric_set=metric_set,
        window=target.window_text,
    )


def _target_warnings(
    target: ProfiledTarget, profile: Profile, report: MatchReport | None
) -> list[str]:
    """The profile's own warnings (:func:`quality_warnings`), then those of its kind of target:
    what a user should know before trusting it, however it was made."""
    warnings = quality_warnings(
        profile, report, consistency=target.consistency, measured_kernels=target.measured_kernels
    )
    return warnings + list(target.warnings)


def profile_workload(
    spec: WorkloadSpec,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    replay_mode: str | None = None,
    warmup: int | None = None,
    measure_steps: int = DEFAULT_MEASURE_STEPS,
    progress: ProgressListener | None = None,
    metric_set: str | None = None,
) -> ProfileResult:
    """Profile one steady-state step of ``spec`` and write its profile (see the module doc).

    ``metric_set`` (default :data:`~postprocess.metrics.DEFAULT_METRIC_SET`) chooses between the
    throughputs' sub-metrics (``fast``) and ncu's exact SOL metrics (``full``).

    Its steps, in the order the module doc explains: the options checked, then the machine
    (:func:`check_prerequisites`), before anything runs; the un-instrumented pass
    (:func:`_measure_step`), which tells ncu's progress how many kernels to expect; ncu
    (:func:`run_ncu_pass`); the tail every live profile shares (:func:`finish_profile`).
    """
    listener = progress or ProgressListener()
    replay, metrics_chosen, warm = _workload_options(
        spec, replay_mode, warmup, measure_steps, metric_set
    )
    found = check_prerequisites()
    folder = Path(out_dir) if out_dir is not None else default_output_dir(spec, found.gpu.name)
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    env = _child_env()
    started = time.monotonic()
    target_args = {
        "workload": spec.name,
        "mode": spec.mode,
        "batch_size": spec.batch_size,
        "dtype": spec.dtype,
        "options": spec.options,
        "warmup": warm,
        "cuda_graph": spec.cuda_graph,
    }
    step = _measure_step(target_args, folder, listener, env, measure_steps)
    kernels_per_step = len(step.measured)
    total = kernels_per_step if replay == "kernel" else None
    ncu = run_ncu_pass(
        found,
        target_command(**target_args, pass_="ncu", output=folder / SOFTWARE_JSON),
        folder,
        listener,
        replay=replay,
        metric_set=metrics_chosen,
        env=env,
        total=total,
        estimate_s=estimate_ncu_seconds(
            kernels_per_step, replay, startup_s=step.wall_s, metric_set=metrics_chosen
        ),
    )
    target = _workload_target(spec, folder, step, warm, measure_steps)
    return finish_profile(target, ncu, listener, started, {"measure_s": step.wall_s})


def _workload_target(
    spec: WorkloadSpec, folder: Path, step: MeasuredStep, warm: int, measure_steps: int
) -> ProfiledTarget:
    """What sets a workload's profile apart in the shared tail: its labels and the software its
    own process saw (``software.json``), the measured pass's durations, span, consistency and
    files, and what the run record says was profiled."""
    return ProfiledTarget(
        labels=workload_labels(spec),
        software=_read_json(folder / SOFTWARE_JSON),
        record={
            "target": "workload",
            "workload": spec.name,
            "mode": spec.mode,
            "batch_size": spec.batch_size,
            "dtype": spec.dtype,
            "options": spec.resolved_options(),
            "warmup_steps": warm,
            "measure_steps": measure_steps,
        },
        window=WORKLOAD_WINDOW,
        cuda_graph=spec.cuda_graph,
        measured=step.measured,
        metadata={"step_gpu_span_ns": read_span_median(folder / MEASURED_SPAN_JSON)},
        consistency=step.consistency,
        measured_kernels=len(step.measured),
        paths={
            "measured": folder / MEASURED_CSV,
            "measured_steps": folder / MEASURED_STEPS_CSV,
            "measure_log": folder / MEASURE_LOG,
            "software": folder / SOFTWARE_JSON,
        },
        commands={"measure": command_text(step.command)},
    )


def _workload_options(
    spec: WorkloadSpec,
    replay_mode: str | None,
    warmup: int | None,
    measure_steps: int,
    metric_set: str | None,
) -> tuple[str, str, int]:
    """The replay mode, metric set and warm-up steps :func:`profile_workload` runs with, each
    checked (with the workload itself) before the machine is looked at: a typo costs no GPU
    time and says itself rather than as a failed ncu run."""
    spec.validate()
    replay = check_replay_mode(replay_mode or default_replay_mode(spec.mode))
    metrics_chosen = check_metric_set(metric_set or DEFAULT_METRIC_SET)
    warm = default_warmup(spec.mode) if warmup is None else warmup
    if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
        raise OrionError(f"warm-up steps must be an integer >= 0, got {warmup!r}")
    if isinstance(measure_steps, bool) or not isinstance(measure_steps, int) or measure_steps < 1:
        raise OrionError(f"measured steps must be an integer >= 1, got {measure_steps!r}")
    if spec.device.split(":", 1)[0] != "cuda":
        raise OrionError(f"orion profile runs workloads on CUDA, not on {spec.device!r}")
    return replay, metrics_chosen, warm


@dataclass(frozen=True)
class MeasuredStep:
    """The un-instrumented pass as it ran."""

    command: list[str]
    measured: pd.DataFrame
    consistency: StepConsistency | None
    wall_s: float


def _measure_step(
    target_args: Mapping[str, Any],
    folder: Path,
    listener: ProgressListener,
    env: Mapping[str, str],
    measure_steps: int,
) -> MeasuredStep:
    """The un-instrumented pass, first because it is cheap: the kernels' real durations (ncu's
    replayed ones are not), how many kernels one step launches (ncu's progress total and time
    estimate), and whether the measured steps agree with each other."""
    listener.phase_started("measure")
    command = target_command(
        **target_args,
        pass_="measure",
        output=folder / MEASURED_CSV,
        steps=measure_steps,
        steps_output=folder / MEASURED_STEPS_CSV,
    )
    started = time.monotonic()
    run_measure_pass(command, folder / MEASURE_LOG, env)
    measured = read_measured(folder / MEASURED_CSV)
    consistency = None
    if (folder / MEASURED_STEPS_CSV).is_file():
        consistency = check_steps(pd.read_csv(folder / MEASURED_STEPS_CSV, keep_default_na=False))
    wall_s = time.monotonic() - started
    listener.phase_finished("measure", wall_s)
    return MeasuredStep(command, measured, consistency, wall_s)


def _match_json(report: MatchReport | None) -> dict[str, int] | None:
    if report is None:
        return None
    return {
        "matched": report.matched,
        "matched_by_base_name": report.matched_by_base_name,
        "only_in_ncu": report.only_in_ncu,
        "only_in_measured": report.only_in_measured,
    }


def write_run_record(
    path: Path,
    target: Mapping[str, Any],
    *,
    window: Mapping[str, Any],
    cuda_graph: bool,
    replay_mode: str,
    timings: dict[str, float],
    profile: Profile,
    summary: ProfileSummary,
    report: MatchReport | None,
    consistency: StepConsistency | None,
    measured_per_step: int | None,
    ncu_run: NcuRun,
    commands: dict[str, str],
    warnings: list[str],
) -> None:
    """``profile_run.json`` (format ``orion-profile-run``, :data:`RUN_VERSION`), atomically.

    ``target`` holds what was profiled: ``{"target": "workload", "workload": ..., ...}`` or a
    program's ``{"target": "program", "name": ..., "command": [argv]}``; ``window`` how the
    profiled kernels were chosen. The environment is never written.
    """
    write_json_atomic(
        path,
        {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **target,
            "cuda_graph": cuda_graph,
            "window": dict(window),
            "replay_mode": replay_mode,
            "metric_set": profile.metadata.get("metric_set"),
            "throughput_source": profile.metadata.get("throughput_source"),
            "ncu_version": profile.metadata.get("ncu_version"),
            "timings_s": {key: round(value, 3) for key, value in timings.items()},
            "kernels": {
                "measured_per_step": measured_per_step,
                "profiled": len(profile.kernels),
                "identities": summary.identity_count,
                "ncu_progress_lines": ncu_run.progress_lines,
                "ncu_passes": ncu_run.passes,
            },
            "measured_steps": consistency.to_json() if consistency is not None else None,
            "match": _match_json(report),
            "commands": commands,
            "warnings": warnings,
        },
    )


# --- re-processing a saved ncu CSV ----------------------------------------------------------------


_LABEL_KEYS = ("workload", "mode", "batch_size", "dtype")


def _describe_labels(workload: Any, mode: Any, batch_size: Any, dtype: Any) -> str:
    return f"{workload} {mode} bs{batch_size} {dtype}"


def _check_ncu_labels(record: Mapping[str, Any], spec: WorkloadSpec, raw: Path) -> str | None:
    """The workload, mode, batch size and dtype given for a saved CSV against its run record.

    A ``profile_run.json`` beside the CSV (written by the live run) that disagrees is an error:
    the profile would be filed under the wrong workload, and so is a record of a program's run
    (``orion profile -- CMD``): no workload's labels fit it. Without a record (or without those
    fields) nothing says what the CSV holds, so the labels are taken on trust and a warning is
    returned.
    """
    if record.get("target") == "program":
        raise OrionError(
            f"ncu CSV profiled the program {record.get('name')!r} ({RUN_JSON}), not a workload: "
            "--from-ncu re-makes workload profiles",
            hint="profile the program again with orion profile [window options] -- CMD",
        )
    given = {
        "workload": spec.name,
        "mode": spec.mode,
        "batch_size": spec.batch_size,
        "dtype": spec.dtype,
    }
    recorded = {key: record[key] for key in _LABEL_KEYS if record.get(key) is not None}
    if not recorded:
        where = "no" if not record else "a"
        what = "" if not record else " without workload labels"
        return (
            f"labels not checked: {where} {RUN_JSON}{what} beside {raw}, so nothing says what "
            f"the CSV profiled; it is written as {_describe_labels(**given)} on your word"
        )
    if any(recorded[key] != given[key] for key in recorded):
        actual = {**given, **recorded}
        graph = " cuda-graph" if record.get("cuda_graph") is True else ""
        raise OrionError(
            f"ncu CSV was profiled as {_describe_labels(**actual)}{graph} ({RUN_JSON}), "
            f"not {_describe_labels(**given)}",
            hint=f"give the labels the run record holds: orion profile {actual['workload']} "
            f"--mode {actual['mode']} --batch-size {actual['batch_size']} "
            f"--dtype {actual['dtype']} --from-ncu {raw}",
        )
    return None


def _cannot_write(path: Path, exc: OSError) -> OrionError:
    """One line for an output path the OS refuses, naming the part that is in the way."""
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                return OrionError(f"cannot write the profile to {path}: {part} is a file")
            break
    reason = (exc.strerror or str(exc)).lower()
    return OrionError(f"cannot write the profile to {path}: {reason}")


def _ncu_output_folder(folder: Path, out_dir: str | os.PathLike[str] | None) -> Path:
    """Where ``profile_from_ncu`` writes, made ready before any work is done.

    Without ``out_dir`` that is the CSV's own folder, and a ``profile.csv`` already there (often
    the reference profile of the live run) is never replaced: the caller must choose a folder.
    """
    if out_dir is None:
        existing = folder / PROFILE_CSV
        if existing.exists():
            raise OrionError(
                f"{existing} already exists; --from-ncu does not replace it by default",
                hint="pass -o DIR to write the profile to another folder",
            )
        target = folder
    else:
        target = Path(out_dir)
        if target.exists() and not target.is_dir():
            raise OrionError(f"cannot write the profile to {target}: it is a file")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    return target


def profile_from_ncu(
    raw_csv: str | os.PathLike[str],
    *,
    workload: str,
    mode: str,
    batch_size: int,
    dtype: str,
    options: Mapping[str, int] | None = None,
    measured_csv: str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
) -> ProfileResult:
    """Redo post-processing from a saved ncu raw CSV; needs no GPU, torch CUDA or ncu.

    ``measured.csv`` beside the CSV is used when ``measured_csv`` is not given; versions come from
    a ``software.json`` beside it when present (else they stay None), and the ncu version,
    command and replay mode from a ``profile_run.json`` beside it. The metric set is the one the
    CSV's columns correspond to (SOL columns: ``full``; sub-metrics only: ``fast``), whatever
    the run record says. The profile goes to ``out_dir`` (default: the CSV's folder) as
    ``profile.csv``; the run record is left alone.

    The labels (workload, mode, batch size, dtype) must agree with those the run record gives,
    if it gives any; without them a warning says they were taken on trust. Without ``out_dir``
    an existing ``profile.csv`` beside the CSV is never replaced (:class:`OrionError`), and an
    output path that cannot be written is a one-line :class:`OrionError` too.
    """
    spec = WorkloadSpec(workload, mode, batch_size, dtype, options=dict(options or {}))
    spec.validate()
    raw = Path(raw_csv)
    if not raw.is_file():
        raise OrionError(
            f"ncu CSV not found: {raw}",
            hint="give the ncu_raw.csv an earlier `orion profile` run left in its folder",
        )
    started = time.monotonic()
    folder = raw.parent
    if measured_csv is not None:
        measured_path: Path | None = Path(measured_csv)
    else:
        beside = folder / MEASURED_CSV
        measured_path = beside if beside.is_file() else None
    measured = read_measured(measured_path) if measured_path is not None else None
    software = _read_json(folder / SOFTWARE_JSON)
    record = _read_json(folder / RUN_JSON)
    label_warning = _check_ncu_labels(record, spec, raw)
    target = _ncu_output_folder(folder, out_dir)
    commands = record.get("commands") if isinstance(record.get("commands"), dict) else {}
    if record.get("cuda_graph") is True:
        # The step was captured as a graph when ncu ran: the profile must say so.
        spec = replace(spec, cuda_graph=True)
    metadata = profile_metadata(
        workload_labels(spec),
        software,
        source="ncu-csv",
        ncu_version=record.get("ncu_version"),
        ncu_command=commands.get("ncu"),
        replay_mode=record.get("replay_mode"),
        metric_set=None,
        tensor_metrics=None,
        tensor_metrics_error=None,
    )
    metadata["ncu_csv"] = str(raw)
    metadata["step_gpu_span_ns"] = read_span_median(folder / MEASURED_SPAN_JSON)
    profile, report = make_profile(raw, measured, metadata)
    try:
        profile_path = write_profile(profile, target / PROFILE_CSV)
    except OSError as exc:
        raise _cannot_write(target / PROFILE_CSV, exc) from None
    summary, measured_summary = summaries(profile)
    warnings = quality_warnings(
        profile, report, measured_kernels=len(measured) if measured is not None else None
    )
    if label_warning is not None:
        warnings.insert(0, label_warning)
    elapsed = time.monotonic() - started
    paths = {"profile": profile_path, "ncu_raw": raw}
    if measured_path is not None:
        paths["measured"] = measured_path
    return ProfileResult(
        profile=profile,
        out_dir=target,
        paths=paths,
        timings={"postprocess_s": elapsed, "total_s": elapsed},
        match_report=report,
        summary=summary,
        measured_summary=measured_summary,
        warnings=tuple(warnings),
        measured_kernels=len(measured) if measured is not None else None,
        replay_mode=record.get("replay_mode"),
        commands=dict(commands),
        metric_set=profile.metadata.get("metric_set"),
    )


__all__ = [
    "DEFAULT_MEASURE_STEPS",
    "MEASURED_CSV",
    "MEASURED_STEPS_CSV",
    "NCU_LOG",
    "PHASES",
    "PROFILE_CSV",
    "RAW_CSV",
    "REPORT",
    "RUN_FORMAT",
    "RUN_JSON",
    "RUN_VERSION",
    "SOFTWARE_JSON",
    "WORKLOAD_WINDOW",
    "Prerequisites",
    "ProfileResult",
    "ProgressListener",
    "check_prerequisites",
    "clear_outputs",
    "default_output_dir",
    "detect_gpu",
    "estimate_ncu_seconds",
    "make_profile",
    "profile_from_ncu",
    "profile_metadata",
    "profile_workload",
    "quality_warnings",
    "run_measure_pass",
    "summaries",
    "workload_labels",
    "write_run_record",
]
