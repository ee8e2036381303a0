"""What ran on the GPU while an HP program's kernels waited: two programs' kernel timelines, merged.

    python benchmarks/gpu_timeline.py wrap --start-at UNIX_S --seconds S --out TRACE.json \\
        -- PROGRAM.py [ARGS...]
    python benchmarks/gpu_timeline.py analyse --hp HP_TRACE.json --be BE_TRACE.json \\
        [--be ...] --out DIR

`wrap` runs a Python program as it would run (same process, its own ``sys.argv``) and records
its CUDA runtime calls and kernels with ``torch.profiler`` (CUPTI) for ``--seconds`` from the wall
clock time ``--start-at``, so that two programs started apart record the same stretch; it keeps
the calls and kernels only, with each trace's clock tied to the wall clock by a marker.

`analyse` takes an HP program's trace and its neighbours': for each HP kernel, how long it
waited after it could have run (its launch call returned and the kernel before it on its stream
ended) and what of the neighbours' work ran on the GPU in that time. Writes ``waits.csv`` (one
row per HP kernel that waited more than ``--min-wait-us``), ``summary.json`` and ``summary.md``:
the waits' distribution, the share of waiting time in which a neighbour's kernel ran, and the
neighbours' kernels that ran most during HP waits. Time slicing shows as waits in which a
neighbour's kernels ran; a wait in which nothing ran is a switch, the host, or something
outside the traced programs.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MARKER = "gpu_timeline_marker"
LAUNCH_CALLS = ("LaunchKernel", "GraphLaunch", "LaunchCooperativeKernel")
"""Substrings of the runtime and driver calls that put a kernel or a graph on a stream."""


# --------------------------------------------------------------------------------------------
# Reading traces (pure: tested on CPU with a made-up trace)


def load_trace(path: Path) -> dict[str, pd.DataFrame]:
    """A kept trace as two tables on the wall clock (us): ``kernels`` (name, stream, start,
    end, correlation) and ``calls`` (name, start, end, correlation)."""
    document = json.loads(Path(path).read_text())
    offset_us = float(document["wall_us_at_marker"]) - float(document["marker_ts"])
    rows = document["events"]
    kernels = [
        {
            "name": e["name"],
            "stream": e.get("stream", 0),
            "start": e["ts"] + offset_us,
            "end": e["ts"] + e.get("dur", 0.0) + offset_us,
            "correlation": e.get("correlation"),
        }
        for e in rows
        if e["kind"] == "kernel"
    ]
    calls = [
        {
            "name": e["name"],
            "start": e["ts"] + offset_us,
            "end": e["ts"] + e.get("dur", 0.0) + offset_us,
            "correlation": e.get("correlation"),
        }
        for e in rows
        if e["kind"] == "call"
    ]
    columns = ["name", "stream", "start", "end", "correlation"]
    return {
        "kernels": pd.DataFrame(kernels, columns=columns).sort_values("start", ignore_index=True),
        "calls": pd.DataFrame(calls, columns=[c for c in columns if c != "stream"]),
    }


def hp_waits(hp: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each HP kernel with the time it could have started (its launch call's end, and the end
    of the kernel before it on its stream) and how long it waited past that (us)."""
    kernels = hp["kernels"].copy()
    calls = hp["calls"][hp["calls"]["correlation"].notna()]
    call_end = calls.set_index("correlation")["end"]
    call_end = call_end[~call_end.index.duplicated()]
    kernels["call_end"] = kernels["correlation"].map(call_end)
    kernels["previous_end"] = kernels.groupby("stream")["end"].shift(1)
    kernels["ready"] = kernels[["call_end", "previous_end"]].max(axis=1)
    kernels = kernels[kernels["ready"].notna()].copy()
    kernels["wait"] = (kernels["start"] - kernels["ready"]).clip(lower=0.0)
    return kernels.reset_index(drop=True)


def neighbour_time(be_kernels: pd.DataFrame, start: float, end: float) -> tuple[float, list]:
    """How much of [start, end] the neighbours' kernels covered (us, overlaps merged), and the
    kernels that ran in it, each with its time inside."""
    if be_kernels.empty or end <= start:
        return 0.0, []
    inside = be_kernels[(be_kernels["end"] > start) & (be_kernels["start"] < end)]
    if inside.empty:
        return 0.0, []
    lo = inside["start"].clip(lower=start).to_numpy()
    hi = inside["end"].clip(upper=end).to_numpy()
    order = np.argsort(lo)
    covered, current_lo, current_hi = 0.0, lo[order[0]], hi[order[0]]
    for index in order[1:]:
        if lo[index] > current_hi:
            covered += current_hi - current_lo
            current_lo, current_hi = lo[index], hi[index]
        else:
            current_hi = max(current_hi, hi[index])
    covered += current_hi - current_lo
    return float(covered), list(zip(inside["name"], hi - lo, strict=True))


def analyse(
    hp: dict[str, pd.DataFrame], neighbours: list[dict[str, pd.DataFrame]], min_wait_us: float
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The HP kernels that waited more than ``min_wait_us``, what ran meanwhile, and a summary."""
    waits = hp_waits(hp)
    frames = [n["kernels"] for n in neighbours if not n["kernels"].empty]
    be = pd.concat(frames, ignore_index=True) if frames else hp["kernels"].iloc[0:0]
    first = max([hp["kernels"]["start"].min(), *[f["start"].min() for f in frames]])
    last = min([hp["kernels"]["end"].max(), *[f["end"].max() for f in frames]])
    waits = waits[(waits["ready"] >= first) & (waits["ready"] <= last)]  # began while both traced
    long = waits[waits["wait"] > min_wait_us].copy()
    by_name: dict[str, float] = {}
    covered = []
    longest = []
    for row in long.itertuples():
        time_covered, ran = neighbour_time(be, row.ready, row.start)
        covered.append(time_covered)
        for name, length in ran:
            by_name[name] = by_name.get(name, 0.0) + float(length)
        longest.append(max((length for _, length in ran), default=0.0))
    long["neighbour_us"] = covered
    long["longest_neighbour_kernel_us"] = longest
    total_wait = float(waits["wait"].sum())
    long_wait = float(long["wait"].sum())
    top = sorted(by_name.items(), key=lambda item: -item[1])[:15]
    summary = {
        "traced_s": (last - first) / 1e6,
        "hp_kernels": len(waits),
        "hp_wait_us": {
            "total": total_wait,
            "p50": float(waits["wait"].median()) if len(waits) else 0.0,
            "p99": float(waits["wait"].quantile(0.99)) if len(waits) else 0.0,
            "max": float(waits["wait"].max()) if len(waits) else 0.0,
        },
        "min_wait_us": min_wait_us,
        "long_waits": len(long),
        "long_wait_us": long_wait,
        "long_wait_with_neighbour_us": float(long["neighbour_us"].sum()),
        "neighbour_kernels_in_long_waits": [{"name": n, "us": t} for n, t in top],
    }
    return long, summary


def summary_markdown(summary: dict[str, Any]) -> str:
    wait = summary["hp_wait_us"]
    share = (
        summary["long_wait_with_neighbour_us"] / summary["long_wait_us"]
        if summary["long_wait_us"]
        else 0.0
    )
    lines = [
        "# What ran while the HP's kernels waited",
        "",
        f"Traced together: {summary['traced_s']:.2f} s; HP kernels: {summary['hp_kernels']}.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| HP kernels' wait after ready, p50 / p99 / max (us) | {wait['p50']:.1f} / "
        f"{wait['p99']:.1f} / {wait['max']:.1f} |",
        f"| all waiting (ms) | {wait['total'] / 1e3:.2f} |",
        f"| waits over {summary['min_wait_us']:.0f} us: count, total (ms) | "
        f"{summary['long_waits']}, {summary['long_wait_us'] / 1e3:.2f} |",
        f"| share of those waits with a neighbour's kernel on the GPU | {share:.3f} |",
        "",
        "Neighbours' kernels that ran during those waits (time inside them):",
        "",
        "| kernel | ms |",
        "|---|---|",
        *[
            f"| `{k['name'][:90]}` | {k['us'] / 1e3:.2f} |"
            for k in summary["neighbour_kernels_in_long_waits"]
        ],
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Recording (GPU)


def kept_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The launch calls and kernels of a torch.profiler chrome trace, and the marker."""
    kept = []
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X":
            continue
        category = event.get("cat", "")
        args = event.get("args", {})
        if category == "kernel":
            kind = "kernel"
        elif category in ("cuda_runtime", "cuda_driver") and any(
            s in event.get("name", "") for s in LAUNCH_CALLS
        ):
            kind = "call"
        elif event.get("name") == MARKER:
            kind = "marker"
        else:
            continue
        kept.append(
            {
                "kind": kind,
                "name": event.get("name", ""),
                "ts": float(event["ts"]),
                "dur": float(event.get("dur", 0.0)),
                "stream": args.get("stream"),
                "correlation": args.get("correlation"),
            }
        )
    return kept


def wrap(start_at: float, seconds: float, out: Path, program: list[str]) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    marks: dict[str, float] = {}

    def record() -> None:
        time.sleep(max(0.0, start_at - time.time()))
        profiler.start()
        with record_function(MARKER):
            marks["wall_us"] = time.time() * 1e6
        time.sleep(seconds)
        profiler.stop()
        raw = out.with_suffix(".raw.json")
        profiler.export_chrome_trace(str(raw))
        events = kept_events(json.loads(raw.read_text()))
        raw.unlink()
        marker = [e for e in events if e["kind"] == "marker"]
        document = {
            "format": "orion-gpu-timeline/1",
            "program": program,
            "torch": torch.__version__,
            "wall_us_at_marker": marks["wall_us"],
            "marker_ts": marker[0]["ts"] if marker else float("nan"),
            "events": [e for e in events if e["kind"] != "marker"],
        }
        out.write_text(json.dumps(document))
        print(f"gpu_timeline: kept {len(document['events'])} events in {out}", file=sys.stderr)

    threading.Thread(target=record, daemon=True).start()
    sys.argv = list(program)
    sys.path.insert(0, str(Path(program[0]).resolve().parent))
    runpy.run_path(program[0], run_name="__main__")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    w = verbs.add_parser("wrap", help="run a program, tracing a stretch of its GPU work")
    w.add_argument("--start-at", type=float, required=True, help="wall clock (unix s)")
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("program", nargs=argparse.REMAINDER)
    a = verbs.add_parser("analyse", help="what ran while the HP's kernels waited")
    a.add_argument("--hp", type=Path, required=True)
    a.add_argument("--be", type=Path, action="append", required=True)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--min-wait-us", type=float, default=100.0)
    args = parser.parse_args(argv)
    if args.verb == "wrap":
        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not program:
            parser.error("wrap: the program to run is missing (after --)")
        wrap(args.start_at, args.seconds, args.out, program)
        return 0
    long, summary = analyse(load_trace(args.hp), [load_trace(p) for p in args.be], args.min_wait_us)
    args.out.mkdir(parents=True, exist_ok=True)
    long.to_csv(args.out / "waits.csv", index=False)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(summary_markdown(summary))
    print(summary_markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
