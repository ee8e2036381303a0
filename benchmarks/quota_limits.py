"""GPU-time shares and memory limits held on a real GPU, each run recorded with its command.

    python benchmarks/quota_limits.py [--duration 15] [--out DIR] [--report-only]

Runs, in order (each an `orion colocate` run directory under DIR/runs/):

1. ``alone``: one ``synthetic-compute`` training client (batch 16, a loop long enough that it
   saturates the GPU) under ``dedicated``, the throughput every share below is measured against.
2. ``caps``: two such clients under ``quota`` with ``max_util`` 0.3 and 0.7. Each one's
   throughput / alone should be within 0.05 of its cap.
3. ``promise``: ``promised`` (the same job, ``min_util`` 0.6) beside ``greedy`` (four times the
   blocks and kernels four times as long, no limits). ``promised`` should keep at least 0.55.
4. ``live``: the caps run again, with ``orion quota RUN large --max-util 0.2`` run (as a user
   would, in another process) halfway through the window. The share samples of ``large`` should
   cross halfway from its old cap to its new one within 1 s of the change.
5. ``memory``: ResNet-50 bs32 training (``benchmarks/memory_probe.py``) as a client with a 4 GiB
   ``memory_limit``, under PyTorch's default allocator and with expandable segments (which map
   memory through ``cuMemCreate``/``cuMemMap``). ``torch.cuda.mem_get_info()`` should report a
   4 GiB total, a 5 GiB tensor should raise ``torch.OutOfMemoryError``, and NVML should count
   the process at no more than the limit plus its CUDA context.

Writes ``summary.json`` (format ``orion-quota-limits``), ``README.md`` (the tables, the
``findings`` a reader added to summary.json, if any, then the command, device and software) and
an `orion report` of the share runs in ``report/``, whose figures draw each client's share and
memory over time with its limits. ``--report-only`` judges the runs in DIR again.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from colocation.config import parse_jobs
from colocation.runner import RunProgress, run_jobs
from orion_common.atomic_io import write_json_atomic
from orion_common.sysinfo import gpu_facts, software_summary
from postprocess.profile_format import gpu_slug
from reporting import load_run, write_report
from reporting.metrics import client_summary
from reporting.rundata import RunData
from reporting.shares import quota_window_s, shares_series

ROOT = Path(__file__).resolve().parents[1]
FORMAT = {"name": "orion-quota-limits", "version": 1}
GIB = 1 << 30

SHARE_ITERATIONS = 4 * 4096
"""The share clients' FMA loop: four times the default, so that they saturate the GPU. At the
default loop a kernel runs for about as long as the host takes to launch it through CuPy and the
hook, so the client is bound by its host thread and its throughput measures the launch path, not
the share of GPU time it was given."""
SHARE_JOB = {
    "workload": "synthetic-compute",
    "mode": "train",
    "batch_size": 16,
    "role": "be",
    "options": {"iterations": SHARE_ITERATIONS},
}
GREEDY_BLOCKS_PER_SM = 4
GREEDY_ITERATIONS = 4 * SHARE_ITERATIONS
"""Greedy's kernels: four blocks per SM and four times the share clients' loop, so each of its
launches holds the GPU far longer than the promised client's."""
CAPS = {"small": 0.3, "large": 0.7}
PROMISE = 0.6
LIVE_CLIENT, LIVE_NEW_CAP = "large", 0.2

SHARE_TOLERANCE = 0.05
PROMISE_FLOOR = 0.55
LIVE_DEADLINE_S = 1.0
MEMORY_LIMIT = 4 * GIB
MEMORY_ASK = 5 * GIB
ALLOCATORS = {"default": None, "expandable-segments": "expandable_segments:True"}


def share_jobs(name: str, clients: list[dict[str, Any]], duration_s: float, out: Path) -> dict:
    """One run of the share experiments: ``quota`` unless named ``alone`` (``dedicated``)."""
    return {
        "run": {
            "policy": "dedicated" if name == "alone" else "quota",
            "duration_s": duration_s,
            "warmup_steps": 20,
            "seed": 1,
            "output_dir": str(out / "runs" / name),
            "quota_window_s": 1.0,
        },
        "clients": clients,
    }


def experiments(duration_s: float, out: Path, sm_count: int) -> dict[str, dict]:
    """The share runs' jobs files, by name, in the order they run."""
    greedy = {"grid": GREEDY_BLOCKS_PER_SM * sm_count, "iterations": GREEDY_ITERATIONS}
    capped = [{"name": name, **SHARE_JOB, "max_util": cap} for name, cap in CAPS.items()]
    promise = [
        {"name": "promised", **SHARE_JOB, "min_util": PROMISE},
        {"name": "greedy", **SHARE_JOB, "options": greedy},
    ]
    return {
        "alone": share_jobs("alone", [{"name": "alone", **SHARE_JOB}], duration_s, out),
        "caps": share_jobs("caps", capped, duration_s, out),
        "promise": share_jobs("promise", promise, duration_s, out),
        "live": share_jobs("live", capped, duration_s, out),
    }


class LiveChange:
    """A progress callback that runs ``orion quota`` once, from a thread of its own (as a user
    would from another shell), when the run has measured ``at_s`` seconds."""

    def __init__(self, at_s: float, client: str, max_util: float) -> None:
        self.at_s = at_s
        self.client = client
        self.max_util = max_util
        self.thread: threading.Thread | None = None
        self.result: subprocess.CompletedProcess[str] | None = None

    def __call__(self, progress: RunProgress) -> None:
        if self.thread is not None or progress.state != "measuring":
            return
        if progress.elapsed_s is None or progress.elapsed_s < self.at_s:
            return
        command = [
            sys.executable,
            "-m",
            "orion_cli.app",
            "quota",
            str(progress.run_dir),
            self.client,
            "--max-util",
            f"{self.max_util:g}",
        ]
        # `-m` puts the working directory first on sys.path: from the repository root that is the
        # source tree, whose scheduler_core has no built native module. The run directory has
        # no packages.
        cwd = progress.run_dir
        self.thread = threading.Thread(target=self._run, args=(command, cwd), daemon=True)
        self.thread.start()

    def _run(self, command: list[str], cwd: Path) -> None:
        self.result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)

    def join(self) -> None:
        if self.thread is None:
            raise RuntimeError("the run ended before the live change was made")
        self.thread.join()
        if self.result is None or self.result.returncode != 0:
            error = self.result.stderr if self.result is not None else "no result"
            raise RuntimeError(f"orion quota failed: {error}")


def throughput(run: RunData) -> dict[str, float]:
    """Samples per second of each client over its measured window."""
    table = client_summary(run)
    return dict(zip(table["client"], table["samples_per_s"].astype(float), strict=True))


def live_delay(series: pd.DataFrame, client: str, new_cap: float) -> dict[str, float | None]:
    """When ``client``'s share samples crossed halfway from the cap in force before its first
    ``max_util`` change to the new one, and when they came within ``SHARE_TOLERANCE`` of it:
    seconds after the change (None if never)."""
    rows = series[series["client"] == client].sort_values("time_s", kind="stable")
    changes = rows[rows["share_change"].astype(bool) & (rows["changed_field"] == "max_util")]
    if not len(changes):
        raise ValueError(f"{client}: no max_util change recorded")
    change = changes.iloc[0]
    old = float(change["old_value"])
    halfway = (old + new_cap) / 2
    after = rows[~rows["share_change"].astype(bool) & (rows["time_s"] > change["time_s"])]
    sign = 1.0 if new_cap >= old else -1.0

    def first(threshold: float) -> float | None:
        past = after[sign * (after["gpu_share"] - threshold) >= 0]
        return float(past["time_s"].iloc[0] - change["time_s"]) if len(past) else None

    return {
        "change_time_s": float(change["time_s"]),
        "old_cap": old,
        "new_cap": new_cap,
        "halfway_after_s": first(halfway),
        "settled_after_s": first(new_cap - sign * SHARE_TOLERANCE),
    }


def measured_share(series: pd.DataFrame, run: RunData, client: str) -> float:
    """Mean of ``client``'s share samples taken inside the run's measured window, from one
    quota window after its start (earlier samples still average in the warm-up)."""
    if run.measure_start_s is None or run.measure_end_s is None:
        return float("nan")
    window = quota_window_s(run)
    samples = series[(series["client"] == client) & ~series["share_change"].astype(bool)]
    inside = samples["time_s"].between(run.measure_start_s + window, run.measure_end_s)
    return float(samples.loc[inside, "gpu_share"].mean())


def share_results(runs: dict[str, RunData]) -> dict[str, Any]:
    """Each share experiment's figures and whether it met its target."""
    alone = throughput(runs["alone"])["alone"]
    series = shares_series([runs["caps"], runs["promise"], runs["live"]])

    def mean_share(run: RunData, client: str) -> float:
        return measured_share(series[series["run"] == run.label], run, client)

    caps = {}
    for client, cap in CAPS.items():
        ratio = throughput(runs["caps"])[client] / alone
        caps[client] = {
            "max_util": cap,
            "throughput_over_alone": ratio,
            "gpu_share_mean": mean_share(runs["caps"], client),
            "met": abs(ratio - cap) <= SHARE_TOLERANCE,
        }
    promised = throughput(runs["promise"])["promised"] / alone
    promise = {
        "min_util": PROMISE,
        "throughput_over_alone": promised,
        "gpu_share_mean": mean_share(runs["promise"], "promised"),
        "greedy_gpu_share_mean": mean_share(runs["promise"], "greedy"),
        "met": promised >= PROMISE_FLOOR,
    }
    live_rows = series[series["run"] == runs["live"].label]
    live = live_delay(live_rows, LIVE_CLIENT, LIVE_NEW_CAP)
    halfway = live["halfway_after_s"]
    live |= {"client": LIVE_CLIENT, "met": halfway is not None and halfway <= LIVE_DEADLINE_S}
    return {"alone_samples_per_s": alone, "caps": caps, "promise": promise, "live": live}


def memory_check(allocator: str | None) -> dict[str, Any]:
    """ResNet-50 training under a 4 GiB limit (the probe, as a client of a scheduler run)."""
    import torch

    from scheduler_core import SchedulerRun, SchedulerSettings

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    settings = SchedulerSettings(
        policy="quota", sm_count=sm_count, queue_limit_ns=100_000, unknown_duration_ns=100_000
    )
    with SchedulerRun(settings) as run:
        index = run.add_client("trainer", "be", memory_limit=MEMORY_LIMIT)
        run.publish()
        env = run.client_environment(index)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if allocator is not None:
            env["PYTORCH_CUDA_ALLOC_CONF"] = allocator
        probe = [sys.executable, str(ROOT / "benchmarks" / "memory_probe.py"), "--ask"]
        done = subprocess.run(
            [*probe, str(MEMORY_ASK)], env=env, capture_output=True, text=True, check=False
        )
        stats = run.stats()["trainer"]
    if done.returncode != 0:
        raise RuntimeError(f"memory probe failed: {done.stderr[-2000:]}")
    seen = json.loads(done.stdout.splitlines()[-1])
    counted = [
        value
        for key in ("nvml_process_bytes", "trained_nvml_process_bytes")
        if (value := seen.get(key)) is not None
    ] or [seen["nvml_device_delta_bytes"], seen["trained_nvml_device_delta_bytes"]]
    nvml_peak = max(counted)
    return {
        **seen,
        "limit_bytes": MEMORY_LIMIT,
        "ask_bytes": MEMORY_ASK,
        "library_peak_bytes": stats.get("memory_peak"),
        "allocations_refused": stats.get("allocations_refused"),
        "nvml_peak_bytes": nvml_peak,
        "met": bool(
            seen["total"] == MEMORY_LIMIT
            and seen["big_refused"]
            and nvml_peak <= MEMORY_LIMIT + seen["context_bytes"]
        ),
    }


def readme(summary: dict[str, Any]) -> str:
    """The results as tables, then how they were made."""
    shares, memory = summary["shares"], summary["memory"]
    lines = ["# GPU-time shares and memory limits", "", summary["description"], ""]
    lines += ["## Shares under `quota` (synthetic-compute clients)", ""]
    lines += ["| run | client | setting | throughput / alone | mean GPU-time share | target |"]
    lines += ["|---|---|---|---|---|---|"]
    for client, row in shares["caps"].items():
        target = f"{row['max_util']:g} ± {SHARE_TOLERANCE:g}: {'met' if row['met'] else 'MISSED'}"
        lines.append(
            f"| caps | {client} | max_util {row['max_util']:g} | "
            f"{row['throughput_over_alone']:.3f} | {row['gpu_share_mean']:.3f} | {target} |"
        )
    promise = shares["promise"]
    lines.append(
        f"| promise | promised | min_util {promise['min_util']:g} | "
        f"{promise['throughput_over_alone']:.3f} | {promise['gpu_share_mean']:.3f} | "
        f"≥ {PROMISE_FLOOR:g}: {'met' if promise['met'] else 'MISSED'} |"
    )
    lines.append(f"| promise | greedy | none | | {promise['greedy_gpu_share_mean']:.3f} | |")
    live = shares["live"]

    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f} s"

    lines += [
        "",
        f"Live change: `orion quota RUN {live['client']} --max-util {live['new_cap']:g}` at "
        f"{live['change_time_s']:.2f} s on the run clock (cap {live['old_cap']:g} before). "
        f"The client's share samples crossed halfway to the new cap "
        f"{seconds(live['halfway_after_s'])} after the change and came within "
        f"{SHARE_TOLERANCE:g} of it {seconds(live['settled_after_s'])} after "
        f"(target: halfway within {LIVE_DEADLINE_S:g} s: "
        f"{'met' if live['met'] else 'MISSED'}). Figure: `report/gpu_shares_over_time.png`.",
        "",
        f"Alone: {shares['alone_samples_per_s']:.0f} samples/s.",
        "",
        "## ResNet-50 bs32 training with `memory_limit: 4GiB`",
        "",
        "| allocator | trained | mem_get_info total | free | 5 GiB tensor | library peak "
        "| NVML peak | context | within limit + context |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in memory.items():
        lines.append(
            f"| {name} | {'yes' if row['trained'] else row['train_error']} | "
            f"{row['total'] / GIB:.3f} GiB | {row['free'] / GIB:.3f} GiB | "
            f"{'OutOfMemoryError' if row['big_refused'] else 'ALLOCATED'} | "
            f"{(row['library_peak_bytes'] or 0) / GIB:.3f} GiB | "
            f"{row['nvml_peak_bytes'] / GIB:.3f} GiB | {row['context_bytes'] / GIB:.3f} GiB | "
            f"{'yes' if row['met'] else 'NO'} |"
        )
    if summary.get("findings"):
        lines += ["", "## What the runs show", ""]
        lines += [f"- {finding}" for finding in summary["findings"]]
    lines += ["", "## Command", "", f"    {summary['command']}", ""]
    if summary.get("note"):
        lines += [summary["note"], ""]
    lines += ["## Device and software", ""]
    lines += [f"- {key}: {value}" for key, value in summary["software"].items()]
    lines += ["", f"Run {summary['date_utc']}.", ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--duration", type=float, default=15.0, help="seconds measured per share run"
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="judge the runs already in --out again (summary.json names them), measuring nothing",
    )
    args = parser.parse_args(argv)
    if args.duration < 4 * LIVE_DEADLINE_S:
        parser.error(f"--duration must be at least {4 * LIVE_DEADLINE_S:g} s")
    if args.out is None:
        gpu = gpu_facts(0)
        if gpu is None:
            parser.error("no GPU visible: pass --out to judge existing results")
        args.out = ROOT / "benchmarks" / "results" / gpu_slug(gpu.name) / "quota-limits"
    args.out = args.out.absolute()
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every experiment; the summary without the judged shares."""
    runs: dict[str, str] = {}
    gpu = gpu_facts(0)
    sm_count = gpu.sm_count if gpu is not None else 0
    for name, jobs in experiments(args.duration, args.out, sm_count).items():
        print(f"{name} ...", flush=True)
        config = parse_jobs(jobs, ROOT, source=f"quota_limits {name}")
        change = (
            LiveChange(args.duration / 2, LIVE_CLIENT, LIVE_NEW_CAP) if name == "live" else None
        )
        outcome = run_jobs(config, progress=change)
        if change is not None:
            change.join()
        runs[name] = str(outcome.run_dir.relative_to(args.out))
        print(f"  {outcome.status}: {outcome.run_dir}", flush=True)
    memory = {}
    for name, allocator in ALLOCATORS.items():
        print(f"memory, {name} allocator ...", flush=True)
        memory[name] = memory_check(allocator)
    return {
        "format": FORMAT,
        "description": (__doc__ or "").splitlines()[0],
        "command": shlex.join(["python", *sys.argv]),
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "software": software_summary(),
        "runs": runs,
        "memory": memory,
    }


def judge(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The share runs' figures and verdicts from their run directories, the report of them,
    summary.json and README.md."""
    runs = {
        name: replace(load_run(out / path), label=name) for name, path in summary["runs"].items()
    }
    summary = {**summary, "shares": share_results(runs)}
    write_report([runs["caps"], runs["promise"], runs["live"]], out / "report")
    write_json_atomic(out / "summary.json", summary)
    (out / "README.md").write_text(readme(summary), encoding="utf-8")
    return summary


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        summary = json.loads((args.out / "summary.json").read_text())
    else:
        summary = measure(args)
    print(readme(judge(args.out, summary)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
