"""One job of a plan, run by a Ray actor: the colocation client, hosted in the actor.

`orion colocate` runs each job as a ``colocation.client`` process and talks to it over pipes
(``ready``, ``start``, ``stop``, progress and ``finished`` messages). On Ray the job is an actor
under its role (``orion.ray.runtime_env``), and the very same :class:`colocation.client.Client`
runs inside it on a thread, its commands set and its messages collected by the actor's methods,
which the plan's driver calls instead of writing to pipes. So a job measures exactly what it
measures under `orion colocate`, into the same table, whose text the driver fetches at the end.

The actor joins its GPU's daemon before it builds anything (``orion_join_now``): a refused join
ends the actor with the library's one line in its log (status 75) instead of failing later
inside the workload, and a job that never touches the GPU (tests on CPU) still joins.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_common.process_log import log_to


class _Commands:
    """What :class:`colocation.client.Commands` offers the client, set by method calls."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.start_message: dict[str, Any] = {}


class _Events:
    """What :class:`colocation.client.Events` offers the client: messages kept for the driver."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._messages.append(dict(message))

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            messages, self._messages = self._messages, []
        return messages


def join_now() -> dict[str, Any]:
    """Joins this process's GPU daemon now (the preload library's ``orion_join_now``); what the
    process then runs with. Raises when the library is not loaded: the job would run ungated."""
    try:
        join = ctypes.CDLL(None).orion_join_now
    except AttributeError:
        raise OrionError(
            "orion's preload library is not loaded in this actor (its runtime_env lacks "
            "orion.ray.runtime_env's LD_PRELOAD)"
        ) from None
    join.restype = ctypes.c_int
    attached = bool(join())
    return {
        "attached": attached,
        "pid": os.getpid(),
        # The library set these with setenv, which Python's os.environ (a copy) does not see.
        "cuda_visible_devices": _getenv("CUDA_VISIBLE_DEVICES"),
        "orion_run": _getenv("ORION_RUN"),
        "orion_client": _getenv("ORION_CLIENT"),
    }


def _getenv(name: str) -> str | None:
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    value = getenv(name.encode())
    return None if value is None else value.decode()


class JobHost:
    """A plan job inside a Ray actor (made remote by :mod:`orion.ray.plan`).

    ``spec`` holds :class:`colocation.protocol.ClientSpec`'s fields but ``clock_origin_ns``,
    which :meth:`begin` gives: the run clock of every job on one GPU is its node's monotonic
    clock from one origin, taken on that node.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = dict(spec)
        self.commands = _Commands()
        self.events = _Events()
        self.thread: threading.Thread | None = None
        self.exit_code: int | None = None
        self.error: str | None = None
        self.folder = Path(tempfile.mkdtemp(prefix=f"orion-job-{spec['name']}-"))
        (self.folder / "clients").mkdir()
        self.joined = join_now()

    def where(self) -> dict[str, Any]:
        """Where Ray put this job and what it joined (node, GPU, slot)."""
        import ray

        context = ray.get_runtime_context()
        return {**self.joined, "node_id": context.get_node_id(), "gpu_ids": ray.get_gpu_ids()}

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def begin(self, clock_origin_ns: int) -> None:
        """Builds the workload and warms it up on a thread; ``ready`` comes as a message."""
        from colocation.protocol import ClientSpec

        spec = ClientSpec(**{**self.spec, "clock_origin_ns": clock_origin_ns})
        self.thread = threading.Thread(target=self._run, args=(spec,), daemon=True)
        self.thread.start()

    def _run(self, spec: Any) -> None:
        log_to(sys.stderr, "colocation.client")  # as a client process: its lines on stderr
        try:
            client = self.client_class()(spec, self.folder, self.commands, self.events)
            self.exit_code = client.run()
        except OrionError as error:
            self.error, self.exit_code = error.message, 1
        except Exception as error:  # the job's own failure, told to the driver, not raised
            self.error, self.exit_code = f"{type(error).__name__}: {error}", 1
        if self.error is not None:
            self.events.send({"type": "error", "message": self.error})

    def client_class(self) -> type:
        """The client that runs the job: colocation's (tests give one with a tiny workload)."""
        from colocation.client import Client

        return Client

    def messages(self) -> list[dict[str, Any]]:
        """The client's messages since the last call."""
        return self.events.take()

    def now_s(self, clock_origin_ns: int) -> float:
        """Now on the run clock of origin ``clock_origin_ns``."""
        return (time.monotonic_ns() - clock_origin_ns) / 1e9

    def start(self, window_start_s: float, window_s: float | None) -> None:
        end = None if window_s is None else window_start_s + window_s
        self.commands.start_message = {
            "type": "start",
            "window_start_s": window_start_s,
            "window_end_s": end,
            "window_s": window_s,
        }
        self.commands.started.set()

    def stop(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Stops the job and waits for it; its table's text and how it ended."""
        self.commands.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout_s)
        table = self.folder / "clients" / f"{self.spec['name']}.csv"
        return {
            "exit_code": None
            if self.thread is not None and self.thread.is_alive()
            else self.exit_code,
            "error": self.error,
            "table": table.read_text() if table.is_file() else None,
            "messages": self.events.take(),
        }


STAND_IN_STEP_S = 0.002
"""How long a stand-in job's step sleeps."""


class _SleepWorkload:
    """The workload API colocation's client drives (``workloads.base``), sleeping a step."""

    def __init__(self, batch_size: int) -> None:
        from types import SimpleNamespace

        self.device = SimpleNamespace(type="cpu")
        self.samples_per_step = batch_size

    def warmup(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> None:
        time.sleep(STAND_IN_STEP_S)

    def synchronize(self) -> None:
        pass


def _stand_in_client() -> type:
    from colocation.client import Client

    class StandInClient(Client):
        def _build(self) -> _SleepWorkload:
            return _SleepWorkload(self.spec.batch_size)

    return StandInClient


class StandInJobHost(JobHost):
    """A job host whose jobs sleep instead of running their model, for machines without a GPU
    (orion stand-in GPUs: the Ray tests, the device scripts' ``--stand-in``): a plan's jobs warm
    up in milliseconds, join their daemons and record real tables; their figures mean nothing."""

    def client_class(self) -> type:
        return _stand_in_client()
