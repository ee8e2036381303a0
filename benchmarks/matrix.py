"""orion's benchmark matrix on one GPU: HP inference beside BE jobs, under every policy.

    python benchmarks/matrix.py [--hp resnet50,mobilenet_v2] [--rates low,high]
        [--be resnet50-train,mobilenet_v2-train,bert-train,resnet50-infer]
        [--policies dedicated,timeslice,mps,mps-priority,priority,reef,orion]
        [--queue-limits default,100,500] [--repeats 1] [--duration 20] [--out DIR]
        [--time-budget SECONDS] [--report-only]

Every cell (HP workload x rate x BE job x policy) is one `orion colocate` run. --repeats N runs
every cell of a group N times, round after round (all policies of round 1, then of round 2, ...),
so slow drift of the machine spreads over every policy alike; round r > 1 names its cells
`<cell>#r`, and each round is compared with its own `dedicated` run. --queue-limits
sweeps the BE queue bound of the gated policies (reef, orion): each value in microseconds adds a
cell `<policy>@<value>us` (`default` is the bound derived from the HP profile, cell `<policy>`);
other policies ignore it. Cells already
complete under --out are skipped, and --time-budget stops before a cell that would not fit, so a
long matrix is run as several invocations of the same command (each one resumes). At the end
(and with --report-only) each group of cells (HP x rate x BE) gets an `orion report` in
DIR/reports/<group>/ and DIR/README.md gets the headline table of every group.

Profiles come from the default location (`orion profile` writes there), or from
$ORION_PROFILE_DIR when set.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from colocation.config import parse_jobs
from colocation.policies import POLICY_NAMES
from colocation.runner import run_jobs
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.sysinfo import gpu_facts, software_summary
from postprocess.profile_format import gpu_slug
from reporting import headline, load_run, write_report

ROOT = Path(__file__).resolve().parents[1]

HP_JOBS = {
    "resnet50": {"workload": "resnet50", "mode": "infer", "batch_size": 4},
    "mobilenet_v2": {"workload": "mobilenet_v2", "mode": "infer", "batch_size": 4},
}
# HP Poisson arrival rates (requests/s). ResNet-50 bs4 alone serves about 350/s on an H100/H200.
RATES = {"low": 80.0, "high": 200.0}
BE_JOBS = {
    "resnet50-train": {"workload": "resnet50", "mode": "train", "batch_size": 32},
    "mobilenet_v2-train": {"workload": "mobilenet_v2", "mode": "train", "batch_size": 64},
    "bert-train": {"workload": "bert", "mode": "train", "batch_size": 8},
    "resnet50-infer": {
        "workload": "resnet50",
        "mode": "infer",
        "batch_size": 4,
        "arrivals": {"kind": "poisson", "rate_per_s": RATES["high"]},
    },
}
# Start-up (process start, model build, warm-up) per client phase, for the time budget: 7-8 s
# per phase measured on an H200 with ResNet-50 clients.
SETUP_ESTIMATE_S = 10.0


GATED_POLICIES = ("reef", "orion")
"""Policies with a BE queue bound, the only ones --queue-limits applies to."""


def cell_key(policy: str, queue_limit_us: float | None, round_: int = 1) -> str:
    """The cell's name in matrix.json: the policy, with the queue bound when it is not derived,
    and the round after ``#`` from the second round on (so a one-round matrix keeps plain names)."""
    key = policy if queue_limit_us is None else f"{policy}@{queue_limit_us:g}us"
    return key if round_ == 1 else f"{key}#{round_}"


def split_cell_key(key: str) -> tuple[str, int]:
    """``orion@500us#3`` -> (``orion@500us``, 3); a key without a round is round 1."""
    name, _, round_ = key.partition("#")
    return name, int(round_) if round_.isdigit() else 1


def cell_jobs(
    hp: str,
    rate: str,
    be: str,
    policy: str,
    duration_s: float,
    out: Path,
    queue_limit_us: float | None = None,
) -> dict:
    hp_client = {
        "name": "hp",
        "role": "hp",
        **HP_JOBS[hp],
        "arrivals": {"kind": "poisson", "rate_per_s": RATES[rate]},
    }
    be_client = {"name": "be", "role": "be", **BE_JOBS[be]}
    return {
        "run": {
            "policy": policy,
            "duration_s": duration_s,
            "warmup_steps": 20,
            "seed": 1,
            "output_dir": str(out / "runs" / group_name(hp, rate, be)),
            "thresholds": {"queue_limit_us": queue_limit_us},
        },
        "clients": [hp_client, be_client],
    }


def group_name(hp: str, rate: str, be: str) -> str:
    return f"{hp}-{rate}__{be}"


def load_index(out: Path) -> dict[str, Any]:
    path = out / "matrix.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"format": "orion-matrix", "version": 1, "cells": {}, "invocations": []}


def complete_run(out: Path, entry: str | None) -> Path | None:
    if not entry:
        return None
    path = out / entry
    try:
        return path if json.loads((path / "run.json").read_text())["status"] == "complete" else None
    except (OSError, ValueError, KeyError):
        return None


def run_cells(args: argparse.Namespace, index: dict[str, Any]) -> bool:
    """Runs the missing cells within the time budget; True when none is left."""
    started = time.monotonic()
    left = False
    for hp in args.hp:
        for rate in args.rates:
            for be in args.be:
                group = group_name(hp, rate, be)
                cells = index["cells"].setdefault(group, {})
                for round_, policy, queue_limit_us in planned_cells(
                    args.policies, args.queue_limits, args.repeats
                ):
                    key = cell_key(policy, queue_limit_us, round_)
                    if complete_run(args.out, cells.get(key)):
                        continue
                    phases = 2 if policy == "dedicated" else 1
                    estimate = phases * (args.duration + SETUP_ESTIMATE_S)
                    if (
                        args.time_budget
                        and time.monotonic() - started + estimate > args.time_budget
                    ):
                        left = True
                        continue
                    jobs = cell_jobs(hp, rate, be, policy, args.duration, args.out, queue_limit_us)
                    config = parse_jobs(jobs, ROOT, source=f"matrix cell {group}/{key}")
                    print(f"[{time.monotonic() - started:6.0f} s] {group} {key}", flush=True)
                    try:
                        outcome = run_jobs(config)
                    except OrionError as error:
                        print(f"  refused: {error.message}", flush=True)
                        cells[key] = None
                        continue
                    cells[key] = str(outcome.run_dir.relative_to(args.out))
                    print(f"  {outcome.status}: {outcome.run_dir}", flush=True)
                    write_json_atomic(args.out / "matrix.json", index)
    return not left


def planned_cells(
    policies: list[str], queue_limits: list[float | None], repeats: int = 1
) -> list[tuple[int, str, float | None]]:
    """(round, policy, queue bound) per cell, in order: round by round, the gated policies once
    per bound."""
    return [
        (round_, policy, limit)
        for round_ in range(1, repeats + 1)
        for policy in policies
        for limit in (queue_limits if policy in GATED_POLICIES else [None])
    ]


def rounds_of(cells: dict[str, str | None]) -> dict[int, dict[str, str | None]]:
    """A group's cells by round: {round: {cell name without round: entry}}."""
    rounds: dict[int, dict[str, str | None]] = {}
    for key, entry in cells.items():
        name, round_ = split_cell_key(key)
        rounds.setdefault(round_, {})[name] = entry
    return dict(sorted(rounds.items()))


def summarize_rounds(heads: list[pd.DataFrame]) -> pd.DataFrame:
    """Per cell over the rounds' headline tables: the median, lowest and highest HP p99
    slowdown and BE throughput fraction, and in how many rounds the target was met."""
    table = pd.concat(heads, ignore_index=True)
    table = table[~table["is_baseline"]]
    grouped = table.groupby("run", sort=False)
    return pd.DataFrame(
        {
            "rounds": grouped.size(),
            "slowdown_median": grouped["hp_p99_slowdown"].median(),
            "slowdown_min": grouped["hp_p99_slowdown"].min(),
            "slowdown_max": grouped["hp_p99_slowdown"].max(),
            "fraction_median": grouped["be_throughput_fraction"].median(),
            "fraction_min": grouped["be_throughput_fraction"].min(),
            "fraction_max": grouped["be_throughput_fraction"].max(),
            "target_met": grouped["target_met"].apply(lambda met: sum(v is True for v in met)),
        }
    ).reset_index()


def write_reports(args: argparse.Namespace, index: dict[str, Any]) -> None:
    lines = [
        "# orion benchmark matrix",
        "",
        "HP inference (Poisson arrivals) beside one best-effort job on one GPU, under every "
        "policy. Slowdown = HP p99 shared / HP p99 alone (`dedicated` of the same round); "
        "fraction = BE throughput shared / alone. Target: slowdown <= 1.05 and fraction >= 0.90.",
        "",
    ]
    environment = None
    for group, cells in index["cells"].items():
        rounds = rounds_of(cells)
        heads = []
        section: list[str] = []
        for round_, round_cells in rounds.items():
            runs = [
                load_run(path)
                for entry in round_cells.values()
                if (path := complete_run(args.out, entry))
            ]
            if not runs:
                continue
            environment = environment or runs[0].environment
            folder = args.out / "reports" / group
            report = write_report(runs, folder if round_ == 1 else folder / f"round-{round_}")
            head = headline(runs)
            heads.append(head)
            title = f"Round {round_}" if len(rounds) > 1 else "Runs"
            section += [
                f"### {title}",
                "",
                f"Full report: [{report.relative_to(args.out)}]({report.relative_to(args.out)})",
                "",
                "| cell | HP p99 ms | HP p99 / alone | BE per s | BE / alone | target met |",
                "|---|---|---|---|---|---|",
            ]
            for row in head.to_dict("records"):
                section.append(
                    f"| {row['run']} | {_fmt(row['hp_p99_ms'], '.2f')} | "
                    f"{_fmt(row['hp_p99_slowdown'], '.3f')} | "
                    f"{_fmt(row['be_throughput_per_s'], '.2f')} | "
                    f"{_fmt(row['be_throughput_fraction'], '.3f')} | {row['target_met']} |"
                )
            section.append("")
        if not heads:
            continue
        lines += [f"## {group}", ""]
        if len(heads) > 1:
            lines += [
                f"Medians over {len(heads)} rounds (lowest-highest):",
                "",
                "| cell | rounds | HP p99 / alone | BE / alone | rounds meeting the target |",
                "|---|---|---|---|---|",
            ]
            for row in summarize_rounds(heads).to_dict("records"):
                lines.append(
                    f"| {row['run']} | {row['rounds']} | {_fmt(row['slowdown_median'], '.3f')} "
                    f"({_fmt(row['slowdown_min'], '.3f')}-{_fmt(row['slowdown_max'], '.3f')}) | "
                    f"{_fmt(row['fraction_median'], '.3f')} ({_fmt(row['fraction_min'], '.3f')}-"
                    f"{_fmt(row['fraction_max'], '.3f')}) | {row['target_met']} |"
                )
            lines.append("")
        lines += section
    if environment is not None:
        lines += [
            "## Environment",
            "",
            f"GPU {environment.gpu_name} ({environment.sm_count} SMs), driver "
            f"{environment.driver_version}, CUDA {environment.cuda_version}, torch "
            f"{environment.torch_version}, cuDNN {environment.cudnn_version}.",
            "",
        ]
    lines += ["## Commands", ""] + [f"    {entry['command']}" for entry in index["invocations"]]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")


def _fmt(value: Any, spec: str) -> str:
    try:
        return "-" if value is None or value != value else format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])

    def names(allowed: dict | tuple) -> Any:
        def parse(text: str) -> list[str]:
            chosen = [item.strip() for item in text.split(",") if item.strip()]
            unknown = [item for item in chosen if item not in allowed]
            if unknown:
                raise argparse.ArgumentTypeError(
                    f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}"
                )
            return chosen

        return parse

    def queue_limits(text: str) -> list[float | None]:
        limits: list[float | None] = []
        for item in (part.strip() for part in text.split(",") if part.strip()):
            if item == "default":
                limits.append(None)
                continue
            try:
                value = float(item)
            except ValueError:
                value = float("nan")
            if not value > 0:
                raise argparse.ArgumentTypeError(
                    f"queue limit {item!r} is not 'default' or a positive number of microseconds"
                )
            limits.append(value)
        if not limits:
            raise argparse.ArgumentTypeError("no queue limit given")
        return list(dict.fromkeys(limits))

    parser.add_argument("--hp", type=names(HP_JOBS), default=list(HP_JOBS))
    parser.add_argument("--rates", type=names(RATES), default=list(RATES))
    parser.add_argument("--be", type=names(BE_JOBS), default=list(BE_JOBS))
    parser.add_argument("--policies", type=names(POLICY_NAMES), default=list(POLICY_NAMES))
    parser.add_argument(
        "--queue-limits",
        type=queue_limits,
        default=[None],
        help="BE queue bounds in microseconds for reef and orion, 'default' = derived",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of every cell (each with its dedicated run)"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured per run")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds for new cells")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if args.out is None:
        gpu = gpu_facts(0)
        if gpu is None:
            parser.error("no GPU visible: pass --out to report on existing results")
        args.out = ROOT / "benchmarks" / "results" / gpu_slug(gpu.name)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    args.out = args.out.absolute()
    return args


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    index = load_index(args.out)
    finished = True
    if not args.report_only:
        index["invocations"].append(
            {
                "command": " ".join(["python", *sys.argv]),
                "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "software": software_summary(),
            }
        )
        write_json_atomic(args.out / "matrix.json", index)
        finished = run_cells(args, index)
        write_json_atomic(args.out / "matrix.json", index)
    write_reports(args, index)
    if not finished:
        print("time budget reached: run the same command again to continue", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
