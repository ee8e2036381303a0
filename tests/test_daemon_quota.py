"""`orion quota` on a daemon's clients goes through the daemon (CPU only, real processes).

What users rely on: a share changed with `orion quota` is what the daemon admits the next client
against (raising one client's promise leaves less for a newcomer, lowering it leaves more); a
change that would promise more than the whole GPU is refused in one line; every change is in the
state folder's limits.csv.
"""

from __future__ import annotations

import csv

import pytest
from daemon_harness import RunningDaemon
from native_harness import wait_for
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    running = RunningDaemon(tmp_path / "gpu0", shares=True)
    yield running
    running.close()


def quota(daemon: RunningDaemon, *arguments: str):
    return CliRunner().invoke(app, ["quota", str(daemon.folder), *arguments])


def test_a_share_raised_with_quota_is_what_admission_counts(daemon):
    daemon.join("be", "first", min_util=0.1)
    raised = quota(daemon, "first", "--min-util", "0.9")
    assert raised.exit_code == 0, raised.output
    assert "first: min_util 0.1 -> 0.9" in raised.output
    with pytest.raises(OrionError, match="is left unpromised on this GPU"):
        daemon.join("be", "second", min_util=0.5)
    lowered = quota(daemon, "first", "--min-util", "0.2")
    assert lowered.exit_code == 0, lowered.output
    daemon.join("be", "second", min_util=0.5)
    assert [c["min_util"] for c in daemon.status()["clients"]] == [0.2, 0.5]
    wait_for(lambda: daemon.status()["records_pending"] == 0, what="the daemon's records")
    with (daemon.folder / "limits.csv").open() as handle:
        rows = [(r["client"], r["field"], r["old"], r["new"]) for r in csv.DictReader(handle)]
    assert rows == [("first", "min_util", "0.1", "0.9"), ("first", "min_util", "0.9", "0.2")]


def test_a_share_over_what_the_others_leave_is_refused_in_one_line(daemon):
    daemon.join("be", "first", min_util=0.5)
    daemon.join("be", "second", min_util=0.4)
    result = quota(daemon, "first", "--min-util", "0.7")
    assert result.exit_code == 1
    assert "min_util adds up to 1.1 over the clients; at most 1" in result.output
    assert [c["min_util"] for c in daemon.status()["clients"]] == [0.5, 0.4]  # nothing changed


def test_a_memory_limit_changed_through_the_daemon_holds(daemon):
    daemon.join("be", "trainer", memory_limit=1 << 30)
    result = quota(daemon, "trainer", "--memory-limit", "2GiB")
    assert result.exit_code == 0, result.output
    assert "trainer: memory limit 1 GiB -> 2 GiB (in use 0 B)" in result.output
    (trainer,) = daemon.status()["clients"]
    assert trainer["memory_limit_bytes"] == 2 << 30
    over = quota(daemon, "trainer", "--memory-limit", "9GiB")  # the daemon's GPU has 8 GiB
    assert over.exit_code == 1 and "larger than the GPU's" in over.output


def test_quota_on_a_folder_whose_daemon_is_gone_is_refused(daemon):
    daemon.join("be", "trainer")
    daemon.process.kill()
    daemon.process.wait(timeout=30)
    result = quota(daemon, "trainer", "--max-util", "0.5")
    assert result.exit_code == 1
    assert "no orion daemon runs there" in result.output


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (2**63, "memory_limit"),  # past the largest size any join takes
        (0, "at least 1 byte"),
        (True, "memory_limit"),
        ("8 parsecs", "memory_limit"),
    ],
)
def test_a_memory_limit_sent_on_the_socket_meets_the_rules_a_join_meets(sent, said):
    # `orion quota` sends bytes; any other client of the socket is held to the declaration too.
    from orion_daemon.limits import _memory_limit

    with pytest.raises(OrionError, match=said):
        _memory_limit({"memory_limit": sent}, None, 0)


def test_a_memory_limit_on_the_socket_is_read_as_a_join_reads_it():
    from orion_daemon.limits import UNCHANGED, _memory_limit

    assert _memory_limit({"memory_limit": "2GiB"}, 8 << 30, 0) == 2 << 30
    assert _memory_limit({"memory_limit": None}, 8 << 30, 0) is None  # lifted
    assert _memory_limit({"memory_limit": "none"}, 8 << 30, 0) is None
    assert _memory_limit({}, 8 << 30, 0) is UNCHANGED
