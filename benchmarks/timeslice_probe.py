"""The driver's timeslice between two contexts, and what one context switch costs, on this GPU.

    python benchmarks/timeslice_probe.py --out DIR [--seconds 2] [--threshold-ns 2000]
        [--report-only]

What `docs/scheduler.md` ("Sharing without MPS") needs to price an HP arrival that finds a BE
context holding the GPU. Builds `timeslice_probe/spin.cu` with nvcc: one GPU thread spinning on
the global timer (``%globaltimer``, one clock for every context), recording each stretch in which
it did not run. Runs it

1. ``alone``: one process, nothing else on the GPU: the gaps are the noise floor;
2. ``pair``: two processes at once, no MPS (each its own context), started together: each
   process's runs between gaps are its timeslices, and each gap holds the other's timeslice
   plus two switches (out and back), so a gap minus the other's run inside it, halved, is one
   context switch;
3. ``beside-blocked``: one spinning process beside one whose only work waits at a closed
   ``cuStreamWaitValue32`` (``timeslice_probe/blocked.cu``), as BE work waits at orion's GPU
   gate: gaps beyond ``alone``'s mean the driver still hands the blocked context timeslices.

Writes ``alone.json``, ``pair-a.json``, ``pair-b.json``, ``beside-blocked.json`` (the raw timer
records; the last with the blocked process's own check) and
``summary.json`` / ``summary.md`` (timeslice and switch: median, p10, p90). About
``3 x --seconds`` of GPU time. Never changes the GPU's settings (``nvidia-smi compute-policy``
sets the timeslice; this only measures the one in force).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "benchmarks" / "timeslice_probe"
FORMAT = {"name": "orion-timeslice-probe", "version": 1}
START_DELAY_S = 3.0
"""Both processes start spinning this long after being started: time to make their contexts."""


# --------------------------------------------------------------------------------------------
# Analysis (pure: tested on CPU)


def runs_of(record: dict[str, Any]) -> np.ndarray:
    """The stretches in which a spinning process ran, as rows [start, end] (timer ns): from its
    first timer read to its first gap, between gaps, and from its last gap to its last read."""
    gaps = np.asarray(record.get("gaps", []), dtype=float).reshape(-1, 2)
    starts = np.concatenate([[float(record["start_ns"])], gaps[:, 1]])
    ends = np.concatenate([gaps[:, 0], [float(record["end_ns"])]])
    return np.column_stack([starts, ends])


def overlap(intervals: np.ndarray, start: float, end: float) -> float:
    """How much of [start, end] the ``intervals`` (rows [start, end]) cover."""
    if not len(intervals):
        return 0.0
    lo = np.maximum(intervals[:, 0], start)
    hi = np.minimum(intervals[:, 1], end)
    return float(np.clip(hi - lo, 0.0, None).sum())


def figures(values: Sequence[float]) -> dict[str, float] | None:
    """Median, p10, p90 and count of ``values``; None when there are none."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        return None
    return {
        "p50": float(np.median(data)),
        "p10": float(np.percentile(data, 10)),
        "p90": float(np.percentile(data, 90)),
        "count": int(data.size),
    }


def pair_figures(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Timeslice and switch from two processes that spun at once.

    Only gaps in which the other process ran are hand-overs (one in which nothing else ran is
    noise: see ``alone``). Timeslices: every run of either process between two hand-overs (its
    first and last runs are cut by the probe's start and end). Switches: every hand-over's gap
    less the other's running inside it, halved (one switch out, one back)."""
    raw = {"a": runs_of(a), "b": runs_of(b)}
    records = {"a": a, "b": b}
    runs = {}
    for mine, other in (("a", "b"), ("b", "a")):
        # A gap in which the other process never ran is noise (see ``alone``): not a hand-over,
        # so the runs on either side of it are one run.
        gaps = np.asarray(records[mine].get("gaps", []), dtype=float).reshape(-1, 2)
        kept = [gap for gap in gaps if overlap(raw[other], gap[0], gap[1]) > 0]
        runs[mine] = runs_of({**records[mine], "gaps": kept})
    slices: list[float] = []
    switches: list[float] = []
    for mine, other in (("a", "b"), ("b", "a")):
        inner = runs[mine][1:-1]
        slices += (inner[:, 1] - inner[:, 0]).tolist()
        gaps = np.column_stack([runs[mine][:-1, 1], runs[mine][1:, 0]])
        for start, end in gaps:
            switches.append(((end - start) - overlap(raw[other], start, end)) / 2)
    both = min(float(a["end_ns"]), float(b["end_ns"])) - max(
        float(a["start_ns"]), float(b["start_ns"])
    )
    return {
        "timeslice_ms": _scaled(figures(slices), 1e-6),
        "switch_us": _scaled(figures(switches), 1e-3),
        "overlap_s": max(both, 0.0) / 1e9,
    }


def alone_figures(record: dict[str, Any]) -> dict[str, Any]:
    """How many gaps one spinning process saw, the longest (us) and their sum (ms): alone, the
    noise floor; beside a blocked context, the slices the driver handed it."""
    gaps = np.asarray(record.get("gaps", []), dtype=float).reshape(-1, 2)
    lengths = gaps[:, 1] - gaps[:, 0] if len(gaps) else np.zeros(0)
    return {
        "gap_count": int(record.get("gap_count", len(gaps))),
        "longest_gap_us": float(lengths.max()) / 1e3 if len(lengths) else 0.0,
        "gaps_ms": float(lengths.sum()) / 1e6,
        "spun_ms": (float(record["end_ns"]) - float(record["start_ns"])) / 1e6,
    }


def _scaled(stats: dict[str, float] | None, factor: float) -> dict[str, float] | None:
    if stats is None:
        return None
    return {k: (v * factor if k != "count" else v) for k, v in stats.items()}


def summary_markdown(summary: dict[str, Any]) -> str:
    def cell(stats: dict[str, float] | None, digits: int) -> str:
        if stats is None:
            return "- (no complete timeslice seen)"
        return (
            f"{stats['p50']:.{digits}f} (p10 {stats['p10']:.{digits}f}, "
            f"p90 {stats['p90']:.{digits}f}; n={stats['count']})"
        )

    pair = summary["pair"]
    alone = summary["alone"]
    blocked = summary.get("beside_blocked")
    blocked_rows = []
    if blocked is not None:
        blocked_rows = [
            "| beside a context blocked at a closed stream wait: gaps, longest (us), "
            f"sum (ms) of {blocked['spun_ms']:.0f} ms spun | {blocked['gap_count']}, "
            f"{blocked['longest_gap_us']:.1f}, {blocked['gaps_ms']:.2f} |",
            f"| the blocked context's kernel ran before its wait opened | "
            f"{'yes' if blocked.get('ran_early') else 'no'} |",
        ]
    return "\n".join(
        [
            "# Time slicing between two contexts",
            "",
            f"Device: {summary.get('gpu_name')}. Command: `{summary.get('command')}`",
            "",
            "| quantity | value |",
            "|---|---|",
            f"| timeslice (ms) | {cell(pair['timeslice_ms'], 3)} |",
            f"| one context switch (us) | {cell(pair['switch_us'], 1)} |",
            f"| both spinning (s) | {pair['overlap_s']:.2f} |",
            f"| alone: gaps, longest (us) | {alone['gap_count']}, {alone['longest_gap_us']:.1f} |",
            *blocked_rows,
            "",
        ]
    )


def summarise(out: Path, command: str = "") -> dict[str, Any]:
    """Reads the records in ``out`` and writes summary.json and summary.md."""
    records = {
        name: json.loads((out / f"{name}.json").read_text())
        for name in ("alone", "pair-a", "pair-b")
    }
    meta = {}
    if (out / "device.json").is_file():
        meta = json.loads((out / "device.json").read_text())
    beside_blocked = None
    if (out / "beside-blocked.json").is_file():
        record = json.loads((out / "beside-blocked.json").read_text())
        beside_blocked = {
            **alone_figures(record["spin"]),
            "ran_early": record["blocked"]["flag_before_open"] != 1,
        }
    summary = {
        "format": FORMAT["name"],
        "version": FORMAT["version"],
        "command": command or meta.get("command", ""),
        "gpu_name": meta.get("gpu_name"),
        "alone": alone_figures(records["alone"]),
        "pair": pair_figures(records["pair-a"], records["pair-b"]),
        "beside_blocked": beside_blocked,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return summary


# --------------------------------------------------------------------------------------------
# The measurement (GPU)


def build(out: Path, name: str) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = out / name
    source = SOURCES / f"{name}.cu"
    subprocess.run([nvcc, "-O2", "-arch=native", "-o", str(binary), str(source)], check=True)
    return binary


def spin_together(
    binary: Path, count: int, seconds: float, threshold_ns: int, blocked: Path | None = None
) -> list[dict]:
    """``count`` processes spinning at once (and, given ``blocked``, one process blocked at a
    closed stream wait for the same time, its check last); their records."""
    start_at = time.time_ns() + int(START_DELAY_S * 1e9)
    commands = [
        [str(binary), str(int(seconds * 1000)), str(threshold_ns), str(start_at)]
        for _ in range(count)
    ]
    if blocked is not None:
        commands.append([str(blocked), str(int(seconds * 1000)), str(start_at)])
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for command in commands
    ]
    records = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=seconds * 10 + 60)
        if process.returncode != 0:
            raise SystemExit(f"spin failed: {stderr.strip()}")
        records.append(json.loads(stdout))
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--threshold-ns", type=int, default=2000)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    out = args.out.absolute()
    command = " ".join(["benchmarks/timeslice_probe.py", *(argv or sys.argv[1:])])
    if not args.report_only:
        out.mkdir(parents=True, exist_ok=True)
        binary = build(out, "spin")
        (alone,) = spin_together(binary, 1, args.seconds, args.threshold_ns)
        (out / "alone.json").write_text(json.dumps(alone))
        a, b = spin_together(binary, 2, args.seconds, args.threshold_ns)
        (out / "pair-a.json").write_text(json.dumps(a))
        (out / "pair-b.json").write_text(json.dumps(b))
        blocked = build(out, "blocked")
        spin, check = spin_together(binary, 1, args.seconds, args.threshold_ns, blocked)
        (out / "beside-blocked.json").write_text(json.dumps({"spin": spin, "blocked": check}))
        from orion_common.sysinfo import gpu_facts

        gpu = gpu_facts(0)
        (out / "device.json").write_text(
            json.dumps({"command": command, "gpu_name": gpu.name if gpu else None})
        )
    print(summary_markdown(summarise(out, command)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
