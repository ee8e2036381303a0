"""One daemon per GPU, and no signal to a process that only has a dead daemon's pid (CPU only).

What users rely on: `orion up` run several times at once leaves exactly one daemon, the others
refused in one line; a daemon holds its folder's lock for its whole life, record or not; a stale
``daemon.json`` whose pid now belongs to another process is not taken for a live daemon, is
never signalled by `orion down`, and the next daemon starts over it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import RunningDaemon, daemon_command
from native_harness import wait_for
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from orion_common.processes import process_start_time
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.control import start_detached, stop
from orion_daemon.lock import gpu_claim, gpu_claim_name
from orion_daemon.server import DaemonSettings

GENEROUS_S = 60.0

UP = """
import sys
from pathlib import Path
from orion_common.errors import OrionError
from orion_daemon.control import start_detached
from orion_daemon.server import DaemonSettings

settings = DaemonSettings(gpu=0, sm_count=132, folder=Path(sys.argv[1]), sharing="timeslice")
try:
    record = start_detached(settings)  # what `orion up` does once it knows the GPU
except OrionError as error:
    print(f"refused: {error.message}")
    sys.exit(1)
print(f"started {record['pid']}")
"""


def daemons_for(folder: Path) -> list[int]:
    """The pids of the daemon processes serving ``folder`` (from /proc: whatever they wrote)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = b"orion_daemon" in arguments and any(str(folder).encode() in a for a in arguments)
        if ours and process_start_time(int(entry.name)) is not None:  # not a zombie
            found.append(int(entry.name))
    return found


def test_racing_ups_leave_exactly_one_daemon(tmp_path):
    folder = tmp_path / "gpu0"
    command = [sys.executable, "-c", UP, str(folder)]
    ups = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tmp_path) for _ in range(3)
    ]
    outputs = [(up.communicate(timeout=GENEROUS_S)[0].strip(), up.returncode) for up in ups]
    try:
        started = [out for out, code in outputs if code == 0]
        refused = [out for out, code in outputs if code != 0]
        assert len(started) == 1, outputs
        assert len(refused) == 2 and all("already runs for GPU 0" in out for out in refused)
        pid = int(started[0].split()[1])
        assert state.live_record(folder)["pid"] == pid
        assert daemons_for(folder) == [pid]
    finally:
        stop(0, folder)
    assert daemons_for(folder) == []


def test_racing_daemons_leave_exactly_one(tmp_path):
    # Past `orion up`'s own check: the daemons themselves race for the folder's lock.
    folder = tmp_path / "gpu0"
    command = daemon_command(folder)
    daemons = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
        )
        for _ in range(3)
    ]
    try:
        wait_for(lambda: sum(d.poll() is not None for d in daemons) == 2, timeout_s=GENEROUS_S,
                 what="all but one daemon to give up")  # fmt: skip
        (survivor,) = [d for d in daemons if d.poll() is None]
        for loser in daemons:
            if loser is not survivor:
                assert loser.returncode == 1
                assert "already runs for GPU 0" in loser.stderr.read().splitlines()[0]
        wait_for(lambda: state.live_record(folder) is not None, timeout_s=GENEROUS_S,
                 what="the survivor's record")  # fmt: skip
        assert state.live_record(folder)["pid"] == survivor.pid
        assert daemons_for(folder) == [survivor.pid]
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.terminate()
            daemon.communicate(timeout=GENEROUS_S)


def test_a_daemon_holds_its_lock_for_its_whole_life_record_or_not(tmp_path):
    daemon = RunningDaemon(tmp_path / "gpu0")
    try:
        (daemon.folder / state.RECORD).unlink()  # as if someone tidied the folder
        second = subprocess.run(
            daemon_command(daemon.folder),
            capture_output=True, text=True, timeout=GENEROUS_S, check=False, cwd=tmp_path,
        )  # fmt: skip
        assert second.returncode == 1
        assert second.stderr.splitlines()[0] == "error: an orion daemon already runs for GPU 0"
        served = daemon_client.status(daemon.folder / state.SOCKET, timeout_s=GENEROUS_S)
        assert served["pid"] == daemon.process.pid  # the first one serves on
    finally:
        daemon.close()


@pytest.fixture
def reused_pid_record(tmp_path):
    """A daemon killed with SIGKILL, whose record is then made to name a process that is not a
    daemon (as the pid of a dead daemon is given to a new process); yields (folder, bystander)."""
    daemon = RunningDaemon(tmp_path / "gpu0")
    daemon.process.kill()
    daemon.process.wait(timeout=GENEROUS_S)
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    path = daemon.folder / state.RECORD
    record = json.loads(path.read_text())
    assert record["pid_start"] != process_start_time(bystander.pid) or pytest.skip(
        "the bystander started in the same clock tick as the daemon"
    )
    record["pid"] = bystander.pid  # the dead daemon's start time stays, as in the real case
    path.write_text(json.dumps(record))
    try:
        yield daemon.folder, bystander
    finally:
        bystander.kill()
        bystander.wait(timeout=GENEROUS_S)


def test_a_stale_record_whose_pid_was_reused_is_not_a_live_daemon(reused_pid_record):
    folder, bystander = reused_pid_record
    assert state.read_record(folder)["pid"] == bystander.pid
    assert state.live_record(folder) is None
    with pytest.raises(OrionError, match="no orion daemon runs for GPU 0"):
        stop(0, folder)
    result = CliRunner().invoke(app, ["down", "--state-dir", str(folder.parent)])
    assert result.exit_code == 1
    assert "no orion daemon runs for GPU 0" in result.output
    assert bystander.poll() is None  # never signalled
    assert os.kill(bystander.pid, 0) is None


def test_the_next_daemon_starts_over_a_record_whose_pid_was_reused(reused_pid_record):
    folder, bystander = reused_pid_record
    daemon = RunningDaemon(folder)
    try:
        assert "removed daemon.json left by a daemon that died" in daemon.output()
        assert state.live_record(folder)["pid"] == daemon.process.pid
    finally:
        daemon.close()
    assert bystander.poll() is None


# ---------------------------------------------------------------------------------------------
# One daemon per GPU on the machine: another state folder's, or another user's
# ---------------------------------------------------------------------------------------------

NOBODY = 65534
HOLD_THE_CLAIM = """
import os, socket, sys
claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
claim.bind("\\0" + sys.argv[1])  # the abstract name, as the daemon binds it
os.setresgid(int(sys.argv[2]), int(sys.argv[2]), int(sys.argv[2]))
os.setresuid(int(sys.argv[2]), int(sys.argv[2]), int(sys.argv[2]))
claim.listen(1)  # the kernel records who listens: the second user
print("held", flush=True)
sys.stdin.read()
"""


def fresh_uuid() -> str:
    """A GPU UUID no other test (or engineer's run on this machine) claims."""
    import uuid

    return f"GPU-test-{uuid.uuid4()}"


def start_refused(folder: Path, uuid: str) -> str:
    """Starts a daemon for GPU 0 with ``uuid`` in ``folder``, expecting a refusal; its stderr."""
    command = daemon_command(folder, gpu_uuid=uuid)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=GENEROUS_S, cwd=folder.parent
    )
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr


def test_a_second_daemon_for_the_gpu_in_another_state_folder_is_refused(tmp_path):
    uuid = fresh_uuid()
    for base in ("a", "b"):
        (tmp_path / base).mkdir(mode=0o700)
    first = RunningDaemon(tmp_path / "a" / "gpu0", gpu_uuid=uuid)
    try:
        stderr = start_refused(tmp_path / "b" / "gpu0", uuid)
        (line,) = [text for text in stderr.splitlines() if "already scheduled" in text]
        assert f"GPU 0 ({uuid}) is already scheduled by another orion daemon of yours" in line
        assert f"(pid {first.process.pid})" in line
        # Nothing was left half-started: no record, no socket in the refused daemon's folder.
        assert not (tmp_path / "b" / "gpu0" / state.RECORD).exists()
        assert not (tmp_path / "b" / "gpu0" / state.SOCKET).exists()
        # What `orion up` does refuses before it starts anything.
        settings = DaemonSettings(
            gpu=0, sm_count=132, folder=tmp_path / "b" / "gpu0", sharing="timeslice",
            gpu_uuid=uuid,
        )  # fmt: skip
        with pytest.raises(OrionError, match="already scheduled by another orion daemon"):
            start_detached(settings)
    finally:
        first.close()
    # Once the first has gone, the GPU is free for another.
    second = RunningDaemon(tmp_path / "b" / "gpu0", gpu_uuid=uuid)
    second.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_a_daemon_for_a_gpu_another_users_daemon_schedules_is_refused(tmp_path):
    uuid = fresh_uuid()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_CLAIM, gpu_claim_name(uuid)[1:], str(NOBODY)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        stderr = start_refused(tmp_path / "gpu0", uuid)
        (line,) = [text for text in stderr.splitlines() if "already scheduled" in text]
        assert (
            f"GPU 0 ({uuid}) is already scheduled by the orion daemon of another user "
            f"(uid {NOBODY}, pid {holder.pid})"
        ) in line
    finally:
        holder.kill()
        holder.wait(timeout=GENEROUS_S)


def test_stand_in_claims_are_scoped_and_real_ones_are_the_machines(monkeypatch):
    # Two test sessions give their stand-ins one UUID: each session's daemon claims it in its own
    # scope, so both start; within a scope, and for a real GPU whatever the scope, one claim.
    uuid = fresh_uuid()
    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps([{"uuid": uuid, "name": "stand-in"}]))
    monkeypatch.setenv("ORION_STAND_IN_CLAIM_SCOPE", "session-a")
    with gpu_claim(0, uuid):
        refused = pytest.raises(OrionError, match="already scheduled by another orion daemon")
        with refused, gpu_claim(0, uuid):
            pass
        monkeypatch.setenv("ORION_STAND_IN_CLAIM_SCOPE", "session-b")
        with gpu_claim(0, uuid):
            pass
        monkeypatch.delenv("ORION_STAND_IN_GPUS")  # a real GPU: the scope is not read
        real = gpu_claim_name(uuid)
        assert real == "\0orion-gpu-" + uuid
