"""`orion quota`: a client's memory limit changed in a live run, recorded, and refused clearly."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.runclock import monotonic_ns
from scheduler_core import SchedulerRun, SchedulerSettings

runner = CliRunner()
GIB = 1 << 30


def live(tmp_path: Path, settings: SchedulerSettings, **be_shares):
    """A published run with clients "hp" and "be" (limit 10,000 bytes) and the run directory
    that `orion colocate` writes for it while it runs."""
    with SchedulerRun(settings) as run:
        run.add_client("hp", "hp")
        run.add_client("be", "be", memory_limit=10_000, **be_shares)
        run.publish()
        run_dir = tmp_path / "orion-20261123-120000"
        run_dir.mkdir()
        record = {
            "status": "running",
            "policy": "orion",
            "clients": [{"name": "hp", "role": "hp"}, {"name": "be", "role": "be"}],
            "scheduler": {
                "shm": run.name,
                "controller_pid": os.getpid(),
                "clock_origin_ns": monotonic_ns() - 5 * 10**9,
            },
        }
        (run_dir / "run.json").write_text(json.dumps(record))
        yield run, run_dir


@pytest.fixture
def live_run(tmp_path: Path):
    yield from live(tmp_path, SchedulerSettings("orion", 132, 1_000_000, 1_000_000))


@pytest.fixture
def live_shares_run(tmp_path: Path):
    settings = SchedulerSettings("orion", 132, 1_000_000, 1_000_000, quotas=True)
    yield from live(tmp_path, settings, min_util=0.2, max_util=0.8)


def quota(*args: str):
    return runner.invoke(app, ["quota", *args], env={"COLUMNS": "200"})


def edit_record(run_dir: Path, **changes) -> None:
    record = json.loads((run_dir / "run.json").read_text())
    record.update(changes)
    (run_dir / "run.json").write_text(json.dumps(record))


def test_a_memory_limit_changes_in_the_live_run_and_is_recorded(live_run):
    run, run_dir = live_run
    result = quota(str(run_dir), "be", "--memory-limit", "4GiB")
    assert result.exit_code == 0, result.output
    assert "be: memory limit 9.77 KiB -> 4 GiB" in result.output
    assert run.stats()["be"]["memory_limit"] == 4 * GIB
    result = quota(str(run_dir), "be", "--memory-limit", "none")
    assert result.exit_code == 0, result.output
    assert run.stats()["be"]["memory_limit"] == 0
    with (run_dir / "limits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["client"], r["field"], r["old"], r["new"]) for r in rows] == [
        ("be", "memory_limit", "10000", str(4 * GIB)),
        ("be", "memory_limit", str(4 * GIB), ""),
    ]
    assert 5.0 <= float(rows[0]["time_s"]) < 60  # on the run clock
    assert run.stats()["hp"]["memory_limit"] == 0  # the other client is untouched


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
    ],
)
def test_changes_that_cannot_apply_are_refused(live_run, args, record, message):
    run, run_dir = live_run
    edit_record(run_dir, **record)
    result = quota(str(run_dir), *args)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert run.stats()["be"]["memory_limit"] == 10_000  # nothing changed
    assert not (run_dir / "limits.csv").exists()


@pytest.mark.parametrize("size", ["2XB", "-1", "0", "4gib"])
def test_a_bad_size_is_refused_before_anything_changes(live_run, size):
    run, run_dir = live_run
    result = quota(str(run_dir), "be", "--memory-limit", size)
    assert result.exit_code == 2
    assert "is not a size" in " ".join(result.output.split())
    assert run.stats()["be"]["memory_limit"] == 10_000


def test_not_a_run_directory(tmp_path: Path):
    result = quota(str(tmp_path), "be", "--memory-limit", "1GiB")
    assert result.exit_code == 1
    assert "not a run directory" in result.output


def test_shares_change_in_the_live_run_and_are_recorded(live_shares_run):
    run, run_dir = live_shares_run
    result = quota(str(run_dir), "be", "--max-util", "0.5", "--min-util", "0.1")
    assert result.exit_code == 0, result.output
    assert "be: min_util 0.2 -> 0.1" in result.output
    assert "be: max_util 0.8 -> 0.5" in result.output
    stats = run.stats()["be"]
    assert (stats["min_util"], stats["max_util"]) == (0.1, 0.5)
    with (run_dir / "limits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["field"], float(r["old"]), float(r["new"])) for r in rows] == [
        ("min_util", 0.2, 0.1),
        ("max_util", 0.8, 0.5),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-util", "0.9"], "min_util 0.9 would be above max_util 0.8"),
        (["--max-util", "0.1"], "min_util 0.2 would be above max_util 0.1"),
    ],
)
def test_shares_that_cannot_hold_are_refused(live_shares_run, args, message):
    run, run_dir = live_shares_run
    result = quota(str(run_dir), "be", *args)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert (run.stats()["be"]["min_util"], run.stats()["be"]["max_util"]) == (0.2, 0.8)


def test_promises_adding_up_above_the_gpu_are_refused(live_shares_run):
    run, run_dir = live_shares_run
    edit_record(run_dir, policy="quota")  # every client a peer: the HP client may get a share
    result = quota(str(run_dir), "hp", "--min-util", "0.9")
    assert result.exit_code == 1
    assert "min_util would add up to 1.1 over the clients; at most 1" in result.output
    assert run.stats()["hp"]["min_util"] == 0.0


def test_an_hp_client_gets_no_share_under_a_policy_that_never_holds_it(live_shares_run):
    _, run_dir = live_shares_run
    result = quota(str(run_dir), "hp", "--max-util", "0.5")
    assert result.exit_code == 1
    assert "never holds HP work back" in " ".join(result.output.split())


def test_shares_need_a_run_started_with_them(live_run):
    _, run_dir = live_run
    result = quota(str(run_dir), "be", "--max-util", "0.5")
    assert result.exit_code == 1
    assert "started without GPU-time shares" in " ".join(result.output.split())


def test_a_share_outside_zero_to_one_is_refused(live_shares_run):
    _, run_dir = live_shares_run
    result = quota(str(run_dir), "be", "--max-util", "1.5")
    assert result.exit_code == 2
    assert "--max-util: must be <= 1 (got 1.5)" in " ".join(result.output.split())


def test_nothing_to_change_is_refused(live_run):
    _, run_dir = live_run
    result = quota(str(run_dir), "be")
    assert result.exit_code == 2
    assert "give at least one of" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("record", "size"),
    [
        ({"environment": {"gpu_memory_mib": 8192}}, "900GiB"),  # a run on a GPU of 8 GiB
        ({"gpu": {"memory_bytes": 8 * GIB}}, "8193MiB"),  # a daemon's record says it so
    ],
)
def test_a_memory_limit_over_the_gpu_is_refused_and_changes_nothing(live_run, record, size):
    run, run_dir = live_run
    edit_record(run_dir, **record)
    result = quota(str(run_dir), "be", "--memory-limit", size)
    assert result.exit_code == 1, result.output
    assert "is larger than the GPU's 8 GiB" in " ".join(result.output.split())
    assert run.stats()["be"]["memory_limit"] == 10_000
    assert not (run_dir / "limits.csv").exists()
