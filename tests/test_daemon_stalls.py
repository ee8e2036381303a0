"""A daemon that no client can stall and no disk can stop, on the stand-in driver (CPU only).

What users rely on: one connection that says nothing, or one byte a second, holds up nothing
else: the heartbeat goes on (so no client gives up and runs ungated), every other request is
answered, and the daemon hangs up on the slow one at its deadline; a disk that fills up costs
records (said once in the log and by `orion status`), never scheduling or joins.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import RunningDaemon
from native_harness import wait_for
from typer.testing import CliRunner

from orion_cli.app import app
from orion_daemon import client as daemon_client
from orion_daemon import state

GENEROUS_S = 30.0  # a bound for a busy CI machine, not a measure of speed
STEADY_BE = "func bek 1000 repeat 600000 launch bek 8 128 0 sync 0 end"


class Stall:
    """A connection to the daemon that sends ``byte`` once a second (never a newline), or
    nothing when ``byte`` is empty, and reads whatever the daemon answers until it hangs up."""

    def __init__(self, path: Path, byte: bytes = b"") -> None:
        self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.connection.connect(str(path))
        self.connection.settimeout(GENEROUS_S * 2)
        self.answer = b""
        self.hung_up = threading.Event()
        self._byte = byte
        threading.Thread(target=self._read, daemon=True).start()
        if byte:
            threading.Thread(target=self._trickle, daemon=True).start()

    def _read(self) -> None:
        try:
            while chunk := self.connection.recv(65536):
                self.answer += chunk
        except OSError:
            pass
        self.hung_up.set()

    def _trickle(self) -> None:
        # The pace is the scenario (a client that sends a byte a second), not a synchronisation.
        while not self.hung_up.wait(1.0):
            try:
                self.connection.send(self._byte)
            except OSError:
                return

    def close(self) -> None:
        self.connection.close()


def gate_waits(daemon: RunningDaemon, name: str) -> int:
    return next(c["gate_waits"] for c in daemon.status()["clients"] if c["name"] == name)


@contextlib.contextmanager
def be_launching(harness, daemon, tmp_path) -> Iterator[subprocess.Popen[str]]:
    """A BE client launching a 1 ms kernel after another for minutes: each launch waits at its
    gate while the client is gated; one that gave up on the daemon would wait no more."""
    be = harness.start(STEADY_BE, env=daemon.join("be", "trainer"), log=tmp_path / "be.log")
    try:
        wait_for(lambda: gate_waits(daemon, "trainer") > 0, timeout_s=GENEROUS_S,
                 what="BE's first gate waits")  # fmt: skip
        yield be
    finally:
        if be.poll() is None:
            be.kill()
        be.wait(timeout=GENEROUS_S)


def still_gating(daemon: RunningDaemon, be: subprocess.Popen[str]) -> None:
    """BE's gate waits go on growing (a client that gave up on the daemon passes through) and
    it never said the daemon fell silent."""
    before = gate_waits(daemon, "trainer")
    wait_for(lambda: gate_waits(daemon, "trainer") > before + 10, timeout_s=GENEROUS_S,
             what="BE's gate waits to go on")  # fmt: skip
    assert be.poll() is None
    be.kill()
    be.wait(timeout=GENEROUS_S)
    assert be.stderr is not None
    assert "fell silent" not in be.stderr.read()


def test_an_idle_and_a_byte_a_second_connection_ungate_no_one(harness, tmp_path):
    daemon = RunningDaemon(tmp_path / "gpu0", policy="reef")
    try:
        with be_launching(harness, daemon, tmp_path) as be:
            path = daemon.folder / state.SOCKET
            stalls = [Stall(path), Stall(path, b" ")]
            try:
                # Until the daemon hangs up on both (their deadline: seconds, far over the
                # clients' one-second silence bound), every status request is answered.
                answered = 0
                while not all(stall.hung_up.is_set() for stall in stalls):
                    status = daemon_client.status(path, timeout_s=GENEROUS_S)
                    answered += 1
                    assert [c["name"] for c in status["clients"]] == ["trainer"]
                    if answered == 1:  # and `orion status` itself, as a user types it
                        shown = CliRunner().invoke(app, ["status", "--state-dir", str(tmp_path)])
                        assert shown.exit_code == 0 and "trainer" in shown.output, shown.output
                    stalls[0].hung_up.wait(0.2)  # the pace of the asking, not a synchronisation
                assert answered > 1
                for stall in stalls:
                    assert b"no whole request within" in stall.answer
            finally:
                for stall in stalls:
                    stall.close()
            still_gating(daemon, be)
    finally:
        daemon.close()


DISK_FULL = """
import errno, os
from pathlib import Path
import orion_common.atomic_io as atomic_io
import orion_common.csv_table as csv_table

FULL = Path({flag!r})  # the disk is full while this file exists


def _fill(real):
    def write(*args, **kwargs):
        if FULL.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)
    return write


atomic_io.write_text_atomic = _fill(atomic_io.write_text_atomic)
csv_table.CsvTable.flush = _fill(csv_table.CsvTable.flush)
"""


@pytest.fixture
def disk_full_daemon(tmp_path):
    flag = tmp_path / "disk-is-full"
    daemon = RunningDaemon(tmp_path / "gpu0", policy="reef", hp_completion="gpu-write",
                           prelude=DISK_FULL.format(flag=str(flag)))  # fmt: skip
    yield daemon, flag
    daemon.close()


def test_a_full_disk_degrades_records_and_scheduling_goes_on(
    harness, tmp_path, disk_full_daemon, monkeypatch
):
    daemon, flag = disk_full_daemon
    assert daemon.status()["records"] is None
    with be_launching(harness, daemon, tmp_path) as be:
        flag.touch()
        wait_for(lambda: daemon.status()["records"] is not None, timeout_s=GENEROUS_S,
                 what="records to be degraded")  # fmt: skip
        assert "No space left on device" in daemon.status()["records"]
        # Joins go on (their records are what is lost), and BE goes on being gated.
        daemon.join("hp", "late")
        wait_for(lambda: daemon.status()["records_pending"] == 0, timeout_s=GENEROUS_S,
                 what="the records thread to try every write")  # fmt: skip
        assert daemon.names() == ["late", "trainer"]
        monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
        shown = CliRunner().invoke(app, ["status"])
        assert shown.exit_code == 0, shown.output
        words = " ".join(shown.output.split())  # the title wraps at the table's width
        assert "records degraded" in words and "No space left" in words
        still_gating(daemon, be)
    assert daemon.process.poll() is None
    assert daemon.output().count("records degraded, scheduling goes on") == 1
