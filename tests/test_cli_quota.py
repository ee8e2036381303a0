"""`orion quota` on a live run's directory: the change is a request to the daemon the run's
clients joined (a real daemon process here, CPU only), recorded in the run's limits.csv, and
refused clearly."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from daemon_harness import RunningDaemon
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from orion_common.runclock import monotonic_ns

runner = CliRunner()
GIB = 1 << 30
ORIGIN_AGO_NS = 5 * 10**9


def live(tmp_path: Path, monkeypatch, *, policy: str = "orion", shares: bool = False, **be):
    """A daemon with clients "hp" and "be" (limit 10,000 bytes, and the shares ``be``) and the
    run directory that `orion colocate` writes while its clients are that daemon's."""
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    daemon = RunningDaemon(tmp_path / "gpu0", policy=policy, shares=shares)
    try:
        daemon.join("hp", "hp")
        daemon.join("be", "be", memory_limit=10_000, **be)
        run_dir = tmp_path / "orion-20261123-120000"
        run_dir.mkdir()
        shm = json.loads((daemon.folder / "daemon.json").read_text())["scheduler"]["shm"]
        record = {
            "status": "running",
            "policy": policy,
            "clients": [{"name": "hp", "role": "hp"}, {"name": "be", "role": "be"}],
            "scheduler": {
                "shm": shm,
                "controller_pid": daemon.process.pid,
                "state_dir": str(daemon.folder),
                "clock_origin_ns": monotonic_ns() - ORIGIN_AGO_NS,
            },
        }
        (run_dir / "run.json").write_text(json.dumps(record))
        yield daemon, run_dir
    finally:
        daemon.close()


@pytest.fixture
def live_run(tmp_path: Path, monkeypatch):
    yield from live(tmp_path, monkeypatch)


@pytest.fixture
def live_shares_run(tmp_path: Path, monkeypatch):
    yield from live(tmp_path, monkeypatch, shares=True, min_util=0.2, max_util=0.8)


@pytest.fixture
def live_quota_run(tmp_path: Path, monkeypatch):
    yield from live(tmp_path, monkeypatch, policy="quota", shares=True, min_util=0.2, max_util=0.8)


def client(daemon: RunningDaemon, name: str) -> dict:
    """The daemon's view of client ``name`` (its limits as it enforces them)."""
    return next(c for c in daemon.status()["clients"] if c["name"] == name)


def shares(daemon: RunningDaemon, name: str) -> tuple[float, float]:
    entry = client(daemon, name)
    return entry["min_util"], entry["max_util"]


def quota(*args: str):
    return runner.invoke(app, ["quota", *args], env={"COLUMNS": "200"})


def edit_record(run_dir: Path, **changes) -> None:
    record = json.loads((run_dir / "run.json").read_text())
    record.update(changes)
    (run_dir / "run.json").write_text(json.dumps(record))


def test_a_memory_limit_changes_in_the_live_run_and_is_recorded(live_run):
    daemon, run_dir = live_run
    result = quota(str(run_dir), "be", "--memory-limit", "4GiB")
    assert result.exit_code == 0, result.output
    assert "be: memory limit 9.77 KiB -> 4 GiB" in result.output
    assert client(daemon, "be")["memory_limit_bytes"] == 4 * GIB  # the daemon holds it
    result = quota(str(run_dir), "be", "--memory-limit", "none")
    assert result.exit_code == 0, result.output
    assert client(daemon, "be")["memory_limit_bytes"] is None
    with (run_dir / "limits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["client"], r["field"], r["old"], r["new"]) for r in rows] == [
        ("be", "memory_limit", "10000", str(4 * GIB)),
        ("be", "memory_limit", str(4 * GIB), ""),
    ]
    assert float(rows[0]["time_s"]) >= ORIGIN_AGO_NS / 1e9  # on the run clock (begun 5 s ago)
    assert float(rows[0]["time_s"]) <= float(rows[1]["time_s"])
    assert client(daemon, "hp")["memory_limit_bytes"] is None  # the other client is untouched


def test_a_share_changed_in_a_run_is_what_its_daemon_admits_against(live_shares_run):
    daemon, run_dir = live_shares_run
    result = quota(str(run_dir), "be", "--min-util", "0.9", "--max-util", "1")
    assert result.exit_code == 0, result.output
    with pytest.raises(OrionError, match="is left unpromised on this GPU"):
        daemon.join("be", "newcomer", min_util=0.5)
    result = quota(str(run_dir), "be", "--min-util", "0.2")
    assert result.exit_code == 0, result.output
    daemon.join("be", "newcomer", min_util=0.5)


@pytest.mark.parametrize(
    ("args", "record", "message"),
    [
        (
            ["ghost", "--memory-limit", "1GiB"],
            {},
            "no client 'ghost' in this run (clients: hp, be)",
        ),
        (["be", "--memory-limit", "1GiB"], {"status": "complete"}, "the run is not live"),
        (["be", "--memory-limit", "1GiB"], {"scheduler": None}, "has no scheduler state"),
        (
            ["be", "--memory-limit", "1GiB"],
            {"scheduler": {"shm": "/x", "controller_pid": 2**22 + 7}},
            "the run's controller is gone",
        ),
        (  # a live process, but not the daemon that holds the state folder
            ["be", "--memory-limit", "1GiB"],
            {"scheduler": {"controller_pid": "{test}", "state_dir": "{folder}"}},
            "the run's controller is gone",
        ),
        (
            ["be", "--memory-limit", "1GiB"],
            {"scheduler": {"shm": "/x", "controller_pid": "{pid}"}},
            "does not say which orion daemon the run's clients joined",
        ),
    ],
)
def test_changes_that_cannot_apply_are_refused(live_run, args, record, message):
    daemon, run_dir = live_run
    scheduler = record.get("scheduler")
    if scheduler:
        places = {
            "{folder}": str(daemon.folder),
            "{pid}": daemon.process.pid,
            "{test}": os.getpid(),
        }
        record = {"scheduler": {k: places.get(v, v) for k, v in scheduler.items()}}
    edit_record(run_dir, **record)
    result = quota(str(run_dir), *args)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert client(daemon, "be")["memory_limit_bytes"] == 10_000  # nothing changed
    assert not (run_dir / "limits.csv").exists()


@pytest.mark.parametrize("size", ["2XB", "-1", "0", "4gib"])
def test_a_bad_size_is_refused_before_anything_changes(live_run, size):
    daemon, run_dir = live_run
    result = quota(str(run_dir), "be", "--memory-limit", size)
    assert result.exit_code == 2
    assert "is not a size" in " ".join(result.output.split())
    assert client(daemon, "be")["memory_limit_bytes"] == 10_000


def test_not_a_run_directory(tmp_path: Path):
    result = quota(str(tmp_path), "be", "--memory-limit", "1GiB")
    assert result.exit_code == 1
    assert "not a run directory" in result.output


def test_shares_change_in_the_live_run_and_are_recorded(live_shares_run):
    daemon, run_dir = live_shares_run
    result = quota(str(run_dir), "be", "--max-util", "0.5", "--min-util", "0.1")
    assert result.exit_code == 0, result.output
    assert "be: min_util 0.2 -> 0.1" in result.output
    assert "be: max_util 0.8 -> 0.5" in result.output
    assert "at run time" in result.output
    assert shares(daemon, "be") == (0.1, 0.5)
    with (run_dir / "limits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["field"], float(r["old"]), float(r["new"])) for r in rows] == [
        ("min_util", 0.2, 0.1),
        ("max_util", 0.8, 0.5),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-util", "0.9"], "min_util 0.9 is above max_util 0.8"),
        (["--max-util", "0.1"], "min_util 0.2 is above max_util 0.1"),
    ],
)
def test_shares_that_cannot_hold_are_refused(live_shares_run, args, message):
    daemon, run_dir = live_shares_run
    result = quota(str(run_dir), "be", *args)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert shares(daemon, "be") == (0.2, 0.8)
    assert not (run_dir / "limits.csv").exists()


def test_promises_adding_up_above_the_gpu_are_refused(live_quota_run):
    daemon, run_dir = live_quota_run  # every client a peer: the HP client may get a share
    result = quota(str(run_dir), "hp", "--min-util", "0.9")
    assert result.exit_code == 1
    assert "min_util adds up to 1.1 over the clients; at most 1" in result.output
    assert shares(daemon, "hp")[0] == 0.0


def test_an_hp_client_gets_no_share_under_a_policy_that_never_holds_it(live_shares_run):
    daemon, run_dir = live_shares_run
    result = quota(str(run_dir), "hp", "--max-util", "0.5")
    assert result.exit_code == 1
    assert "never holds HP work back" in " ".join(result.output.split())
    assert shares(daemon, "hp") == (0.0, 1.0)


def test_shares_need_a_run_started_with_them(live_run):
    daemon, run_dir = live_run
    result = quota(str(run_dir), "be", "--max-util", "0.5")
    assert result.exit_code == 1
    assert "started without GPU-time shares" in " ".join(result.output.split())
    assert shares(daemon, "be") == (0.0, 1.0)


def test_a_share_outside_zero_to_one_is_refused(live_shares_run):
    _, run_dir = live_shares_run
    result = quota(str(run_dir), "be", "--max-util", "1.5")
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--max-util: max_util must be between 0 and 1 (got 1.5)" in said


def test_nothing_to_change_is_refused(live_run):
    _, run_dir = live_run
    result = quota(str(run_dir), "be")
    assert result.exit_code == 2
    assert "give at least one of" in " ".join(result.output.split())


@pytest.mark.parametrize("size", ["900GiB", "8193MiB"])  # the daemon's GPU has 8 GiB
def test_a_memory_limit_over_the_gpu_is_refused_and_changes_nothing(live_run, size):
    daemon, run_dir = live_run
    result = quota(str(run_dir), "be", "--memory-limit", size)
    assert result.exit_code == 1, result.output
    assert "is larger than the GPU's 8 GiB" in " ".join(result.output.split())
    assert "give a limit in the GPU's memory" in " ".join(result.output.split())
    assert client(daemon, "be")["memory_limit_bytes"] == 10_000
    assert not (run_dir / "limits.csv").exists()
