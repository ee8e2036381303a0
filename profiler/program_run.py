"""``orion profile -- CMD`` as a library call: ncu over a program's own window, post-processed into
the same profile a workload gets (the same columns, kernel identities and graph rows), so
``orion run --profile PATH`` can gate that program.

What differs from :func:`profiler.pipeline.profile_workload`, and why:

- No un-instrumented pass. orion cannot run an arbitrary program's window by itself, so
  ``measured_duration_ns`` stays empty and the scheduler uses ncu's replayed durations (a
  warning says so); for a graph-replaying program the graph's wall time is then the sum of its
  kernel nodes' durations, gaps left out.
- No ``software.json``: the program need not be Python. The GPU, driver and CUDA versions come
  from this machine; torch and cuDNN versions stay unknown.
- The program runs in the environment the caller gives (``orion profile`` passes the user's,
  without orion's preload library and join variables), with ncu in front of it and nothing else.

Files in the output folder: ``profile.ncu-rep``, ``ncu_raw.csv``, ``ncu.log``, ``profile.csv`` and
``profile_run.json`` (which records the command as argv and the window, never the environment).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from postprocess import DEFAULT_METRIC_SET, program_profile_path, write_profile
from profiler.ncu_runner import (
    REPORT,
    available_tensor_metrics,
    build_import_command,
    build_ncu_command,
    check_metric_set,
    check_replay_mode,
    command_text,
    ncu_metrics,
    run_ncu,
)
from profiler.pipeline import (
    PROFILE_CSV,
    RUN_JSON,
    ProfileResult,
    ProgressListener,
    check_prerequisites,
    clear_outputs,
    estimate_ncu_seconds,
    make_profile,
    profile_metadata,
    quality_warnings,
    summaries,
    write_run_record,
)
from profiler.program import ProgramTarget

DEFAULT_PROGRAM_REPLAY_MODE = "kernel"
"""Kernel replay: application replay would re-run the whole program once per metric pass."""
NO_GRAPH_SPAN = (
    "no measured GPU span for the graph: the scheduler takes its wall time as the sum of its "
    "kernel nodes' ncu durations, which leaves out the gaps between them."
)


def default_program_dir(target: ProgramTarget, gpu_name: str) -> Path:
    """The folder ``target``'s profile goes to by default on this GPU (beside workloads')."""
    return program_profile_path(target.name, gpu_name, cuda_graph=target.cuda_graph).parent


def profile_program(
    target: ProgramTarget,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str],
    replay_mode: str | None = None,
    metric_set: str | None = None,
    progress: ProgressListener | None = None,
) -> ProfileResult:
    """Profile ``target``'s window with ncu and write its profile (see the module doc).

    ``env`` is the program's whole environment, chosen by the caller. Prerequisites are checked
    before anything runs; on failure or Ctrl-C ncu and the program's process group are stopped
    and no ``profile.csv`` or ``profile_run.json`` is left (those of an earlier run in the folder
    are removed first).
    """
    listener = progress or ProgressListener()
    target.validate()
    replay = check_replay_mode(replay_mode or DEFAULT_PROGRAM_REPLAY_MODE)
    metrics_chosen = check_metric_set(metric_set or DEFAULT_METRIC_SET)
    found = check_prerequisites()

    folder = Path(out_dir) if out_dir is not None else default_program_dir(target, found.gpu.name)
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    started = time.monotonic()
    timings: dict[str, float] = {}
    window = target.window

    # 1. ncu over the window (the only pass).
    total = window.count if replay == "kernel" else None
    estimate = estimate_ncu_seconds(total or 0, replay, metric_set=metrics_chosen)
    listener.phase_started("ncu", total=total, estimate_s=estimate)
    tensor = available_tensor_metrics(str(found.ncu))
    ncu_command = build_ncu_command(
        found.ncu,
        target.command,
        replay_mode=replay,
        metrics=ncu_metrics(tensor.metrics, metrics_chosen),
        report=folder / REPORT,
        window=target.ncu_args(),
    )
    import_command = build_import_command(found.ncu, folder / REPORT)
    ncu_run = run_ncu(
        ncu_command,
        folder,
        import_command=import_command,
        total=total,
        on_kernel=listener.kernel_profiled,
        on_pass=listener.ncu_pass,
        env=env,
        nothing_profiled=window.nothing_profiled(),
        ends_program_after=window.count,
    )
    timings["ncu_s"] = time.monotonic() - started
    timings["ncu_import_s"] = ncu_run.import_wall_s
    listener.phase_finished("ncu", timings["ncu_s"])

    # 2. Post-processing, as for a workload.
    listener.phase_started("postprocess")
    phase_start = time.monotonic()
    gpu = found.gpu
    metadata = profile_metadata(
        target.labels(),
        {
            "gpu_name": gpu.name,
            "driver_version": gpu.driver_version,
            "cuda_version": gpu.cuda_driver_version,
        },
        source="ncu",
        ncu_version=found.ncu_version,
        ncu_command=command_text(ncu_command),
        replay_mode=replay,
        metric_set=metrics_chosen,
        tensor_metrics=list(tensor.metrics),
        tensor_metrics_error=tensor.error,
    )
    profile, report = make_profile(ncu_run.raw_csv, None, metadata)
    profile_path = write_profile(profile, folder / PROFILE_CSV)
    summary, measured_summary = summaries(profile)
    warnings = quality_warnings(profile, report)
    if target.cuda_graph:
        warnings.append(NO_GRAPH_SPAN)
    timings["postprocess_s"] = time.monotonic() - phase_start
    timings["total_s"] = time.monotonic() - started
    commands = {"ncu": command_text(ncu_command), "ncu_import": command_text(import_command)}
    paths = {
        "profile": profile_path,
        "ncu_report": ncu_run.report,
        "ncu_raw": ncu_run.raw_csv,
        "ncu_log": ncu_run.log,
        "run": folder / RUN_JSON,
    }
    write_run_record(
        paths["run"],
        target.record(),
        window=window.to_json(),
        cuda_graph=target.cuda_graph,
        replay_mode=replay,
        timings=timings,
        profile=profile,
        summary=summary,
        report=report,
        consistency=None,
        measured_per_step=None,
        ncu_run=ncu_run,
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
        replay_mode=replay,
        commands=commands,
        metric_set=metrics_chosen,
        window=window.describe(),
    )


__all__ = ["DEFAULT_PROGRAM_REPLAY_MODE", "default_program_dir", "profile_program"]
