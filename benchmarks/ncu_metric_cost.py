"""What each set of Nsight Compute metrics costs: replay passes per kernel and wall time.

    python benchmarks/ncu_metric_cost.py [--workload resnet50] [--mode infer] [--batch-size 4]
        [--kernels 30] [--sets launch,orion-v1,sol,breakdown] --out DIR

`orion profile`'s wall time is dominated by ncu replaying every kernel once per pass, and the
number of passes is set by which metrics are asked for. This runs ncu (kernel replay,
`--clock-control none`) over the first --kernels kernels of one steady-state step of a workload,
once per metric set, and records the passes ncu reported per kernel and the wall time. The
`breakdown` set asks for the sub-metrics behind the two speed-of-light throughputs (ncu's
`breakdown:` prefix), so which sub-metric sets each kernel's throughput can be read from its CSV.

Writes DIR/ncu_metric_cost.json (per set: metrics, passes, wall time, command) and one raw CSV
per set (DIR/<set>.csv), as orion's post-processing reads them.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from orion_common.sysinfo import find_ncu
from postprocess.metrics import (
    COMPUTE_SOL_METRIC,
    ELAPSED_PCT_SUFFIX,
    MEMORY_SOL_METRIC,
    NCU_METRIC_SETS,
)
from profiler.ncu_runner import (
    available_tensor_metrics,
    build_import_command,
    build_ncu_command,
    command_text,
    ncu_metrics,
    target_command,
)

SOL_METRICS = (COMPUTE_SOL_METRIC, MEMORY_SOL_METRIC)
LAUNCH_METRICS = tuple(m for m in NCU_METRIC_SETS["full"] if m not in SOL_METRICS)
# Sub-metrics of the two throughputs that set their value (the maximum) for the ResNet-50
# inference kernels measured first; the larger set adds the next candidates of each side.
FAST3_SM = ("sm__issue_active", "sm__inst_executed_pipe_adu", "sm__pipe_shared_cycles_active")
FAST3_MEMORY = (
    "lts__xbar2lts_cycles_active",
    "l1tex__data_pipe_lsu_wavefronts",
    "dram__cycles_active",
)
FAST6_SM = (
    *FAST3_SM,
    "sm__inst_executed",
    "sm__pipe_fma_cycles_active",
    "sm__inst_executed_pipe_lsu",
)
FAST6_MEMORY = (*FAST3_MEMORY, "lts__t_sectors", "l1tex__data_bank_reads", "lts__d_sectors")
_PASSES = re.compile(r"- (\d+) pass(?:es)?\s*$")


def _elapsed(bases: tuple[str, ...]) -> list[str]:
    return [base + ELAPSED_PCT_SUFFIX for base in bases]


def metric_sets(tensor_metrics: tuple[str, ...]) -> dict[str, list[str]]:
    """The candidate sets, by name. ``launch`` is the floor: what no profile can do without;
    ``orion-v1`` and ``orion-fast`` are what `orion profile --metric-set full` / `fast` ask for."""
    return {
        "launch": list(LAUNCH_METRICS),
        "orion-v1": ncu_metrics(tensor_metrics, "full"),
        "orion-fast": ncu_metrics(tensor_metrics, "fast"),
        "sol": [*LAUNCH_METRICS, *SOL_METRICS],
        "tensor": [*LAUNCH_METRICS, *tensor_metrics],
        "breakdown": [*LAUNCH_METRICS, *(f"breakdown:{m}" for m in SOL_METRICS)],
        "fast3": [*LAUNCH_METRICS, *tensor_metrics, *_elapsed(FAST3_SM + FAST3_MEMORY)],
        "fast6": [*LAUNCH_METRICS, *tensor_metrics, *_elapsed(FAST6_SM + FAST6_MEMORY)],
    }


def run_set(
    ncu: str, target: list[str], name: str, metrics: list[str], kernels: int, skip: int, out: Path
) -> dict:
    report = out / f"{name}.ncu-rep"
    # --launch-skip counts launches after cudaProfilerStart, i.e. within the profiled step.
    command = build_ncu_command(ncu, target, replay_mode="kernel", metrics=metrics, report=report)
    command = [command[0], "--launch-skip", str(skip), "--launch-count", str(kernels), *command[1:]]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    passes = [int(m.group(1)) for line in done.stdout.splitlines() if (m := _PASSES.search(line))]
    result = {
        "metrics": metrics,
        "command": command_text(command),
        "returncode": done.returncode,
        "wall_s": round(wall, 2),
        "kernels": len(passes),
        "passes_median": statistics.median(passes) if passes else None,
        "passes_max": max(passes) if passes else None,
    }
    if done.returncode == 0 and report.is_file():
        raw = subprocess.run(
            build_import_command(ncu, report), capture_output=True, text=True, check=False
        )
        (out / f"{name}.csv").write_text(raw.stdout)
        report.unlink()
    else:
        result["error_tail"] = (done.stdout + done.stderr)[-1500:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--mode", default="infer")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--kernels", type=int, default=30, help="kernels profiled per set")
    parser.add_argument("--skip", type=int, default=0, help="kernels of the step skipped first")
    parser.add_argument("--sets", default=None, help="comma-separated set names (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    found = find_ncu()
    if found is None:
        raise SystemExit("ncu not found: put Nsight Compute's ncu on PATH or set ORION_NCU")
    ncu = str(found)
    tensor = available_tensor_metrics(ncu).metrics
    sets = metric_sets(tensor)
    chosen = args.sets.split(",") if args.sets else list(sets)
    unknown = [name for name in chosen if name not in sets]
    if unknown:
        raise SystemExit(f"unknown metric sets {unknown}; known: {', '.join(sets)}")
    target = target_command(
        workload=args.workload,
        mode=args.mode,
        batch_size=args.batch_size,
        dtype=args.dtype,
        options=None,
        warmup=10,
        pass_="ncu",
        output=args.out / "software.json",
    )
    results = {}
    for name in chosen:
        results[name] = run_set(ncu, target, name, sets[name], args.kernels, args.skip, args.out)
        r = results[name]
        print(
            f"{name:>10}: {r['kernels']} kernels, passes median {r['passes_median']} "
            f"max {r['passes_max']}, {r['wall_s']} s, rc {r['returncode']}",
            flush=True,
        )
    summary = {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workload": {
            "name": args.workload,
            "mode": args.mode,
            "batch_size": args.batch_size,
            "dtype": args.dtype,
        },
        "kernels_requested": args.kernels,
        "kernels_skipped": args.skip,
        "command": command_text([sys.executable, *sys.argv]),
        "sets": results,
    }
    (args.out / "ncu_metric_cost.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
