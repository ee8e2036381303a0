"""`orion quota`: a client's memory limit changed in a live run, recorded, and refused clearly."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from colocation.runclock import monotonic_ns
from orion_cli.app import app
from scheduler_core import SchedulerRun, SchedulerSettings

runner = CliRunner()
GIB = 1 << 30


@pytest.fixture
def live_run(tmp_path: Path):
    """A published run with one client "be" (limit 10,000 bytes) and the run directory that
    `orion colocate` writes for it while it runs."""
    settings = SchedulerSettings("orion", 132, 1_000_000, 1_000_000)
    with SchedulerRun(settings) as run:
        run.add_client("hp", "hp")
        run.add_client("be", "be", memory_limit=10_000)
        run.publish()
        run_dir = tmp_path / "orion-20261123-120000"
        run_dir.mkdir()
        record = {
            "status": "running",
            "policy": "orion",
            "clients": [{"name": "hp"}, {"name": "be"}],
            "scheduler": {
                "shm": run.name,
                "controller_pid": os.getpid(),
                "clock_origin_ns": monotonic_ns() - 5 * 10**9,
            },
        }
        (run_dir / "run.json").write_text(json.dumps(record))
        yield run, run_dir


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
