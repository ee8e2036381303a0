"""The process ncu launches, and the un-instrumented measurement pass: one workload, warmed up.

``python -m profiler.target --workload NAME --mode infer|train --batch-size N --dtype fp32|bf16
[--options JSON] --warmup N --pass ncu|measure --output PATH``

- ``--pass ncu``: one step between ``cudaProfilerStart`` and ``cudaProfilerStop``; ncu runs with
  ``--profile-from-start off``, so exactly that step is profiled, after the warm-up has paid the
  first-call costs (cuDNN/cuBLAS handles, allocator growth, lazy module loading). ``--output``
  gets the software versions as this process saw them.
- ``--pass measure``: ``--steps`` steps, each under its own torch.profiler (CUDA activity only)
  and synchronized; ``--output`` gets the per-position median durations that post-processing
  attaches to the profile, ``--steps-output`` every step's kernels.

stdout is ncu's: its progress lines go there, so this process writes nothing to it (file
descriptor 1 is pointed at stderr before anything is imported). Exit codes: 0 ok, 2 bad
arguments, 3 the workload could not be built or run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_WORKLOAD = 3
PASSES = ("ncu", "measure")
DEFAULT_MEASURE_STEPS = 5


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m profiler.target",
        description="Build one workload, warm it up, and run orion's ncu or measurement pass.",
    )
    parser.add_argument("--workload", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--options", default="{}", help="JSON object of workload options")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--cuda-graph", action="store_true", help="capture the step once and replay it"
    )
    parser.add_argument("--warmup", type=int, required=True, help="steps before the measured ones")
    parser.add_argument("--pass", dest="pass_", choices=PASSES, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=DEFAULT_MEASURE_STEPS, help="measure only")
    parser.add_argument("--steps-output", type=Path, default=None, help="measure only")
    return parser


def default_steps_output(output: Path) -> Path:
    """``measured.csv`` -> ``measured_steps.csv``."""
    return output.with_name(f"{output.stem}_steps.csv")


def span_output(output: Path) -> Path:
    """``measured.csv`` -> ``measured_span.json`` (each step's wall time on the GPU)."""
    return output.with_name(f"{output.stem}_span.json")


_LOG = logging.getLogger("profiler.target")
"""This process's own lines; ``main`` sends them to stderr (stdout is ncu's). Named, not
``__name__``, which is ``__main__`` when the module runs as the process."""


def _log(message: str) -> None:
    _LOG.info(f"[orion target] {message}")


def _protect_stdout() -> None:
    """Send everything written to fd 1 (Python or C libraries) to stderr instead.

    The profiled process inherits ncu's stdout, where ncu prints the per-kernel progress lines
    orion reads: the program's own output belongs on stderr, apart from them.
    """
    sys.stdout.flush()
    os.dup2(2, 1)


def _spec_from(args: argparse.Namespace) -> Any:
    from orion_common.errors import OrionError
    from workloads import WorkloadSpec

    try:
        options = json.loads(args.options)
    except json.JSONDecodeError as error:
        raise OrionError(f"--options is not valid JSON ({error.msg})") from None
    if not isinstance(options, dict):
        raise OrionError("--options must be a JSON object of option name to integer")
    if args.warmup < 0:
        raise OrionError(f"--warmup must be >= 0, got {args.warmup}")
    if args.steps < 1:
        raise OrionError(f"--steps must be >= 1, got {args.steps}")
    spec = WorkloadSpec(
        name=args.workload,
        mode=args.mode,
        batch_size=args.batch_size,
        dtype=args.dtype,
        device=args.device,
        options=options,
        cuda_graph=args.cuda_graph,
    )
    spec.validate()
    return spec


def _ncu_pass(workload: Any, output: Path) -> None:
    import torch

    from orion_common.atomic_io import write_json_atomic
    from orion_common.sysinfo import software_summary

    workload.run_profiled_step(before=torch.cuda.profiler.start, after=torch.cuda.profiler.stop)
    index = workload.device.index if workload.device.type == "cuda" else 0
    write_json_atomic(output, software_summary(index or 0))
    _log("profiled one step")


def _profile_one_step(
    workload: Any, scratch: Path, step: int
) -> tuple[list[dict[str, Any]], float | None]:
    from torch.profiler import ProfilerActivity, profile

    from profiler.measure import gpu_span_ns, kernel_rows_from_trace

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        workload.step()
        workload.synchronize()
    trace_path = scratch / f"step{step}.json"
    prof.export_chrome_trace(str(trace_path))
    trace = json.loads(trace_path.read_text(encoding="utf-8"))
    trace_path.unlink()
    return kernel_rows_from_trace(trace), gpu_span_ns(trace)


def _measure_pass(workload: Any, steps: int, output: Path, steps_output: Path) -> None:
    from orion_common.errors import OrionError
    from profiler.measure import median_per_position, steps_table, write_spans, write_table

    with tempfile.TemporaryDirectory(prefix="orion-measure-") as scratch:
        measured = [_profile_one_step(workload, Path(scratch), step) for step in range(steps)]
    recorded = [rows for rows, _ in measured]
    write_spans([span for _, span in measured], span_output(output))
    table = steps_table(recorded)
    medians, consistency = median_per_position(table)
    write_table(table, steps_output)
    if medians.empty:
        raise OrionError(
            f"workload {workload.spec.name!r} launched no CUDA kernels in {steps} measured steps"
        )
    write_table(medians, output)
    if consistency.consistent:
        _log(f"measured {steps} steps: {len(medians)} kernels per step, same sequence each step")
    else:
        _log(
            f"warning: the {steps} measured steps launched different kernel sequences "
            f"({consistency.agreeing_steps} agree); {consistency.first_difference}"
        )


def run(args: argparse.Namespace) -> int:
    from orion_common.errors import OrionError
    from workloads import build_workload

    try:
        spec = _spec_from(args)
    except OrionError as error:
        _log(f"error: {error.message}")
        return EXIT_USAGE
    try:
        workload = build_workload(spec)
        workload.warmup(args.warmup)
        if args.pass_ == "ncu":
            _ncu_pass(workload, args.output)
        else:
            steps_output = args.steps_output or default_steps_output(args.output)
            _measure_pass(workload, args.steps, args.output, steps_output)
    except OrionError as error:
        _log(f"error: {error.message}")
        if error.hint:
            _log(f"hint: {error.hint}")
        return EXIT_WORKLOAD
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    from orion_common.process_log import log_to

    log_to(sys.stderr, _LOG.name)
    args = _parser().parse_args(argv)
    return run(args)


if __name__ == "__main__":
    _protect_stdout()
    sys.exit(main())
