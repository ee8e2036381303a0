"""What a process started beside a running HP service does to it: slow requests per action.

    python benchmarks/side_effects.py --out DIR [--gap-s 5] [--repeats 2]
        [--orion] [--be "python3 train_resnet.py"]
        --action NAME="COMMAND" [--action ...] -- SERVICE.py [ARGS...]

Runs the service (a program of ``examples/programs/``: it takes ``--duration`` and ``--out``
and writes ``OUT.ready`` once warm), optionally beside a BE program and under ``orion up`` on
GPU 0 (``--orion``: both joined with ``orion run``), and once the service is warm runs each
action in turn, ``--gap-s`` apart, ``--repeats`` times, recording when each started and ended.
Then counts, per action, the service's requests that started from just before the action to
0.3 s after it and how many of them were slow (service time over 3x the median of the quiet
stretches), against the quiet stretches between actions. Writes ``requests.csv`` (the
service's record), ``actions.csv``, ``summary.json`` and ``summary.md``.

Why: on an H200 the start of an `orion status` process beside an eager service slowed its
requests 3-5x for about 100 ms (``benchmarks/results/nvidia-h200/hp-stalls/``), and an import of
numpy is the suspect (OpenBLAS starts a spinning thread per core). Actions such as
``numpy="python3 -c 'import numpy'"`` and ``numpy1="env OPENBLAS_NUM_THREADS=1 python3 -c
'import numpy'"`` tell which.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

AFTER_S = 0.3
"""How long after an action ends its effect is still counted (a burst outlives its cause)."""
BEFORE_S = 0.05
SLOW_FACTOR = 3.0
READY_TIMEOUT_S = 300.0


# --------------------------------------------------------------------------------------------
# Analysis (pure: tested on CPU)


def affected(requests: pd.DataFrame, actions: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Per action run: the requests that started in its span (from ``BEFORE_S`` before it to
    ``AFTER_S`` after it), how many were slow and the longest service (ms); and one row for the
    quiet stretches (every request outside all spans). Slow: service over ``SLOW_FACTOR`` x the
    quiet stretches' median, which is returned too (ms)."""
    service = (requests["end_unix_s"] - requests["start_unix_s"]) * 1e3
    started = requests["start_unix_s"]
    inside_any = pd.Series(False, index=requests.index)
    spans = []
    for action in actions.itertuples():
        inside = (started >= action.start_unix_s - BEFORE_S) & (
            started <= action.end_unix_s + AFTER_S
        )
        inside_any |= inside
        spans.append((action, inside))
    quiet = service[~inside_any]
    median = float(quiet.median()) if len(quiet) else float("nan")
    limit = SLOW_FACTOR * median if len(quiet) else float("inf")
    rows = [
        {
            "action": action.action,
            "seconds": action.end_unix_s - action.start_unix_s,
            "requests": int(inside.sum()),
            "slow": int((service[inside] > limit).sum()),
            "longest_ms": float(service[inside].max()) if inside.any() else 0.0,
        }
        for action, inside in spans
    ]
    rows.append(
        {
            "action": "(quiet stretches)",
            "seconds": float("nan"),
            "requests": len(quiet),
            "slow": int((quiet > limit).sum()),
            "longest_ms": float(quiet.max()) if len(quiet) else 0.0,
        }
    )
    return pd.DataFrame(rows), median


def summary_markdown(table: pd.DataFrame, context: dict[str, Any]) -> str:
    lines = [
        "# Slow requests of a service while processes start beside it",
        "",
        f"Service: `{context['service']}`; beside it: `{context.get('be') or 'nothing'}`; "
        f"under orion: {'yes' if context['orion'] else 'no'}. Slow: service over "
        f"{SLOW_FACTOR:g}x the quiet stretches' median ({context['quiet_median_ms']:.2f} ms).",
        "",
        "| action | seconds | requests in its span | slow | longest service (ms) |",
        "|---|---|---|---|---|",
    ]
    for row in table.itertuples():
        seconds = "-" if pd.isna(row.seconds) else f"{row.seconds:.2f}"
        lines.append(
            f"| {row.action} | {seconds} | {row.requests} | {row.slow} | {row.longest_ms:.2f} |"
        )
    lines += ["", f"Actions: {context['actions']}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Running (GPU)


def orion(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "orion_cli.app", *arguments]


def start(command: list[str], log: Path, joined: list[str] | None) -> subprocess.Popen:
    with log.open("w") as handle:
        return subprocess.Popen(
            [*(joined or []), *command], stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def wait_ready(out: Path, process: subprocess.Popen) -> None:
    mark = Path(f"{out}.ready")
    deadline = time.time() + READY_TIMEOUT_S
    while not (mark.is_file() and mark.read_text().strip()):
        if process.poll() is not None:
            raise SystemExit(f"side_effects: {out.name} ended before it was ready")
        if time.time() > deadline:
            raise SystemExit(f"side_effects: {out.name} not ready in {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


def run(args: argparse.Namespace) -> None:
    out: Path = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    state = out / "state"
    plan = [(name, command) for _ in range(args.repeats) for name, command in args.actions]
    duration = 30 + (len(plan) + 1) * args.gap_s * 2
    joined = None
    if args.orion:
        subprocess.run(orion("up", "--gpu", "0", "--state-dir", str(state)), check=True)
        joined = orion("run", "--gpu", "0", "--state-dir", str(state))
    processes = []
    try:
        if args.be:
            be_command = [*shlex.split(args.be), "--duration", str(duration), "--out",
                          str(out / "be.csv")]  # fmt: skip
            role = [*joined, "--be", "--name", "be", "--"] if joined else None
            processes.append(start(be_command, out / "be.log", role))
            wait_ready(out / "be.csv", processes[-1])
        hp_command = [*args.service, "--duration", str(duration), "--out", str(out / "hp.csv")]
        role = [*joined, "--hp", "--name", "hp", "--"] if joined else None
        processes.append(start(hp_command, out / "hp.log", role))
        wait_ready(out / "hp.csv", processes[-1])
        rows = []
        for name, command in plan:
            time.sleep(args.gap_s)
            began = time.time()
            done = subprocess.run(command, shell=True, capture_output=True, check=False)
            rows.append({"action": name, "start_unix_s": began, "end_unix_s": time.time(),
                         "returncode": done.returncode})  # fmt: skip
        time.sleep(args.gap_s)
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            process.wait(timeout=120)
        if args.orion:
            subprocess.run(orion("down", "--gpu", "0", "--state-dir", str(state)), check=False)
    actions = pd.DataFrame(rows)
    actions.to_csv(out / "actions.csv", index=False)
    requests = pd.read_csv(out / "hp.csv")
    table, quiet_median_ms = affected(requests, actions)
    context = {
        "service": " ".join(args.service),
        "be": args.be,
        "orion": args.orion,
        "actions": "; ".join(f"{name} = `{command}`" for name, command in args.actions),
        "quiet_median_ms": quiet_median_ms,
    }
    (out / "summary.json").write_text(
        json.dumps({"context": context, "actions": table.to_dict("records")}, indent=2) + "\n"
    )
    page = summary_markdown(table, context)
    (out / "summary.md").write_text(page)
    print(page)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gap-s", type=float, default=5.0, help="quiet seconds between actions")
    parser.add_argument("--repeats", type=int, default=2, help="times each action runs")
    parser.add_argument("--orion", action="store_true", help="under orion up on GPU 0")
    parser.add_argument("--be", help="a BE program to run beside the service (its command)")
    parser.add_argument("--action", action="append", default=[], metavar='NAME="COMMAND"',
                        help="a command to start beside the service (repeatable)")  # fmt: skip
    parser.add_argument("service", nargs=argparse.REMAINDER, help="-- SERVICE.py [ARGS...]")
    args = parser.parse_args(argv)
    args.service = args.service[1:] if args.service[:1] == ["--"] else args.service
    problems = []
    if not args.service:
        problems.append("the service to run is missing (after --)")
    if not args.action:
        problems.append("--action: at least one")
    args.actions = []
    for given in args.action:
        name, _, command = given.partition("=")
        if not name or not command:
            problems.append(f"--action: NAME=COMMAND, not {given!r}")
        args.actions.append((name, command))
    if not (args.gap_s > 0 and args.repeats >= 1):
        problems.append("--gap-s: more than 0; --repeats: at least 1")
    if problems:
        parser.error("; ".join(problems))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
