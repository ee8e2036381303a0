"""What an HP launch waits for when it arrives beside a BE context, by what that context is doing.

    python benchmarks/arrival_probe.py --out DIR [--seconds 8] [--rounds 3] [--modes ...]
        [--summarise-only]

Time-sliced, every HP request of the program suite paid 1.1-1.2x of its service alone however
tightly orion held BE (``benchmarks/results/nvidia-h200/suite-floor-loop/``): a request that
finds the BE context resident waits for it to be switched out. Whether that wait depends on what
the BE context is doing when the request comes (running a long kernel, short ones, nothing)
decides whether a BE duty cycle below 100% between HP requests could buy the HP more than it
costs BE. This measures it without orion: two plain processes, each its own context.

- HP (``--role hp``): launches a 1-block kernel spinning ``--hp-us`` at exponential intervals
  (mean ``--gap-ms``) and times each from the launch call to the end of the synchronize that
  follows (the host's monotonic clock), for ``--seconds``, after half a second of warm-up.
- BE (``--role be``), one process per mode:
  ``none`` (no BE process: the floor), ``idle`` (a context and nothing on it), ``long``
  (20-ms kernels back to back), ``short`` (20-us kernels, at most 50 queued), ``duty50``
  (20-us kernels, each waited for, then 20 us with nothing queued).

Modes interleave within each round (none idle long short duty50, then again). Writes
``raw.json`` (every latency) and ``summary.json`` / ``summary.md``: per mode its median and p99
with 95% intervals, and the p99 over the same round's ``none``, over rounds. Needs CuPy and an
NVIDIA GPU, with no MPS daemon serving it. Never changes the GPU's settings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reporting.stats import (  # noqa: E402
    bootstrap_percentile_ci,
    percentile_statistic,
    ratio_over_rounds_ci,
)

FORMAT = {"name": "orion-arrival-probe", "version": 1}
MODES = ("none", "idle", "long", "short", "duty50")
BASELINE = "none"
WARMUP_S = 0.5
BE_KERNEL_US = {"long": 20_000.0, "short": 20.0, "duty50": 20.0}
SHORT_QUEUE = 50
"""``short``: the BE process synchronises every this many launches, so its queue stays bounded
(about a millisecond of work) as a trainer's does, not the whole run's."""
SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


# --------------------------------------------------------------------------------------------
# Analysis (pure: tested on CPU)


def _interval(values: tuple[float, float, float], digits: int = 2) -> dict[str, float]:
    point, low, high = values
    return {"value": round(point, digits), "low": round(low, digits), "high": round(high, digits)}


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per mode, over its rounds: the HP latency's median and p99 (us) with their intervals, and
    the p99 over the same round's ``none`` (a two-level bootstrap over rounds). ``records``:
    one ``{"round", "mode", "latencies_us"}`` per run."""
    by_mode: dict[str, dict[int, list[float]]] = {}
    for record in records:
        by_mode.setdefault(record["mode"], {})[int(record["round"])] = record["latencies_us"]
    baseline = by_mode.get(BASELINE, {})
    modes: dict[str, Any] = {}
    for mode in [m for m in MODES if m in by_mode] + sorted(set(by_mode) - set(MODES)):
        rounds = by_mode[mode]
        pooled = [value for values in rounds.values() for value in values]
        entry: dict[str, Any] = {
            "rounds": len(rounds),
            "launches": len(pooled),
            "median_us": _interval(bootstrap_percentile_ci(pooled, 50.0)),
            "p99_us": _interval(bootstrap_percentile_ci(pooled, 99.0)),
        }
        pairs = [(rounds[r], baseline[r]) for r in sorted(rounds) if r in baseline]
        if mode != BASELINE and pairs:
            ratio = ratio_over_rounds_ci(pairs, percentile_statistic(99.0))
            entry["p99_over_none"] = _interval(ratio, digits=3)
        modes[mode] = entry
    return {"format": FORMAT, "modes": modes}


def summary_markdown(summary: dict[str, Any], command: str = "") -> str:
    """The summary as a table: one row per mode."""

    def cell(figure: dict[str, float] | None, unit: str = "") -> str:
        if figure is None:
            return "-"
        return f"{figure['value']:g}{unit} [{figure['low']:g}, {figure['high']:g}]"

    lines = ["# HP launch latency beside a BE context, by what it does", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    lines += [
        "| BE context | rounds | HP launches | median us | p99 us | p99 / none |",
        "|---|---:|---:|---|---|---|",
    ]
    for mode, entry in summary["modes"].items():
        lines.append(
            f"| {mode} | {entry['rounds']} | {entry['launches']} | {cell(entry['median_us'])} | "
            f"{cell(entry['p99_us'])} | {cell(entry.get('p99_over_none'), 'x')} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The processes (need a GPU)


def _spin_kernel(stream):  # pragma: no cover - needs a GPU
    """The spin kernel, compiled and run once on ``stream`` (so that neither process measures or
    starts with a compilation), and the GPU's clock cycles per microsecond."""
    import cupy
    import numpy as np

    kernel = cupy.RawKernel(SPIN_SOURCE, "spin")
    kernel((1,), (1,), (np.int64(1),), stream=stream)
    stream.synchronize()
    rate_khz = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]
    return kernel, rate_khz / 1000.0


def run_hp(
    seconds: float, hp_us: float, gap_ms: float, seed: int
) -> list[float]:  # pragma: no cover
    import cupy
    import numpy as np

    stream = cupy.cuda.Stream(non_blocking=True)
    kernel, per_us = _spin_kernel(stream)
    cycles = np.int64(hp_us * per_us)
    rng = np.random.default_rng(seed)
    latencies: list[float] = []
    start = time.monotonic()
    next_at = start
    while True:
        next_at += rng.exponential(gap_ms / 1000.0)
        now = time.monotonic()
        if next_at > start + WARMUP_S + seconds:
            return latencies
        if next_at > now:
            time.sleep(next_at - now)
        began = time.perf_counter_ns()
        kernel((1,), (1,), (cycles,), stream=stream)
        stream.synchronize()
        if next_at >= start + WARMUP_S:
            latencies.append((time.perf_counter_ns() - began) / 1000.0)


def run_be(mode: str) -> None:  # pragma: no cover - needs a GPU
    import cupy
    import numpy as np

    stream = cupy.cuda.Stream(non_blocking=True)
    kernel, per_us = _spin_kernel(stream)
    print("ready", flush=True)
    if mode == "idle":
        sys.stdin.read()  # until the driver closes our stdin
        return
    cycles = np.int64(BE_KERNEL_US[mode] * per_us)
    launched = 0
    while True:  # killed by the driver
        kernel((1024,), (256,), (cycles,), stream=stream)
        launched += 1
        if mode == "long" or (mode == "short" and launched % SHORT_QUEUE == 0):
            stream.synchronize()
        elif mode == "duty50":
            stream.synchronize()
            until = time.perf_counter_ns() + BE_KERNEL_US[mode] * 1000
            while time.perf_counter_ns() < until:
                pass


def _gpu_problem() -> str | None:
    """Why this machine cannot run the probe (no CuPy, no GPU), or None."""
    try:
        import cupy
    except ImportError:
        return "the probe needs CuPy (pip install cupy-cuda12x or the build for this CUDA)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy raises its own CUDA errors
        return f"no NVIDIA GPU that CUDA can use ({error})"
    return None if count > 0 else "no NVIDIA GPU that CUDA can use"


def _measure(
    args: argparse.Namespace, mode: str, round_: int
) -> dict[str, Any]:  # pragma: no cover
    be = None
    if mode != BASELINE:
        be = subprocess.Popen(
            [sys.executable, __file__, "--role", "be", "--mode", mode],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert be.stdout is not None
        if be.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the BE process for {mode} did not start (exit {be.wait()})")
    try:
        out = args.out / f"hp-{mode}-{round_}.json"
        subprocess.run(
            [sys.executable, __file__, "--role", "hp", "--seconds", str(args.seconds),
             "--hp-us", str(args.hp_us), "--gap-ms", str(args.gap_ms),
             "--seed", str(round_), "--out", str(out)],
            check=True,
        )  # fmt: skip
        latencies = json.loads(out.read_text())
        out.unlink()
    finally:
        if be is not None:
            be.kill()
            be.wait()
    return {"round": round_, "mode": mode, "latencies_us": latencies}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="the results' folder")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--modes", default=",".join(MODES), help="BE modes, comma-separated")
    parser.add_argument("--hp-us", type=float, default=50.0, help="the HP kernel's spin, us")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="mean time between HP launches")
    parser.add_argument("--summarise-only", action="store_true", help="summary from raw.json")
    parser.add_argument("--role", choices=("driver", "hp", "be"), default="driver",
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "be":
        run_be(args.mode)
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.role == "hp":
        latencies = run_hp(args.seconds, args.hp_us, args.gap_ms, args.seed)
        args.out.write_text(json.dumps(latencies))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or BASELINE not in modes:
        parser.error(f"--modes: {', '.join(unknown) or 'none'} unknown, or {BASELINE!r} missing; "
                     f"choose from {', '.join(MODES)} with {BASELINE!r} among them")  # fmt: skip
    if args.seconds <= 0 or args.rounds < 1 or args.hp_us <= 0 or args.gap_ms <= 0:
        parser.error("--seconds, --hp-us and --gap-ms must be positive, --rounds at least 1")
    raw = args.out / "raw.json"
    if args.summarise_only:
        if not raw.is_file():
            parser.error(f"--summarise-only: no {raw}")
        records = json.loads(raw.read_text())["records"]
    else:
        problem = _gpu_problem()
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        records = []
        for round_ in range(args.rounds):
            for mode in modes:
                print(f"round {round_} {mode}", flush=True)
                try:
                    records.append(_measure(args, mode, round_))
                except (subprocess.CalledProcessError, RuntimeError) as error:
                    print(f"error: round {round_} {mode}: {error}", file=sys.stderr)
                    return 1
                raw.write_text(json.dumps({"format": FORMAT, "records": records}))
    summary = summarise(records)
    command = "python benchmarks/arrival_probe.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "summary.md").write_text(summary_markdown(summary, command))
    print(summary_markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
