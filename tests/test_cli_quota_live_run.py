"""`orion quota` against a live `orion colocate` run, end to end on CPU: the run is a real
`orion colocate` process on a stand-in GPU (``ORION_STAND_IN_GPUS``, the stand-in driver of
tests/native on its library path) whose CPU clients joined the daemon the run started for
itself; `orion quota RUN_DIR CLIENT` finds that daemon through the run's run.json, and what it
changed is what the daemon then admits against. The test moves on events (the run's files, the
daemon's answers, the process ending), never on how long anything takes."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from native_harness import Harness, wait_for
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.stand_in_gpus import VARIABLE as STAND_IN_GPUS

BERT = {"workload": "bert", "batch_size": 1, "options": {"seq_len": 8}}
RUN_START_TIMEOUT_S = 300
"""Until both clients have joined: they import torch and build BERT on a shared CPU."""
RUN_STOP_TIMEOUT_S = 120
runner = CliRunner()


@dataclass
class LiveColocate:
    """A running `orion colocate` process and the run directory it printed."""

    process: subprocess.Popen[bytes]
    run_dir: Path
    output: Path  # what it printed (stdout and stderr)


def jobs_file(tmp_path: Path) -> Path:
    """A quota run (every client a peer) whose BE client is promised 20% and capped at 80%.
    Its window is far longer than the test: the test ends it with SIGTERM, so it never races
    the run's clock."""
    data = {
        "run": {
            "policy": "quota",
            "sharing": "timeslice",
            "duration_s": 3600,
            "warmup_steps": 1,
            "output_dir": str(tmp_path / "runs"),
        },
        "clients": [
            {**BERT, "name": "hp", "role": "hp", "mode": "infer",
             "arrivals": {"kind": "uniform", "rate_per_s": 4}},
            {**BERT, "name": "be", "mode": "train", "min_util": 0.2, "max_util": 0.8},
        ],
    }  # fmt: skip
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(data))
    return path


def daemon_clients() -> dict[str, dict[str, Any]]:
    """The clients of GPU 0's daemon, as `orion status --json` shows them (the test's own state
    folder: tests/conftest.py); none while no daemon answers."""
    result = runner.invoke(app, ["status", "--json"])
    if result.exit_code != 0:
        return {}
    return {entry["name"]: entry for entry in json.loads(result.output)["clients"]}


def shares(name: str) -> tuple[float, float]:
    entry = daemon_clients()[name]
    return entry["min_util"], entry["max_util"]


def live_record(output_dir: Path) -> Path | None:
    """The run directory once its run.json says it is running and which daemon holds it."""
    for path in output_dir.glob("*/run.json"):
        try:
            data = json.loads(path.read_text())
        except ValueError:  # being replaced: read it again next time
            continue
        if data.get("status") == "running" and (data.get("scheduler") or {}).get("state_dir"):
            return path.parent
    return None


@pytest.fixture
def live_colocate(
    tmp_path: Path, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveColocate]:
    """`orion colocate` as a user starts it, left running until both clients joined its
    daemon; stopped (SIGKILL) whatever the test did, so that no run outlives it."""
    monkeypatch.setenv(STAND_IN_GPUS, json.dumps([{"uuid": "GPU-0", "name": "stand-in"}]))
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    output_dir = tmp_path / "runs"
    output = tmp_path / "colocate.out"  # a file, not a pipe nobody reads while the run goes on
    with output.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orion_cli.app", "colocate", str(jobs_file(tmp_path))],
            env=harness.environment(None, None), stdout=sink, stderr=subprocess.STDOUT,
            cwd=harness.directory,  # outside the checkout: `-m` imports the installed orion
        )  # fmt: skip
    try:
        wait_for(
            lambda: process.poll() is not None or live_record(output_dir) is not None,
            timeout_s=RUN_START_TIMEOUT_S,
            what="the run to record its daemon in run.json",
        )
        assert process.poll() is None, output.read_text()
        wait_for(
            lambda: process.poll() is not None or set(daemon_clients()) == {"hp", "be"},
            timeout_s=RUN_START_TIMEOUT_S,
            what="both clients to join the run's daemon",
        )
        assert process.poll() is None, output.read_text()
        run_dir = live_record(output_dir)
        assert run_dir is not None
        yield LiveColocate(process, run_dir, output)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=RUN_STOP_TIMEOUT_S)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def quota(run_dir: Path, *args: str):
    return runner.invoke(app, ["quota", str(run_dir), *args], env={"COLUMNS": "200"})


def test_quota_changes_what_a_live_colocate_runs_daemon_admits(live_colocate: LiveColocate):
    run_dir = live_colocate.run_dir
    assert shares("be") == (0.2, 0.8) and shares("hp") == (0.0, 1.0)  # as the jobs file says

    result = quota(run_dir, "be", "--min-util", "0.9", "--max-util", "1")
    assert result.exit_code == 0, result.output
    assert "be: min_util 0.2 -> 0.9" in result.output
    assert "be: max_util 0.8 -> 1" in result.output
    assert shares("be") == (0.9, 1.0)  # the daemon enforces the new share

    # Admitted against the new share: HP's 0.2 would have fitted beside BE's 0.2, not its 0.9.
    result = quota(run_dir, "hp", "--min-util", "0.2")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    assert "min_util adds up to 1.1 over the clients; at most 1" in lines[0]
    assert shares("hp") == (0.0, 1.0)  # refused: nothing changed

    result = quota(run_dir, "be", "--min-util", "0.5")
    assert result.exit_code == 0, result.output
    result = quota(run_dir, "hp", "--min-util", "0.2")  # 0.7 in all now
    assert result.exit_code == 0, result.output
    assert shares("hp") == (0.2, 1.0) and shares("be") == (0.5, 1.0)
    assert live_colocate.process.poll() is None  # all of it while the run was live

    # SIGTERM (`kill`, as a batch system stops a job; SIGINT would do nothing where pytest and so
    # the run inherited it ignored) ends the run as Ctrl-C does. The run keeps its record of each
    # change, in order, on the run clock.
    live_colocate.process.send_signal(signal.SIGTERM)
    assert live_colocate.process.wait(timeout=RUN_STOP_TIMEOUT_S) == 130, (
        live_colocate.output.read_text()
    )
    assert f"run directory: {run_dir}" in live_colocate.output.read_text()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert all(gone(c["pid"]) for c in meta["clients"])
    with (run_dir / "limits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["client"], r["field"], float(r["old"]), float(r["new"])) for r in rows] == [
        ("be", "min_util", 0.2, 0.9),
        ("be", "max_util", 0.8, 1.0),
        ("be", "min_util", 0.9, 0.5),
        ("hp", "min_util", 0.0, 0.2),
    ]
    times = [float(r["time_s"]) for r in rows]
    assert times == sorted(times) and times[0] > 0
    # ... and the daemon's last statistics of the run: the shares it held its clients to.
    stats = json.loads((run_dir / "scheduler.json").read_text())
    assert stats["settings"]["policy"] == "quota"
    held = {name: (c["min_util"], c["max_util"]) for name, c in stats["clients"].items()}
    assert held == {"hp": (0.2, 1.0), "be": (0.5, 1.0)}
    assert not list(Path("/dev/shm").glob(f"orion-{live_colocate.process.pid}-*"))
