"""A daemon process for the tests: started on a test's tmp_path, stopped afterwards."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from native_harness import HeldKernel, read_log, wait_for

from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.joining import join, join_environment, program_environment
from orion_daemon.server import DaemonSettings

GIB = 1 << 30
BE_SCRIPT = "func bek 1000 repeat 10 launch bek 8 128 0 end sync 0"  # ten 1 ms kernels
# How long a test waits for the daemon to find a client gone and give its slot back. It looks
# every 0.1 s (users are told "within a second"); the alternative is never, so the bound only
# has to be finite, and leaves a busy machine's scheduler seconds of room.
SLOT_BACK_S = 5.0


@contextlib.contextmanager
def be_held_behind_hp(
    harness, daemon, tmp_path, hp_kernel_us: int = 20_000_000, hold: HeldKernel | None = None
):
    """An HP client running a kernel of ``hp_kernel_us`` (20 s; with ``hold``, until the test
    releases it) and a BE client whose ten launches are all held on the GPU behind the gate HP
    closed; yields the BE process. Both are killed if still running."""
    hp_env = daemon.join("hp", "inference")
    if hold is not None:
        hp_env = {**hp_env, **hold.env()}
    be_env = daemon.join("be", "trainer")
    hp = harness.start(f"func long {hp_kernel_us} launch long 1 32 0 sync 0", env=hp_env,
                       log=tmp_path / "hp.log")  # fmt: skip
    be = None
    try:
        # HP's launch closed BE's gate before it reached the driver (and counted it first).
        wait_for(lambda: len(read_log(tmp_path / "hp.log")) > 0, what="HP's launch")
        wait_for(lambda: client_launches(daemon, "inference") >= 1,
                 what="the daemon to count HP's launch")  # fmt: skip
        be = harness.start(BE_SCRIPT, env=be_env, log=tmp_path / "be.log")
        wait_for(
            lambda: sum(e.kind == "launch" for e in read_log(tmp_path / "be.log")) == 10,
            what="BE's launches",
        )
        # Held behind the gate HP's long kernel closed: its launch calls returned, the
        # (simulated) GPU waits at the gate and has started none of its kernels. (A caller checks
        # they start only after what it does next: the order, not how long they stay held.)
        assert "wait_value" in [e.kind for e in read_log(tmp_path / "be.log")]
        assert not held_work_started(tmp_path / "be.log")
        assert be.poll() is None
        yield be
    finally:
        for process in (hp, be):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def joining_environment(state_base: Path, role: str, name: str, **fields) -> dict[str, str]:
    """What `orion run` gives a program that joins GPU 0's daemon under ``state_base`` as
    ``role`` and ``name`` (with the JoinRequest ``fields``): it joins at its first driver call."""
    request = JoinRequest(role=role, name=name, **fields)
    return join_environment(os.environ, request, device="0", state_base=state_base)


def client_launches(daemon: RunningDaemon, name: str) -> int:
    """Launches the daemon has counted for client ``name`` (0 before it joined)."""
    return sum(c["launches"] for c in daemon.status()["clients"] if c["name"] == name)


def held_work_started(log: Path) -> list[int]:
    """When (stand-in clock, ns) the kernels of ``log``'s process started on the GPU."""
    return [e.time_ns for e in read_log(log) if e.kind == "exec_start"]


def daemon_command(folder: Path, **settings) -> list[str]:
    """``python -m orion_daemon`` for GPU 0 (132 SMs, 8 GiB, time-sliced) with its state folder
    ``folder`` and ``settings`` (:class:`DaemonSettings` fields) over those defaults."""
    settings = {"sharing": "timeslice", "memory_bytes": 8 * GIB, **settings}
    return daemon_client.daemon_command(DaemonSettings(gpu=0, sm_count=132, folder=folder,
                                                       **settings))  # fmt: skip


class RunningDaemon:
    """A daemon process for GPU 0 with its state folder under a test's tmp_path."""

    def __init__(self, folder: Path, prelude: str = "", **settings) -> None:
        """``settings``: :class:`DaemonSettings` fields (:func:`daemon_command`). ``prelude``:
        Python run in the daemon's process before the daemon itself (a test that needs the
        process changed, e.g. a disk that fills up)."""
        self.folder = folder
        self.log = folder.parent / "daemon.out"
        command = daemon_command(folder, **settings)
        if prelude:
            command[1:3] = ["-c", f"{prelude}\nimport sys\nfrom orion_daemon.__main__ import main\n"
                            "sys.exit(main(sys.argv[1:]))"]  # fmt: skip
        with self.log.open("wb") as log:
            # Outside the checkout: `python -m` would import the source tree before the install.
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=folder.parent
            )
        wait_for(self.answers, timeout_s=30, what=f"the daemon to answer ({self.output()})")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def answers(self) -> bool:
        assert self.process.poll() is None, self.output()
        record = state.live_record(self.folder)
        return record is not None and daemon_client.answers(record, timeout_s=1)

    def status(self) -> dict:
        record = state.require_daemon(0, self.folder)
        return daemon_client.status(record)

    def learned(self, name: str) -> dict:
        record = state.require_daemon(0, self.folder)
        return daemon_client.learned(record, name)

    def names(self) -> list[str]:
        return [client["name"] for client in self.status()["clients"]]

    def join(self, role: str, name: str, **fields) -> dict[str, str]:
        joined = join(0, JoinRequest(role=role, name=name, **fields), self.folder)
        return program_environment(os.environ, joined)

    def events(self) -> list[dict[str, str]]:
        """clients.csv, once the daemon's records thread has written what it was given."""
        wait_for(lambda: self.status()["records_pending"] == 0, what="the daemon's records")
        with (self.folder / state.CLIENTS_TABLE).open() as handle:
            return list(csv.DictReader(handle))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


IMPOSTOR = r"""
import json, os, socket, sys
folder, reply, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(folder, "daemon.sock")
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
record = {"format": "orion-daemon", "version": 1, "pid": os.getpid(), "socket": path,
          "gpu": {"index": 0, "uuid": None}, "clients": []}
with open(os.path.join(folder, "daemon.json"), "w") as handle:
    json.dump(record, handle)
if uid >= 0:  # the kernel records who listens when listen() is called
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
listener.listen(8)
print("listening", flush=True)
while True:
    connection, _ = listener.accept()
    with connection:
        data = b""
        while b"\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            connection.sendall(reply.encode() + b"\n")
        except OSError:  # a client that refused us left before the answer
            pass
"""


class Impostor:
    """A process listening where a GPU's daemon listens that is not orion's daemon: it answers
    every request with ``reply``; with ``uid``, it listens as that user (the test must be root
    to start one)."""

    def __init__(self, folder: Path, reply: dict, uid: int | None = None) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", IMPOSTOR, str(folder), json.dumps(reply),
             str(-1 if uid is None else uid)],
            stdout=subprocess.PIPE, text=True, cwd=folder,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "listening"

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
