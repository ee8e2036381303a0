"""Per-launch overhead of orion's hook, measured on the GPU in one run.

    python benchmarks/launch_overhead.py [--launches 100000] [--repeats 7] [--out DIR]
        [--streams own,legacy]

Builds `launch_overhead/empty_launch.cu` with nvcc and runs it, interleaved round by round so
that clock and thermal drift hit every variant alike:

- `no library`: plain process;
- `passthrough`: orion's preload library in a run with the pass-through policy (counting only);
- `orion HP`: the library as an HP client under the `orion` policy with the default
  `hp_completion` "estimate" (kernel identity lookup, in-flight tracking with estimated finish
  times, stream priority: no extra driver call);
- `orion HP gpu-write`: the same with `hp_completion` "gpu-write": one more driver call after
  every launch (`cuStreamWriteValue64`, so that the GPU writes the launch's completion word).
- `orion BE cpu-gate`: the library as a BE client under `orion` with `be_gate` "cpu", no HP
  client: every launch reads the run's shared state and asks the policy (admitted at once here,
  HP being idle), and is tracked with a GPU-written completion.
- `orion BE gpu-gate`: the same with `be_gate` "gpu": no policy call on the launch; a GPU-side
  gate wait (`cuStreamWaitValue32`) before the launch whenever the work since the stream's last
  one would pass the queue limit. The empty kernel is unprofiled, so it counts as the unknown
  duration (= the 100 us queue limit here): a wait before every launch, the worst case.
- `quota client`: a client under policy `quota` with a GPU-time cap: the same launch path as
  `orion BE gpu-gate` (GPU time is counted by the controller's gate keeper from GPU-written
  completions, not on the launch path), with the keeper counting and granting while it runs.

Each variant runs on two streams (`--streams`): `own`, a stream the program created, and `legacy`,
the legacy default stream, which is where PyTorch launches unless told otherwise. On the legacy
stream an HP client's launches take orion's longest path: the capture query, and the move to its
private high-priority stream (an event and a wait before the launch, an event and a wait after
it, so the program's ordering holds).

Reports, per variant and stream, the median and spread of the per-launch enqueue time (the CPU
cost on the critical path) and of the time until the GPU finished, and the difference from
`no library` on the same stream.
Writes `launch_overhead.json` and `launch_overhead.md` into --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from orion_common.sysinfo import gpu_facts, software_summary
from postprocess.profile_format import gpu_slug
from scheduler_core import SchedulerRun, SchedulerSettings

ROOT = Path(__file__).resolve().parents[1]

SOURCE = ROOT / "benchmarks" / "launch_overhead" / "empty_launch.cu"
VARIANTS = (
    "no library",
    "passthrough",
    "orion HP",
    "orion HP gpu-write",
    "orion BE cpu-gate",
    "orion BE gpu-gate",
    "quota client",
)
STREAMS = ("own", "legacy")
# The variants that run in a scheduler run: (policy, role, hp_completion, be_gate).
RUN_VARIANTS = {
    "passthrough": ("passthrough", "be", "estimate", "cpu"),
    "orion HP": ("orion", "hp", "estimate", "cpu"),
    "orion HP gpu-write": ("orion", "hp", "gpu-write", "cpu"),
    "orion BE cpu-gate": ("orion", "be", "estimate", "cpu"),
    "orion BE gpu-gate": ("orion", "be", "estimate", "gpu"),
    "quota client": ("quota", "be", "estimate", "gpu"),
}
# What launch_overhead.json keeps of each run variant's first client (proof of what it did).
STAT_KEYS = (
    "launches",
    "tracked_launches",
    "completion_mode",
    "streams_prioritised",
    "blocked_launches",
    "gate_waits",
)


def build(out_dir: Path) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = out_dir / "empty_launch"
    subprocess.run([nvcc, "-O2", "-o", str(binary), str(SOURCE)], check=True)
    return binary


def measurement_cpus(count: int) -> set[int]:
    """The CPUs every measured process is pinned to: the highest ``count`` this process may use,
    so that scheduler migrations and differences between cores do not land in the comparison.
    One CPU puts the hook's helper threads on the launching thread's CPU; two let them run
    beside it, which splits their cost from the launch path's own."""
    allowed = sorted(os.sched_getaffinity(0))
    if count > len(allowed):
        raise SystemExit(f"--cpus {count}: this process may use only {len(allowed)} CPUs")
    return set(allowed[-count:])


# What empty_launch prints per round after "round <i>": name value pairs.
MEASURES = (
    "call_ns",
    "total_ns",
    "thread_cpu_ns",
    "process_cpu_ns",
    "thread_switches",
    "process_switches",
)


def run_once(
    binary: Path, env: dict[str, str], launches: int, stream: str, cpus: set[int]
) -> list[dict[str, float]]:
    done = subprocess.run(
        [str(binary), str(launches), "3", stream],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    if done.returncode != 0:
        raise SystemExit(f"empty_launch failed: {done.stderr.strip()}")
    rounds = []
    for line in done.stdout.splitlines():
        parts = line.split()[2:]
        measured = {name: float(value) for name, value in zip(parts[::2], parts[1::2], strict=True)}
        missing = [name for name in MEASURES if name not in measured]
        if missing:
            raise SystemExit(f"empty_launch printed {line!r}, without {', '.join(missing)}")
        rounds.append(measured)
    return rounds


def plain_environment() -> dict[str, str]:
    """This environment without any orion run or preload library."""
    return {
        key: value
        for key, value in os.environ.items()
        if key != "LD_PRELOAD" and not key.startswith("ORION_")
    }


def summarize(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p10": ordered[max(0, round(0.1 * (len(ordered) - 1)))],
        "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        "n": len(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7, help="processes per variant")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--cpus", type=int, default=1, help="CPUs each measured process is pinned to (1 or more)"
    )
    parser.add_argument(
        "--variants",
        type=lambda text: [item.strip() for item in text.split(",") if item.strip()],
        default=list(VARIANTS),
        help=f"which to run, comma-separated ('no library' always runs): {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--streams",
        type=lambda text: [item for item in text.split(",") if item],
        default=list(STREAMS),
        help="own (a stream the program made), legacy (the default stream PyTorch uses)",
    )
    args = parser.parse_args()
    unknown = [stream for stream in args.streams if stream not in STREAMS]
    if unknown or not args.streams:
        parser.error(f"--streams takes {', '.join(STREAMS)}, got {','.join(args.streams)}")
    if args.cpus < 1:
        parser.error(f"--cpus takes 1 or more, got {args.cpus}")
    strange = [variant for variant in args.variants if variant not in VARIANTS]
    if strange:
        parser.error(f"--variants takes {', '.join(VARIANTS)}; not {', '.join(strange)}")
    variants = [
        variant for variant in VARIANTS if variant == "no library" or variant in args.variants
    ]
    cpus = measurement_cpus(args.cpus)
    gpu = gpu_facts(0)
    if gpu is None or gpu.sm_count is None:
        raise SystemExit("no CUDA GPU visible")
    out_dir = args.out or ROOT / "benchmarks" / "results" / gpu_slug(gpu.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = build(out_dir)

    def settings(policy: str, hp_completion: str, be_gate: str) -> SchedulerSettings:
        return SchedulerSettings(
            policy=policy,
            sm_count=gpu.sm_count,
            queue_limit_ns=100_000,
            unknown_duration_ns=100_000,
            hp_completion=hp_completion,
            be_gate=be_gate,
        )

    cells = [(variant, stream) for stream in args.streams for variant in variants]
    samples: dict[tuple[str, str], dict[str, list[float]]] = {
        cell: {measure: [] for measure in MEASURES} for cell in cells
    }
    with contextlib.ExitStack() as stack:
        runs = {}
        for variant, (policy, role, hp_completion, be_gate) in RUN_VARIANTS.items():
            if variant not in variants:
                continue
            run = stack.enter_context(SchedulerRun(settings(policy, hp_completion, be_gate)))
            # One slot per process: a slot is owned by the first process that joins it.
            processes = args.repeats * len(args.streams)
            # The quota client is capped at 0.9 of the GPU: the keeper counts and grants.
            share = {"max_util": 0.9} if policy == "quota" else {}
            indices = [run.add_client(f"r{i}", role, **share) for i in range(processes)]
            run.publish()
            runs[variant] = (run, iter(indices))
        for _ in range(args.repeats):
            for variant, stream in cells:
                if variant == "no library":
                    env = plain_environment()
                else:
                    run, indices = runs[variant]
                    env = run.client_environment(next(indices))
                for measured in run_once(binary, env, args.launches, stream, cpus):
                    for measure in MEASURES:
                        samples[variant, stream][measure].append(measured[measure])
        client_stats = {variant: run.stats()["r0"] for variant, (run, _) in runs.items()}

    baseline = {
        stream: (
            statistics.median(samples["no library", stream]["call_ns"]),
            statistics.median(samples["no library", stream]["total_ns"]),
        )
        for stream in args.streams
    }
    results = {
        "benchmark": "launch_overhead",
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
        "launches_per_round": args.launches,
        "cpus": sorted(cpus),
        "environment": software_summary(),
        "nvcc": subprocess.run(
            [shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc", "--version"],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .splitlines()[-1],
        "variants": {
            f"{variant} / {stream} stream": {
                "variant": variant,
                "stream": stream,
                **{measure: summarize(samples[variant, stream][measure]) for measure in MEASURES},
                "added_call_ns": statistics.median(samples[variant, stream]["call_ns"])
                - baseline[stream][0],
                "added_total_ns": statistics.median(samples[variant, stream]["total_ns"])
                - baseline[stream][1],
            }
            for variant, stream in cells
        },
        "client_stats": {
            variant: {key: stats[key] for key in STAT_KEYS}
            for variant, stats in client_stats.items()
        },
    }
    (out_dir / "launch_overhead.json").write_text(json.dumps(results, indent=2) + "\n")
    env = results["environment"]
    lines = [
        "# Per-launch overhead of orion's hook",
        "",
        f"GPU {env['gpu_name']}, driver {env['driver_version']}, CUDA {env['cuda_version']}, "
        f"{results['nvcc']}; {results['date_utc']}.",
        "",
        f"Command: `{results['command']}` (empty kernel, {args.launches} launches per round, "
        f"3 rounds per process, {args.repeats} processes per variant, variants interleaved, every "
        f"process pinned to CPU {','.join(map(str, sorted(cpus)))}).",
        "",
        "CPU time per launch: the launching thread's, and every thread's (the hook's helpers "
        "included); context switches per 1,000 launches, the launching thread's and every "
        "thread's (medians).",
        "",
        "| variant | stream | enqueue ns/launch (median) | p10-p90 | added vs no library | "
        "until GPU done ns/launch | added | CPU ns/launch: thread, process | "
        "switches/1k launches: thread, process |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["variants"].values():
        call, total = row["call_ns"], row["total_ns"]
        lines.append(
            f"| {row['variant']} | {row['stream']} | {call['median']:.0f} | "
            f"{call['p10']:.0f}-{call['p90']:.0f} | "
            f"{row['added_call_ns']:+.0f} | {total['median']:.0f} | {row['added_total_ns']:+.0f} | "
            f"{row['thread_cpu_ns']['median']:.0f}, {row['process_cpu_ns']['median']:.0f} | "
            f"{row['thread_switches']['median']:.2f}, {row['process_switches']['median']:.2f} |"
        )
    (out_dir / "launch_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    binary.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
