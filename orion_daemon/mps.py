"""A private MPS control daemon for one run, always stopped afterwards.

MPS policies need every client to reach one MPS server. A daemon of the run's own (its pipe and
log folders inside the run directory) keeps runs from interfering with a system-wide daemon or
with each other, keeps MPS's logs with the results, and can be stopped without touching anybody
else's work. A daemon left behind would silently turn every later GPU job on the machine into an
MPS client, so stopping it is not optional: the context manager quits it on every way out
(normal end, exception, Ctrl-C, SIGTERM), waits for its process to go and kills it if it does not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from orion_common import prerequisites
from orion_common.errors import OrionError
from orion_common.processes import wait_gone
from orion_daemon.signals import DeferredSignals, sigterm_as_interrupt

PID_FILE = "nvidia-cuda-mps-control.pid"
MPS_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
"""The MPS client's share of the SMs (percent). The runner sets it per client under policy
``mps-share`` from ``sm_percent`` and removes an inherited one under every policy: a value left
in the user's shell would silently partition the GPU of runs that are meant to compare policies."""
MPS_CLIENT_PRIORITY = "CUDA_MPS_CLIENT_PRIORITY"
MPS_BE_PRIORITY = "1"
"""An MPS client's priority (0, the default, is normal; 1 below it): given to BE clients."""
MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
NO_MPS_FOLDER = "no-mps"
"""The pipe folder, inside a daemon's own folder, of clients meant to run outside MPS: every client
of a time-sliced daemon, and the HP of one under ``--hp-context own``."""


def outside_any_mps(folder: Path) -> dict[str, str]:
    """Variables that keep a CUDA process out of every MPS daemon, with the empty pipe folder
    they name made inside ``folder``.

    CUDA connects a process to the MPS daemon of its pipe folder (``/tmp/nvidia-mps`` unless
    ``CUDA_MPS_PIPE_DIRECTORY`` says otherwise) and runs it without MPS when none answers there.
    A machine-wide daemon, root's or another user's, would otherwise make every client of a
    time-sliced orion daemon its MPS client without a word: HP and BE kernels running at once
    where orion's gates, its latency loop and its reports count on the driver switching
    contexts, and the clients' fate tied to a daemon their owner does not control. A folder of
    the orion daemon's own, where no MPS daemon runs, is the same "nobody answers" every
    machine without MPS gives.
    """
    pipe_dir = folder / NO_MPS_FOLDER
    pipe_dir.mkdir(mode=0o755, exist_ok=True)
    return {MPS_PIPE_DIRECTORY: str(pipe_dir)}


def with_sm_share(environment: dict[str, str], sm_percent: int | None) -> dict[str, str]:
    """``environment`` for a client with ``sm_percent`` of the SMs (None: all of them)."""
    shared = dict(environment)
    shared.pop(MPS_THREAD_PERCENTAGE, None)
    if sm_percent is not None:
        shared[MPS_THREAD_PERCENTAGE] = str(sm_percent)
    return shared


# sockaddr_un holds 108 bytes, and the MPS control daemon makes sockets in the pipe folder whose
# names run to at least "control_privileged". On an H100 (driver 580.159) a pipe folder of 88
# characters, which that name alone would have fitted, failed to start while one of 87 worked: the
# daemon's own naming needs more room than its documented socket names. Keep a clear margin.
_MAX_PIPE_DIR_CHARS = 80


@dataclass(frozen=True)
class MpsDaemon:
    """A running private daemon: its folders, its pid, and what clients must have set."""

    control: Path
    pipe_dir: Path
    log_dir: Path
    pid: int

    @property
    def environment(self) -> dict[str, str]:
        """Variables that make a CUDA process a client of this daemon."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }


def require_mps_control() -> Path:
    """``nvidia-cuda-mps-control``, or a clear refusal naming the alternatives."""
    return prerequisites.require(prerequisites.check_mps_control()).found


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _pipe_folder(mps_dir: Path) -> tuple[Path, Path | None]:
    """``mps/pipe``, or a short private folder it links to when the path is too long for a socket.

    Returns (folder to use, temporary folder to remove afterwards or None).
    """
    pipe_dir = mps_dir / "pipe"
    # The path as the daemon is handed it (not resolved: a shorter real path behind a symbolic
    # link does not shorten the socket name it binds).
    if len(str(pipe_dir.absolute())) <= _MAX_PIPE_DIR_CHARS:
        pipe_dir.mkdir(mode=0o700, parents=True)
        return pipe_dir, None
    short = Path(tempfile.mkdtemp(prefix="orion-mps-"))
    pipe_dir.symlink_to(short, target_is_directory=True)
    return short, short


def _control(control: Path, command: str, environment: dict[str, str], timeout_s: float) -> str:
    """One command to the daemon (``quit``, ``get_server_list``); its answer, or '' on failure."""
    try:
        result = subprocess.run(
            [str(control)],
            input=command + "\n",
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout


def _start(
    control: Path, pipe_dir: Path, log_dir: Path, environment: dict[str, str], timeout_s: float
) -> MpsDaemon:
    start_log = log_dir / "start.log"
    with start_log.open("w", encoding="utf-8") as log:
        # Output to a file, not a pipe: the daemonised child keeps its parent's stdout open, and
        # reading a pipe to its end would wait for the daemon to exit.
        try:
            result = subprocess.run(
                [str(control), "-d"],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise OrionError(f"{control} -d did not return within {timeout_s:.0f} s") from None
        except OSError as exc:
            raise OrionError(
                f"cannot run {control}: {exc.strerror or exc}", prerequisites.MPS_HINT
            ) from None
    if result.returncode != 0:
        detail = _tail(start_log) or _tail(log_dir / "control.log")
        raise OrionError(
            f"the MPS control daemon did not start (exit code {result.returncode})"
            + (f": {detail}" if detail else ""),
            hint=f"its log is in {log_dir}; another MPS daemon or a GPU in exclusive mode can "
            "prevent it",
        )
    pid_file = pipe_dir / PID_FILE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            if pid > 0:
                return MpsDaemon(control, pipe_dir, log_dir, pid)
        time.sleep(0.05)
    _control(control, "quit", environment, 10)
    raise OrionError(
        f"the MPS control daemon started but wrote no {PID_FILE} within {timeout_s:.0f} s",
        hint=f"see {log_dir / 'control.log'}",
    )


def stop(daemon: MpsDaemon, environment: dict[str, str], timeout_s: float) -> list[str]:
    """Quit the daemon and its servers; kill what does not go. Returns notes for the record."""
    notes: list[str] = []
    answer = _control(daemon.control, "get_server_list", environment, 5)
    servers = [int(token) for token in answer.split() if token.isdigit()]
    _control(daemon.control, "quit", environment, timeout_s)
    for pid, what in [(daemon.pid, "MPS control daemon"), *((s, "MPS server") for s in servers)]:
        if wait_gone(pid, timeout_s):
            continue
        notes.append(f"the {what} (pid {pid}) did not quit within {timeout_s:g} s; killed it")
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
            if wait_gone(pid, min(2.0, timeout_s)):
                break
    return notes


def _started_anyway(control: Path, pipe_dir: Path, log_dir: Path) -> MpsDaemon | None:
    """The daemon, if it came up although starting was cut short (Ctrl-C mid-start)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((pipe_dir / PID_FILE).read_text().strip())
        if pid > 0:
            return MpsDaemon(control, pipe_dir, log_dir, pid)
    return None


HANDOVER_MODULE = "orion_daemon.mps_handover"
"""The module of the process that stops an MPS daemon left to running clients once they exit."""


def hand_over(daemon: MpsDaemon, environment: dict[str, str], clients: list[int],
              temporary: Path | None) -> int:  # fmt: skip
    """Starts the detached process that stops ``daemon`` once every pid in ``clients`` has
    exited (then removes ``temporary``, its short pipe folder, if any); its pid."""
    command = [sys.executable, "-m", HANDOVER_MODULE, "--control", str(daemon.control),
               "--pipe-dir", str(daemon.pipe_dir), "--log-dir", str(daemon.log_dir),
               "--mps-pid", str(daemon.pid)]  # fmt: skip
    if temporary is not None:
        command += ["--remove", str(temporary)]
    process = subprocess.Popen(
        [*command, "--", *map(str, clients)],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # neither the daemon's Ctrl-C nor its process group reach it
        close_fds=True,
    )
    return process.pid


@contextlib.contextmanager
def private_mps_daemon(
    run_dir: Path,
    *,
    control: Path | None = None,
    start_timeout_s: float = 30.0,
    stop_timeout_s: float = 15.0,
    notes: list[str] | None = None,
    keep_running: Callable[[], list[int]] | None = None,
    sigterm_interrupts: bool = True,
) -> Iterator[MpsDaemon]:
    """Run a private MPS control daemon (folders in ``run_dir/mps``) for the block's duration.

    Refuses with :class:`OrionError` when ``nvidia-cuda-mps-control`` is missing or does not
    start. Anything worth recording about the shutdown (a daemon that had to be killed) is
    appended to ``notes``. ``keep_running`` (the daemon's: the pids of clients still running) is
    asked at the end: when there are any, the MPS daemon is left running, since stopping it would
    take the GPU away from programs that outlive orion's daemon, and handed to a detached process
    that stops it once they have all exited (:mod:`orion_daemon.mps_handover`).
    ``sigterm_interrupts``: SIGTERM raises ``KeyboardInterrupt`` inside the block, so that a run
    killed with it still stops its MPS daemon; False for a caller that handles SIGTERM itself
    (the orion daemon stops cleanly on it, and an interrupt raised wherever it happens to be
    would cut that short).
    """
    control = control or require_mps_control()
    mps_dir = run_dir / "mps"
    log_dir = mps_dir / "log"
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    pipe_dir, temporary = _pipe_folder(mps_dir)
    environment = {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(log_dir),
    }
    with sigterm_as_interrupt() if sigterm_interrupts else contextlib.nullcontext():
        daemon: MpsDaemon | None = None
        try:
            daemon = _start(control, pipe_dir, log_dir, environment, start_timeout_s)
            yield daemon
        finally:
            with DeferredSignals():
                if daemon is None:
                    daemon = _started_anyway(control, pipe_dir, log_dir)
                clients = keep_running() if daemon is not None and keep_running else []
                if daemon is not None and clients:
                    left = (
                        f"MPS daemon (pid {daemon.pid}) left running for its clients (pids "
                        f"{', '.join(map(str, clients))})"
                    )
                    try:
                        keeper = hand_over(daemon, environment, clients, temporary)
                        left += f"; process {keeper} stops it once they have exited"
                    except OSError as error:  # running until someone quits it, as before
                        left += (
                            f"; nothing will stop it (the hand-over did not start: "
                            f"{error.strerror or error}): `echo quit | CUDA_MPS_PIPE_DIRECTORY="
                            f"{daemon.pipe_dir} nvidia-cuda-mps-control` once they are done"
                        )
                    if notes is not None:
                        notes.append(left)
                    daemon = None
                    temporary = None
                if daemon is not None:
                    stop_notes = stop(daemon, environment, stop_timeout_s)
                    if notes is not None:
                        notes.extend(stop_notes)
                if temporary is not None:
                    shutil.rmtree(temporary, ignore_errors=True)
