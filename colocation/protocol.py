"""What the runner and a client process tell each other, and the spec a client is started with.

A client's stdout belongs to its workload (libraries print), so the control channel is a pair of
private pipes the runner hands over with ``pass_fds``; their numbers travel in
``ORION_CONTROL_FDS`` (``"<commands-in>,<events-out>"``). Messages are JSON objects, one per
line:

client -> runner (events)
    ``joined``    the daemon gave the client its slot: ``slot`` (before the workload is built)
    ``ready``     warm-up done: ``pid``, ``device``, ``stream_priority``, ``warmup_s``
    ``progress``  about every 0.5 s: ``done`` (requests or iterations so far) and ``latencies_ms``
                  (requests that arrived inside the window and finished since the last message)
    ``finished``  nothing more to do: ``done``, ``unfinished``, ``last_end_s``
    ``error``     a one-line ``message`` just before the client exits with status 1

runner -> client (commands)
    ``start``     ``window_start_s`` and ``window_end_s`` on the run clock, and the window's
                  length ``window_s`` (end and length are ``null`` in requests mode)
    ``stop``      finish the current step, write out the table and exit

End of file on the command pipe means the runner is gone: the client stops as for ``stop``, so a
killed runner never leaves clients running on the GPU.
"""

from __future__ import annotations

import json
import os
import select
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError

CONTROL_FDS_ENV = "ORION_CONTROL_FDS"
SPEC_FORMAT = "orion-client-spec"
SPEC_VERSION = 1
PROGRESS_INTERVAL_S = 0.5

Message = dict[str, Any]


@dataclass(frozen=True)
class ClientSpec:
    """Everything a client process needs, written by the runner to ``clients/<name>.spec.json``.

    A file rather than command-line arguments: it is the exact record of what the client was
    asked to do, kept in the run directory for anyone re-checking a result.
    """

    name: str
    role: Literal["hp", "be"]
    workload: str
    mode: Literal["infer", "train"]
    batch_size: int
    dtype: str
    device: str
    table: str
    clock_origin_ns: int
    seed: int
    warmup_steps: int
    stream_priority: Literal["highest", "default"] = "default"
    arrivals: dict[str, Any] | None = None
    requests: int | None = None
    """Requests to serve, then finish (the HP client in ``run.requests`` mode)."""
    drain_s: float = 5.0
    """After the window ends, how long requests that arrived inside it may still be served;
    the rest are recorded as unfinished, so an overloaded client shows up as such."""
    options: dict[str, Any] = field(default_factory=dict)
    cuda_graph: bool = False
    """Serve inference by replaying the step captured as a CUDA graph."""
    sm_percent: int | None = None
    """The client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (policy ``mps-share``), set in its
    environment when it joins."""
    join: dict[str, Any] | None = None
    """How the client takes its slot in the GPU's daemon: ``gpu``, ``state_dir`` and
    ``request`` (the fields of :class:`orion_daemon.admission.JoinRequest`); None: it runs
    without joining (tests of the client alone)."""

    def write(self, path: Path) -> None:
        write_json_atomic(path, {"format": SPEC_FORMAT, "version": SPEC_VERSION, **asdict(self)})

    @classmethod
    def read(cls, path: Path) -> ClientSpec:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OrionError(f"cannot read client spec {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != SPEC_FORMAT:
            raise OrionError(f"{path} is not an orion client spec")
        if data.get("version") != SPEC_VERSION:
            raise OrionError(f"{path}: client spec version {data.get('version')!r} is not 1")
        data.pop("format")
        data.pop("version")
        try:
            return cls(**data)
        except TypeError as exc:
            raise OrionError(f"{path}: {exc}") from None


def spec_path(run_dir: Path, name: str) -> Path:
    return run_dir / "clients" / f"{name}.spec.json"


def encode(message: Message) -> bytes:
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()


def send(fd: int, message: Message) -> None:
    """Write one message whole (pipes may take a large one in pieces)."""
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


class LineReader:
    """Messages from a non-blocking pipe, as they arrive; tolerates lines split across reads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.eof = False
        self._buffer = b""
        os.set_blocking(fd, False)

    def read(self) -> list[Message]:
        """Every complete message available now (never blocks); sets ``eof`` at end of file."""
        messages: list[Message] = []
        while not self.eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours; the protocol never writes a partial line
            if isinstance(message, dict) and isinstance(message.get("type"), str):
                messages.append(message)
        return messages

    def wait(self, timeout_s: float) -> list[Message]:
        """Like :meth:`read`, waiting up to ``timeout_s`` for something to arrive."""
        if not self.eof:
            select.select([self.fd], [], [], max(0.0, timeout_s))
        return self.read()


def control_fds_from_environment() -> tuple[int, int]:
    """The (commands-in, events-out) descriptors the runner passed to this client."""
    raw = os.environ.get(CONTROL_FDS_ENV, "")
    try:
        command_fd, event_fd = (int(part) for part in raw.split(","))
    except ValueError:
        raise OrionError(
            f"{CONTROL_FDS_ENV} is {raw!r}; a client is started by `orion colocate`, "
            "which passes its control pipes"
        ) from None
    return command_fd, event_fd
