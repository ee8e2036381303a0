"""A daemon process for the tests: started on a test's tmp_path, stopped afterwards."""

from __future__ import annotations

import csv
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

    def __init__(self, folder: Path, *arguments: str) -> None:
        self.folder = folder
        self.log = folder.parent / "daemon.out"
        command = [sys.executable, "-m", "orion_daemon", "--gpu", "0", "--sm-count", "132",
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

    def learned(self, name: str) -> dict:
        record = state.require_daemon(0, self.folder)
        return request(Path(record["socket"]), {"op": "learned", "client": name})["learned"]

    def names(self) -> list[str]:
        return [client["name"] for client in self.status()["clients"]]

    def join(self, role: str, name: str, **fields) -> dict[str, str]:
        joined = join(0, JoinRequest(role=role, name=name, **fields), self.folder)
        return program_environment(os.environ, joined)

    def events(self) -> list[dict[str, str]]:
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
