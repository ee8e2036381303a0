"""Programs that are not orion workloads, shared through the daemon: each alone, then together.

Runs the example programs of ``examples/programs/`` (an inference service replayed as a CUDA
graph, a PyTorch trainer, a CuPy job) alone and then as clients of an `orion up` daemon
(`orion run --hp` / `--be`), in interleaved rounds, sampling `orion status --json` while they
share the GPU. Writes each run's own output, the status samples and ``summary.json`` (HP p99
and BE throughput of each shared round against the same round's alone runs) under ``--out``.

    python benchmarks/any_program.py --out results/any-program --rounds 2 --duration 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"


STATUS_EVERY_S = 5.0
"""Seconds between status samples while the programs share the GPU."""


def status_sample(state: Path) -> dict | None:
    """What `orion status --json` shows, asked of the daemon from this process (None when it
    does not answer). Not by starting `orion status`: a process started every few seconds beside
    the service slowed its requests for about 100 ms each time
    (``benchmarks/results/nvidia-h200/hp-stalls/``)."""
    from orion_common.errors import OrionError
    from orion_daemon import client as daemon_client
    from orion_daemon import state as daemon_state

    try:
        record = daemon_state.require_daemon(0, daemon_state.state_dir(0, state))
        return daemon_client.status(record, timeout_s=30)
    except OrionError:
        return None


def python(script: str, *arguments: str) -> list[str]:
    return [sys.executable, str(PROGRAMS / script), *arguments]


def orion(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "orion_cli.app", *arguments]


def programs(folder: Path, duration: float, rate: float) -> dict[str, list[str]]:
    d = str(duration)
    return {
        "hp": python("serve_resnet.py", "--rate", str(rate), "--duration", d,
                     "--out", str(folder / "hp.csv")),
        "be": python("train_resnet.py", "--duration", str(duration + 10),
                     "--out", str(folder / "be.csv")),
        "cupy": python("cupy_stencil.py", "--duration", str(duration + 10),
                       "--out", str(folder / "cupy.csv")),
    }  # fmt: skip


def run_alone(folder: Path, name: str, command: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.log").open("w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=300)


def run_shared(folder: Path, commands: dict[str, list[str]], args: argparse.Namespace) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "state"
    up = orion("up", "--policy", args.policy, "--sharing", args.sharing, "--state-dir", str(state))
    if args.queue_limit_us is not None:
        up += ["--queue-limit-us", str(args.queue_limit_us)]
    subprocess.run(up, check=True, timeout=120)
    processes = {}
    try:
        # BE first, as a trainer that is already running when the service starts.
        clients = (
            ("be", "--be", args.be_profile),
            *((("cupy", "--be", None),) if args.cupy else ()),
            ("hp", "--hp", args.hp_profile),
        )
        for name, role, profile in clients:
            extra = ["--profile", profile] if profile else []
            command = orion("run", role, "--name", name, "--state-dir", str(state), *extra,
                            "--", *commands[name])  # fmt: skip
            log = (folder / f"{name}.log").open("w")
            processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            time.sleep(2.0 if name != "hp" else 0.0)
        samples = []
        while processes["hp"].poll() is None:
            time.sleep(STATUS_EVERY_S)
            sample = status_sample(state)
            if sample is not None:
                samples.append(sample)
        (folder / "status_samples.json").write_text(json.dumps(samples, indent=1))
        for name, process in processes.items():
            code = process.wait(timeout=120)
            if code != 0:
                raise RuntimeError(f"{name} exited with {code}: see {folder / f'{name}.log'}")
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        subprocess.run(orion("down", "--state-dir", str(state)), check=False, timeout=60)


def hp_p99(folder: Path) -> float:
    return float(np.percentile(pd.read_csv(folder / "hp.csv")["latency_ms"], 99))


def be_rate(folder: Path, name: str) -> float:
    """Work per second over the program's whole measured run (its progress records)."""
    progress = pd.read_csv(folder / f"{name}.csv")
    first, last = progress.iloc[0], progress.iloc[-1]
    return float((last["samples"] - first["samples"]) / (last["unix_s"] - first["unix_s"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=80.0)
    parser.add_argument("--policy", default="orion")
    parser.add_argument("--sharing", default="mps")
    parser.add_argument("--hp-profile")
    parser.add_argument("--be-profile")
    parser.add_argument("--queue-limit-us", type=float, help="fixed on the daemon (orion up)")
    parser.add_argument(
        "--no-cupy", dest="cupy", action="store_false", help="the trainer as the only BE client"
    )
    parser.add_argument(
        "--summarise-only", action="store_true", help="summary.json from the rounds in --out"
    )
    args = parser.parse_args()
    if args.summarise_only:
        rows = [dict(row) for row in json.loads((args.out / "summary.json").read_text())["rounds"]]
        summarise(args, rows)
        return
    rows = []
    for round_ in range(args.rounds):
        base = args.out / f"round{round_}"
        for name in ("hp", "be", "cupy") if args.cupy else ("hp", "be"):
            folder = base / f"alone-{name}"
            run_alone(folder, name, programs(folder, args.duration, args.rate)[name])
        shared = base / "shared"
        run_shared(shared, programs(shared, args.duration, args.rate), args)
        rows.append({
            "round": round_,
            "hp_p99_alone_ms": hp_p99(base / "alone-hp"),
            "hp_p99_shared_ms": hp_p99(shared),
            "be_alone_samples_per_s": be_rate(base / "alone-be", "be"),
            "be_shared_samples_per_s": be_rate(shared, "be"),
        })  # fmt: skip
        if args.cupy:
            rows[-1]["cupy_alone_rounds_per_s"] = be_rate(base / "alone-cupy", "cupy")
            rows[-1]["cupy_shared_rounds_per_s"] = be_rate(shared, "cupy")
        print(json.dumps(rows[-1]), flush=True)
    summarise(args, rows)


def summarise(args: argparse.Namespace, rows: list[dict]) -> None:
    """summary.json: per round and over rounds, HP p99 with its interval and each ratio."""
    from reporting.stats import bootstrap_percentile_ci, percentile_statistic, ratio_over_rounds_ci

    pairs = []
    for row in rows:
        base = args.out / f"round{row['round']}"
        shared = pd.read_csv(base / "shared" / "hp.csv")["latency_ms"].to_numpy()
        alone = pd.read_csv(base / "alone-hp" / "hp.csv")["latency_ms"].to_numpy()
        pairs.append((shared, alone))
        row["hp_requests"] = len(shared)
        row["hp_p99_shared_ms_ci"] = list(bootstrap_percentile_ci(shared)[1:])
        row["hp_p99_alone_ms_ci"] = list(bootstrap_percentile_ci(alone)[1:])
        row["hp_p99_ratio"] = row["hp_p99_shared_ms"] / row["hp_p99_alone_ms"]
        row["be_ratio"] = row["be_shared_samples_per_s"] / row["be_alone_samples_per_s"]
        if "cupy_shared_rounds_per_s" in row:
            row["cupy_ratio"] = row["cupy_shared_rounds_per_s"] / row["cupy_alone_rounds_per_s"]
    ratio, low, high = ratio_over_rounds_ci(pairs, percentile_statistic(99.0))
    summary = {
        "command": " ".join(sys.argv),
        "policy": args.policy,
        "sharing": args.sharing,
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "hp_p99_ratio": ratio,
        "hp_p99_ratio_ci": [low, high],
        "be_ratios": [row["be_ratio"] for row in rows],
        "cupy_ratios": [row["cupy_ratio"] for row in rows if "cupy_ratio" in row],
        "rounds": rows,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    os.sync()


if __name__ == "__main__":
    main()
