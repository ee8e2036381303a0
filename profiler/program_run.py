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

from postprocess import DEFAULT_METRIC_SET, program_profile_path
from profiler.ncu_runner import check_metric_set, check_replay_mode
from profiler.pipeline import (
    ProfiledTarget,
    ProfileResult,
    ProgressListener,
    check_prerequisites,
    clear_outputs,
    estimate_ncu_seconds,
    finish_profile,
    run_ncu_pass,
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
    window = target.window

    # ncu over the window (the only pass), then the tail a workload's profile has too.
    total = window.count if replay == "kernel" else None
    ncu = run_ncu_pass(
        found,
        target.command,
        folder,
        listener,
        replay=replay,
        metric_set=metrics_chosen,
        env=env,
        total=total,
        estimate_s=estimate_ncu_seconds(total or 0, replay, metric_set=metrics_chosen),
        window=target.ncu_args(),
        nothing_profiled=window.nothing_profiled(),
        ends_program_after=window.count,
    )
    gpu = found.gpu
    profiled = ProfiledTarget(
        labels=target.labels(),
        software={
            "gpu_name": gpu.name,
            "driver_version": gpu.driver_version,
            "cuda_version": gpu.cuda_driver_version,
        },
        record=target.record(),
        window=window.to_json(),
        cuda_graph=target.cuda_graph,
        warnings=(NO_GRAPH_SPAN,) if target.cuda_graph else (),
        window_text=window.describe(),
    )
    return finish_profile(profiled, ncu, listener, started, {})


__all__ = ["DEFAULT_PROGRAM_REPLAY_MODE", "default_program_dir", "profile_program"]
