"""A slot taken and never attached to, on the stand-in driver (CPU only, real processes).

What users rely on: a claimer that takes a slot and hangs (alive, but its program never reaches
the GPU) loses the slot after the daemon's bound, recorded as ``expired``, so it cannot hold one
of the 16 slots for ever; a program that attached in time keeps its slot however long it runs;
and a program that comes too late cannot take the slot meanwhile given to another client.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from daemon_harness import RunningDaemon
from native_harness import read_log, wait_for

GENEROUS_S = 60.0
BOUND_S = "2"
HOLD = "func k 100 launch k 4 128 0 sync 0 say attached hold"  # then holds the slot
SHORT = "func k 100 repeat 3 launch k 4 128 0 end sync 0"


@pytest.fixture
def daemon(tmp_path):
    running = RunningDaemon(tmp_path / "gpu0", policy="reef", attach_timeout_s=float(BOUND_S))
    yield running
    running.close()


def client(daemon: RunningDaemon, name: str) -> dict | None:
    return next((c for c in daemon.status()["clients"] if c["name"] == name), None)


def test_a_claimer_that_never_attaches_loses_its_slot_after_the_bound(daemon):
    daemon.join("be", "hung")  # this test's process claims it, lives on and never attaches
    wait_for(lambda: daemon.names() == [], timeout_s=GENEROUS_S, what="the slot to expire")
    (join, expired) = daemon.events()
    assert (join["event"], expired["event"], expired["client"]) == ("join", "expired", "hung")
    assert f"no process attached within {BOUND_S} s of the join" in expired["detail"]
    daemon.join("be", "next")  # the slot is free again
    assert daemon.names() == ["next"]


def test_a_program_that_attached_in_time_keeps_its_slot(harness, daemon, tmp_path):
    program = harness.start(HOLD, env=daemon.join("be", "steady"), log=tmp_path / "be.log")
    try:
        assert program.stdout is not None and program.stdout.readline().strip() == "attached"
        joined = client(daemon, "steady")["joined_s"]
        bound = float(BOUND_S)
        wait_for(lambda: daemon.status()["uptime_s"] > joined + 2 * bound + 1,
                 timeout_s=GENEROUS_S, what="the daemon's clock to pass the bound")  # fmt: skip
        assert client(daemon, "steady")["state"] == "attached"
        assert [e["event"] for e in daemon.events()] == ["join"]
    finally:
        program.kill()
        program.wait(timeout=GENEROUS_S)


HOLD_A_SLOT = """
import json, pathlib, sys
from orion_daemon.admission import JoinRequest
from orion_daemon.joining import join
joined = join(0, JoinRequest(role="be", name="newcomer"), pathlib.Path(sys.argv[1]))
print(json.dumps(joined), flush=True)
sys.stdin.read()
"""


def test_a_program_too_late_cannot_take_the_slot_given_to_another(harness, daemon, tmp_path):
    late_env = daemon.join("be", "late")
    wait_for(lambda: daemon.names() == [], timeout_s=GENEROUS_S, what="the slot to expire")
    newcomer = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_SLOT, str(daemon.folder)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert newcomer.stdout is not None
        theirs = json.loads(newcomer.stdout.readline())
        assert theirs["ORION_CLIENT"] == late_env["ORION_CLIENT"]  # the same slot, given again
        result = harness.run(SHORT, env=late_env, log=tmp_path / "late.log")
        assert result.returncode == 0, result.stderr
        # It passed through, ungated, and the newcomer's slot still waits for the newcomer.
        kinds = [e.kind for e in read_log(tmp_path / "late.log")]
        assert kinds.count("launch") == 3 and "wait_value" not in kinds
        assert client(daemon, "newcomer")["state"] == "registered"
    finally:
        newcomer.kill()
        newcomer.wait(timeout=GENEROUS_S)
