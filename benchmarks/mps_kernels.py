"""Where MPS's cost to a lone client goes: the HP graph's kernels, one by one, with and without MPS.

    python benchmarks/mps_kernels.py --out DIR [--variants no-mps,mps,...] [--rounds 1]
        [--replays 400] [--spaced-replays 200] [--profiled-replays 30]
        [--pinned-limit 0=60G] [--report-only]

A ResNet-50 bs4 fp32 inference step captured as a CUDA graph (the headline HP client, built by
``workloads`` as ``orion colocate`` builds it) took 1.30 ms of GPU time per replay without MPS
and 1.39-1.43 ms as the only client of an MPS daemon on an H100 (``docs/scheduler.md``). This
script says where those 7% go: each variant runs in a fresh process, alone on the GPU, and
measures

- every replay's GPU time with CUDA events around it, back to back (``--replays``) and 12.5 ms
  apart (``--spaced-replays``, as requests at 80/s arrive);
- every kernel of ``--profiled-replays`` replays (torch.profiler, i.e. CUPTI kernel timestamps,
  which need no Nsight Systems): each kernel's duration and the gap before it, by its position
  in the graph.

Variants (``VARIANTS``): ``no-mps``; ``mps`` (the only client of a private MPS daemon,
``orion_daemon.mps``); the MPS settings NVIDIA's MPS documentation offers a client:
``CUDA_MPS_CLIENT_PRIORITY=0`` (normal, the highest), ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100``,
``CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING=1`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``--pinned-limit``); and ``no-mps-again``, the first
variant repeated last, so drift of the machine shows. ``--rounds`` repeats the whole sequence.

Writes into DIR: ``<variant>[-r<round>]/replays.csv`` (``spacing,replay,gpu_ms``) and
``kernels.csv`` (``replay,position,name,start_us,duration_us,gap_before_us``), ``per_kernel.csv``
(median duration and gap before each kernel position, per variant, and the change from the
baseline), ``summary.json`` (format ``orion-mps-kernels``) and ``summary.md``: per variant the
replay's GPU time, the graph's span, its kernels' total time and its gaps' total time, how much of
the change from ``no-mps`` is kernel time and how much gap, and the kernels that changed most.
About 15 s of GPU time per variant (model build and capture included): under 2 minutes for the
default seven. ``--report-only`` summarises DIR again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

FORMAT = {"name": "orion-mps-kernels", "version": 1}
BASELINE = "no-mps"
SPACING_S = 0.0125
"""The spaced replays' interval: requests at 80/s, the headline's rate."""
TOP_KERNELS = 10


@dataclass(frozen=True)
class Variant:
    """How one measurement runs: as an MPS client or not, with these client variables."""

    mps: bool
    environment: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


def variants(pinned_limit: str) -> dict[str, Variant]:
    """The variants in the order they run (``no-mps-again`` last, for drift)."""
    return {
        "no-mps": Variant(False, note="a context of its own, nothing else on the GPU"),
        "mps": Variant(True, note="the only client of a private MPS daemon"),
        "mps-client-priority-0": Variant(
            True, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, "MPS client priority normal (the highest)"
        ),
        "mps-threads-100": Variant(
            True,
            {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
            "active thread percentage set to all SMs explicitly",
        ),
        "mps-per-ctx-sm-partitioning": Variant(
            True,
            {"CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING": "1"},
            "per-context SM partitioning enabled",
        ),
        "mps-pinned-mem-limit": Variant(
            True,
            {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": pinned_limit},
            f"pinned device memory limit {pinned_limit}",
        ),
        "no-mps-again": Variant(False, note="the first variant again: drift of the machine"),
    }


# --------------------------------------------------------------------------------------------
# Summaries (pure: tested on CPU)


def kernels_from_trace(trace: Mapping[str, Any]) -> pd.DataFrame:
    """The kernel records of a torch.profiler Chrome trace, by start time: ``name``,
    ``start_us``, ``duration_us`` (the profiler's own reading of the trace)."""
    from profiler.measure import kernel_times_from_trace

    return pd.DataFrame(kernel_times_from_trace(trace), columns=["name", "start_us", "duration_us"])


def split_replays(kernels: pd.DataFrame, replays: int) -> pd.DataFrame:
    """Numbers each kernel by replay and by position in the graph (replays run one after the
    other, each with the graph's kernels in the same order), with the gap before it in its
    replay (NaN for a replay's first kernel). Raises ValueError when the kernels do not divide
    into ``replays`` equal replays (a kernel record lost, or another process on the GPU)."""
    if replays < 1 or len(kernels) % replays != 0:
        raise ValueError(f"{len(kernels)} kernel records do not make {replays} equal replays")
    per_replay = len(kernels) // replays
    table = kernels.sort_values("start_us", kind="stable").reset_index(drop=True).copy()
    table.insert(0, "replay", np.arange(len(table)) // per_replay)
    table.insert(1, "position", np.arange(len(table)) % per_replay)
    names = table.pivot(index="replay", columns="position", values="name")
    if not (names.nunique(axis=0) == 1).all():
        raise ValueError("the replays' kernels differ in order: not one graph replayed")
    previous_end = (table["start_us"] + table["duration_us"]).shift(1)
    table["gap_before_us"] = (table["start_us"] - previous_end).where(table["position"] > 0)
    return table


def replay_figures(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per replay: the graph's span on the GPU (first kernel start to last kernel end), its
    kernels' total time and the total of the gaps between them (span = kernels + gaps)."""
    ends = (kernels["start_us"] + kernels["duration_us"]).groupby(kernels["replay"]).max()
    grouped = kernels.groupby("replay")
    return pd.DataFrame(
        {
            "span_us": ends - grouped["start_us"].min(),
            "kernels_us": grouped["duration_us"].sum(),
            "gaps_us": grouped["gap_before_us"].sum(),
        }
    )


def per_kernel(tables: Mapping[str, pd.DataFrame], baseline: str = BASELINE) -> pd.DataFrame:
    """Per kernel position: its name, and per variant the median duration and gap before it over
    the replays; with a baseline, each variant's change from it (``<variant>_added_us``: added
    duration plus added gap)."""
    out: pd.DataFrame | None = None
    for variant, table in tables.items():
        medians = table.groupby("position").agg(
            name=("name", "first"),
            duration_us=("duration_us", "median"),
            gap_before_us=("gap_before_us", "median"),
        )
        medians = medians.rename(
            columns={
                "duration_us": f"{variant}_duration_us",
                "gap_before_us": f"{variant}_gap_before_us",
            }
        )
        if out is None:
            out = medians
        else:
            if len(out) != len(medians) or not (out["name"] == medians["name"]).all():
                raise ValueError(f"variant {variant!r} replayed another graph than the first")
            out = out.join(medians.drop(columns="name"))
    if out is None:
        return pd.DataFrame()
    if baseline in tables:
        for variant in tables:
            if variant == baseline:
                continue
            out[f"{variant}_added_us"] = (
                out[f"{variant}_duration_us"] - out[f"{baseline}_duration_us"]
            ) + (out[f"{variant}_gap_before_us"] - out[f"{baseline}_gap_before_us"]).fillna(0.0)
    return out.reset_index()


def variant_summary(replays: pd.DataFrame, kernels: pd.DataFrame | None) -> dict[str, Any]:
    """One variant's figures: replay GPU time (events) back to back and spaced, and (with kernel
    records) the median span, kernel time and gap time per replay."""
    summary: dict[str, Any] = {}
    for spacing, group in replays.groupby("spacing"):
        times = group["gpu_ms"].to_numpy(dtype=float)
        summary[f"replay_ms_{spacing}"] = {
            "p50": float(np.median(times)),
            "p10": float(np.percentile(times, 10)),
            "p90": float(np.percentile(times, 90)),
            "count": len(times),
        }
    if kernels is not None and not kernels.empty:
        figures = replay_figures(kernels)
        summary["kernels_per_replay"] = int(kernels["position"].max() + 1)
        for column in ("span_us", "kernels_us", "gaps_us"):
            summary[f"{column}_p50"] = float(figures[column].median())
    return summary


def attribution(summaries: Mapping[str, dict[str, Any]], baseline: str = BASELINE) -> dict:
    """Per variant, the change of the median span from the baseline's, split into kernel time and
    gap time (their medians' changes), and the change of the replay's event-timed GPU time."""
    base = summaries.get(baseline, {})
    result: dict[str, Any] = {}
    for variant, summary in summaries.items():
        if variant == baseline:
            continue
        entry: dict[str, Any] = {}
        for spacing in ("back_to_back", "spaced"):
            key = f"replay_ms_{spacing}"
            if key in summary and key in base:
                mine, theirs = summary[key]["p50"], base[key]["p50"]
                entry[f"replay_{spacing}_ratio"] = mine / theirs if theirs else None
        if "span_us_p50" in summary and "span_us_p50" in base:
            added = {
                column: summary[f"{column}_p50"] - base[f"{column}_p50"]
                for column in ("span_us", "kernels_us", "gaps_us")
            }
            entry.update({f"added_{column}": value for column, value in added.items()})
            span = added["span_us"]
            entry["share_in_kernels"] = added["kernels_us"] / span if span else None
            entry["share_in_gaps"] = added["gaps_us"] / span if span else None
        result[variant] = entry
    return result


def top_kernels(table: pd.DataFrame, variant: str, count: int = TOP_KERNELS) -> list[dict]:
    """The kernel positions whose time (duration plus gap before) changed most under ``variant``."""
    column = f"{variant}_added_us"
    if column not in table:
        return []
    ranked = table.reindex(table[column].abs().sort_values(ascending=False).index).head(count)
    return [
        {"position": int(row["position"]), "name": str(row["name"]), "added_us": float(row[column])}
        for _, row in ranked.iterrows()
    ]


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """The summary as a short Markdown page: one row per variant, then the top kernels."""
    lines = [
        "# Where MPS's cost to a lone client goes",
        "",
        f"Graph: {summary.get('workload')}; device: {summary.get('gpu_name')}.",
        "",
        "| variant | replay p50 ms (back to back) | replay p50 ms (spaced) | span us | kernels us "
        "| gaps us | added span us | of it in kernels | of it in gaps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def number(value: Any, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def share(value: Any) -> str:
        return "-" if value is None else f"{100 * value:.0f}%"

    for variant, figures in summary.get("variants", {}).items():
        added = summary.get("attribution", {}).get(variant, {})
        lines.append(
            f"| {variant} "
            f"| {number(figures.get('replay_ms_back_to_back', {}).get('p50'), 3)} "
            f"| {number(figures.get('replay_ms_spaced', {}).get('p50'), 3)} "
            f"| {number(figures.get('span_us_p50'))} | {number(figures.get('kernels_us_p50'))} "
            f"| {number(figures.get('gaps_us_p50'))} | {number(added.get('added_span_us'))} "
            f"| {share(added.get('share_in_kernels'))} | {share(added.get('share_in_gaps'))} |"
        )
    for variant, kernels in summary.get("top_kernels", {}).items():
        if not kernels:
            continue
        lines += ["", f"## Kernels that changed most under `{variant}`", ""]
        lines += ["| position | kernel | added us |", "|---|---|---|"]
        lines += [
            f"| {k['position']} | `{k['name'][:80]}` | {k['added_us']:+.2f} |" for k in kernels
        ]
    lines += ["", f"Command: `{summary.get('command', '')}`", ""]
    return "\n".join(lines)


def summarise(out: Path, names: Sequence[str]) -> dict[str, Any]:
    """Reads every variant folder in ``out`` (``names``, in order) and writes ``per_kernel.csv``,
    ``summary.json`` and ``summary.md``; returns the summary."""
    summaries: dict[str, dict[str, Any]] = {}
    tables: dict[str, pd.DataFrame] = {}
    meta: dict[str, Any] = {}
    for name in names:
        folder = out / name
        if not (folder / "replays.csv").is_file():
            continue
        replays = pd.read_csv(folder / "replays.csv")
        kernels = None
        # kernels.csv, or kernels.csv.gz as committed results keep it (pandas reads either)
        found = [p for p in (folder / "kernels.csv", folder / "kernels.csv.gz") if p.is_file()]
        if found:
            kernels = pd.read_csv(found[0])
            tables[name] = kernels
        summaries[name] = variant_summary(replays, kernels)
        with contextlib.suppress(OSError, ValueError):
            info = json.loads((folder / "worker.json").read_text())
            summaries[name]["environment"] = info.get("environment", {})
            summaries[name]["kernel_records"] = info.get("kernel_records")
            meta = meta or info
    baseline = next((n for n in names if n.startswith(BASELINE) and n in tables), BASELINE)
    table = per_kernel({k: v for k, v in tables.items()}, baseline) if tables else pd.DataFrame()
    if not table.empty:
        table.to_csv(out / "per_kernel.csv", index=False)
    summary = {
        "format": FORMAT["name"],
        "version": FORMAT["version"],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": meta.get("command", ""),
        "workload": meta.get("workload"),
        "gpu_name": meta.get("software", {}).get("gpu_name"),
        "software": meta.get("software", {}),
        "baseline": baseline,
        "variants": summaries,
        "attribution": attribution(summaries, baseline),
        "top_kernels": {name: top_kernels(table, name) for name in summaries if name != baseline},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return summary


# --------------------------------------------------------------------------------------------
# The measurement (GPU)


def worker(folder: Path, replays: int, spaced: int, profiled: int, command: str) -> int:
    """Runs in the variant's own process: builds and captures the graph, times its replays,
    records its kernels. Writes replays.csv, kernels.csv and worker.json into ``folder``."""
    import time

    import torch

    from orion_common.sysinfo import software_summary
    from workloads import WorkloadSpec, build_workload

    spec = WorkloadSpec("resnet50", mode="infer", batch_size=4, cuda_graph=True)
    workload = build_workload(spec)
    graph = workload.graph  # a GraphedInference: its captured torch.cuda.CUDAGraph
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize()
    rows = []
    for spacing, count, pause in (("back_to_back", replays, 0.0), ("spaced", spaced, SPACING_S)):
        events: list[tuple[Any, Any]] = []
        for _ in range(count):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            events.append((start, end))
            if pause:
                end.synchronize()
                time.sleep(pause)
        torch.cuda.synchronize()
        rows += [
            {"spacing": spacing, "replay": i, "gpu_ms": start.elapsed_time(end)}
            for i, (start, end) in enumerate(events)
        ]
    pd.DataFrame(rows).to_csv(folder / "replays.csv", index=False)

    records, note = 0, None
    try:
        kernels = profiled_kernels(graph, profiled, folder / "trace.json")
    except Exception as error:  # the profiler itself (CUPTI under MPS, say): the replays stand
        kernels, note = None, f"torch.profiler failed: {type(error).__name__}: {error}"
    if kernels is not None:
        records = len(kernels)
        try:
            split_replays(kernels, profiled).to_csv(folder / "kernels.csv", index=False)
        except ValueError as error:  # records that do not split into replays: kept, said why
            note = str(error)
            kernels.to_csv(folder / "kernel_records.csv", index=False)
    info = {
        "command": command,
        "workload": spec.label,
        "software": software_summary(),
        "environment": {k: v for k, v in os.environ.items() if k.startswith("CUDA_MPS")},
        "kernel_records": records,
        "kernel_note": note,
    }
    (folder / "worker.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    return 0


def profiled_kernels(graph: Any, replays: int, trace_path: Path) -> pd.DataFrame:
    """The kernel records (CUPTI, through torch.profiler) of ``replays`` replays of ``graph``,
    each replay finished before the next starts, so that the records split into replays."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace_path))
    try:
        return kernels_from_trace(json.loads(trace_path.read_text()))
    finally:
        trace_path.unlink(missing_ok=True)


def run_variant(args: argparse.Namespace, name: str, variant: Variant, folder: Path) -> None:
    """One variant in a fresh process (under a private MPS daemon when it asks for MPS)."""
    from orion_daemon.mps import private_mps_daemon

    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        str(folder),
        "--replays",
        str(args.replays),
        "--spaced-replays",
        str(args.spaced_replays),
        "--profiled-replays",
        str(args.profiled_replays),
        "--command",
        args.command,
    ]
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS")
    }  # nothing inherited: each variant sets exactly its own
    environment.update(variant.environment)
    with contextlib.ExitStack() as stack:
        if variant.mps:
            daemon = stack.enter_context(private_mps_daemon(folder))
            environment.update(daemon.environment)
        log = folder / "worker.log"
        with log.open("w") as output:
            result = subprocess.run(
                command, env=environment, stdout=output, stderr=subprocess.STDOUT, check=False
            )
    if result.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        print(f"{name}: exit {result.returncode}: {' | '.join(tail)}", file=sys.stderr)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=False)
    parser.add_argument("--variants", default=None, help="comma-separated, default all")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--replays", type=int, default=400)
    parser.add_argument("--spaced-replays", type=int, default=200)
    parser.add_argument("--profiled-replays", type=int, default=30)
    parser.add_argument("--pinned-limit", default="0=60G")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--command", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and args.out is None:
        parser.error("--out is required")
    known = variants(args.pinned_limit)
    chosen = list(known) if args.variants is None else args.variants.split(",")
    unknown = [name for name in chosen if name not in known]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(known)}")
    if min(args.rounds, args.replays, args.spaced_replays, args.profiled_replays) < 1:
        parser.error("--rounds and the replay counts must be at least 1")
    args.chosen = chosen
    args.known = known
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker(
            args.worker, args.replays, args.spaced_replays, args.profiled_replays, args.command
        )
    out = args.out.absolute()
    plan = [
        (name if args.rounds == 1 else f"{name}-r{round_}", name)
        for round_ in range(1, args.rounds + 1)
        for name in args.chosen
    ]
    if not args.report_only:
        out.mkdir(parents=True, exist_ok=True)
        args.command = shlex.join(["benchmarks/mps_kernels.py", *(argv or sys.argv[1:])])
        for folder_name, name in plan:
            print(f"{folder_name} ...", flush=True)
            run_variant(args, folder_name, args.known[name], out / folder_name)
    summary = summarise(out, [folder_name for folder_name, _ in plan])
    print((out / "summary.md").read_text())
    return 0 if summary["variants"] else 1


if __name__ == "__main__":
    sys.exit(main())
