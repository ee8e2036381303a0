"""The runner's side of one client process: start it, talk to it, notice how it ended.

Clients run in their own session (process group), so a Ctrl-C typed at the terminal reaches only
the runner, which then stops them in order and keeps what they measured, instead of every
process dying at once mid-write. Their stdout and stderr go to ``logs/<name>.log``; the control
messages travel on private pipes (:mod:`colocation.protocol`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import colocation
from colocation.config import ClientConfig
from colocation.protocol import CONTROL_FDS_ENV, LineReader, Message, send

LOG_TAIL_LINES = 12
# Exit status of a client whose preload library could not attach to its slot (ORION_STRICT).
_PRELOAD_EXIT = 70

WAITING = "waiting"
WARMING_UP = "warming up"
READY = "ready"
RUNNING = "running"
FINISHED = "finished"
STOPPING = "stopping"
EXITED = "exited"
FAILED = "failed"


def source_root() -> Path:
    """The folder holding the orion packages, so a client runs the runner's own code."""
    return Path(colocation.__file__).resolve().parent.parent


def own_code_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` with the orion packages this process runs first on ``PYTHONPATH``.

    A child started with ``python -m`` also looks in its working folder first, so start it in a
    folder of its own as well: a source checkout there (without its built native library) would
    otherwise shadow the installed orion.
    """
    env = dict(environment)
    root = str(source_root())
    env["PYTHONPATH"] = os.pathsep.join(
        [root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]]
    )
    return env


def describe_exit(code: int) -> str:
    """An exit status in words; negative means killed by a signal (``subprocess``'s habit)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    if code == _PRELOAD_EXIT:
        return f"exit code {code}: the preload library could not join the run (see its log)"
    return f"exited with code {code}"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log (reads only its end: logs of long runs can be large)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


class ClientProcess:
    """One client as the runner tracks it: process, pipes, state and what it reported."""

    def __init__(self, config: ClientConfig, run_dir: Path) -> None:
        self.config = config
        self.slot: int | None = None
        """Its slot in the daemon's shared state, once it has joined."""
        self.run_dir = run_dir
        self.log_path = run_dir / "logs" / f"{config.name}.log"
        self.state = WAITING
        self.process: subprocess.Popen[bytes] | None = None
        self.reader: LineReader | None = None
        self._command_fd: int | None = None
        self.stop_sent = False
        self.done = 0
        self.latencies_ms: list[float] = []
        self.ready_info: Message = {}
        self.finished_info: Message = {}
        self.reported_error: str | None = None
        self.exit_code: int | None = None
        self.error: str | None = None
        self.log_tail: list[str] = []
        self.window_start_s: float | None = None
        self.window_end_s: float | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.exit_code is None

    @property
    def failed(self) -> bool:
        return self.error is not None

    # -- start ----------------------------------------------------------------------------
    def spawn(self, environment: dict[str, str]) -> None:
        command_read, command_write = os.pipe()
        event_read, event_write = os.pipe()
        env = own_code_environment(environment)
        env[CONTROL_FDS_ENV] = f"{command_read},{event_write}"
        env["PYTHONUNBUFFERED"] = "1"
        try:
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "colocation.client", str(self.run_dir), self.name],
                    env=env,
                    cwd=self.run_dir,  # not the caller's folder: nothing there shadows orion
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(command_read, event_write),
                    start_new_session=True,
                )
        except BaseException:
            for fd in (command_read, command_write, event_read, event_write):
                os.close(fd)
            raise
        os.close(command_read)
        os.close(event_write)
        self._command_fd = command_write
        self.reader = LineReader(event_read)
        self.state = WARMING_UP

    # -- talk -----------------------------------------------------------------------------
    def send(self, message: Message) -> bool:
        """Send a command; False when the client can no longer hear it."""
        if self._command_fd is None:
            return False
        try:
            send(self._command_fd, message)
        except OSError:
            return False
        return True

    def start(self, window_start_s: float, window_s: float | None) -> None:
        """Start measuring at run-clock ``window_start_s`` for ``window_s`` seconds (None: until
        told to stop). The length travels as given: recomputing it as end minus start would be
        off in the last bits and move an arrival exactly at the end in or out of the window."""
        window_end_s = window_start_s + window_s if window_s is not None else None
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        message = {
            "type": "start",
            "window_start_s": window_start_s,
            "window_end_s": window_end_s,
            "window_s": window_s,
        }
        if self.send(message):
            self.state = RUNNING

    def stop(self) -> None:
        if not self.stop_sent:
            self.stop_sent = True
            self.send({"type": "stop"})
            if self.alive and self.state not in (WARMING_UP, WAITING):
                self.state = STOPPING

    def poll(self) -> list[Message]:
        """Read what the client said and notice if it ended; returns the new messages."""
        messages = self.reader.read() if self.reader is not None else []
        for message in messages:
            self._apply(message)
        if self.process is not None and self.exit_code is None:
            code = self.process.poll()
            if code is not None:
                late = self.reader.read() if self.reader is not None else []
                for message in late:  # written just before it exited
                    self._apply(message)
                messages += late
                self._ended(code)
        return messages

    def _apply(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "joined":
            self.slot = int(message.get("slot", -1))
        elif kind == "ready":
            self.ready_info = message
            if self.state == WARMING_UP:
                self.state = READY
        elif kind == "progress":
            self.done = int(message.get("done", self.done))
            self.latencies_ms.extend(float(x) for x in message.get("latencies_ms", ()))
        elif kind == "finished":
            self.finished_info = message
            self.done = int(message.get("done", self.done))
            if self.state == RUNNING:
                self.state = FINISHED
        elif kind == "error":
            self.reported_error = str(message.get("message", "error"))

    def _ended(self, code: int) -> None:
        self.exit_code = code
        expected = self.stop_sent and code == 0
        if not expected:
            self.log_tail = log_tail(self.log_path)
        if not expected and self.error is None:
            if self.reported_error is not None:
                self.error = self.reported_error
            elif code == 0:
                self.error = "exited before it was told to stop"
            else:
                self.error = describe_exit(code)
            if self.state == WARMING_UP:
                self.error = f"failed during warm-up: {self.error}"
        self.state = EXITED if expected else FAILED
        self.close_pipes()

    # -- end ------------------------------------------------------------------------------
    def kill(self) -> None:
        if self.alive and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    def wait(self, timeout_s: float) -> bool:
        """Wait for the process to end (polling its messages); True when it did."""
        deadline = time.monotonic() + timeout_s
        while self.alive:
            if self.reader is not None and not self.reader.eof:
                select.select([self.reader.fd], [], [], 0.05)
            self.poll()
            if not self.alive:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def fail(self, error: str) -> None:
        """Record a failure the runner decided on (never ready, killed as a straggler)."""
        if self.error is None:
            self.error = error

    def close_pipes(self) -> None:
        if self._command_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._command_fd)
            self._command_fd = None
        if self.reader is not None:
            with contextlib.suppress(OSError):
                os.close(self.reader.fd)
            self.reader = None

    def record(self) -> dict[str, Any]:
        """This client's run.json fields that change while the run goes on."""
        return {
            "pid": self.pid,
            "device": self.ready_info.get("device"),
            "stream_priority": self.ready_info.get("stream_priority"),
            "warmup_s": self.ready_info.get("warmup_s"),
            "done": self.done,
            "unfinished": self.finished_info.get("unfinished"),
            "exit_code": self.exit_code,
            "error": self.error,
            "log_tail": self.log_tail,
            "window_start_s": self.window_start_s,
            "window_end_s": self.window_end_s,
        }
