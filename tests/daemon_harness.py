"""A daemon process for the tests: started on a test's tmp_path, stopped afterwards."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from native_harness import wait_for

from orion_common.errors import OrionError
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.joining import join, program_environment
from orion_daemon.protocol import request

GIB = 1 << 30


class RunningDaemon:
    """A daemon process for GPU 0 with its state folder under a test's tmp_path."""

    def __init__(self, folder: Path, *arguments: str, prelude: str = "") -> None:
        """``prelude``: Python run in the daemon's process before the daemon itself (a test
        that needs the process changed, e.g. a disk that fills up)."""
        self.folder = folder
        self.log = folder.parent / "daemon.out"
        start = ["-m", "orion_daemon"]
        if prelude:
            start = ["-c", f"{prelude}\nimport sys\nfrom orion_daemon.__main__ import main\n"
                     "sys.exit(main(sys.argv[1:]))"]  # fmt: skip
        command = [sys.executable, *start, "--gpu", "0", "--sm-count", "132",
                   "--state-dir", str(folder), "--sharing", "timeslice",
                   "--memory-bytes", str(8 * GIB), *arguments]  # fmt: skip
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
        if record is None:
            return False
        try:
            request(Path(record["socket"]), {"op": "status"}, timeout_s=1)
        except OrionError:
            return False
        return True

    def status(self) -> dict:
        record = state.require_daemon(0, self.folder)
        return request(Path(record["socket"]), {"op": "status"})["status"]

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
