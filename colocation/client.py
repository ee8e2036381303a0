"""One co-located job: ``python -m colocation.client RUN_DIR CLIENT_NAME``.

Started by the runner, it first takes its slot in the GPU's daemon the way `orion run` does
(:func:`orion_daemon.joining.join`) and replaces itself with itself started in the environment
the daemon gave (orion's preload library in ``LD_PRELOAD``, its slot), so the daemon's claimer
and the client are one process. Then it builds its workload, puts all of its GPU work on one
stream of its own, warms up, says ``ready`` and waits for ``start`` (protocol in
:mod:`colocation.protocol`). Then it serves requests or runs training iterations inside the
measurement window and appends one table row per request or iteration.

Inference latency is measured from the request's *arrival*, not from when the client got to it:
with open-loop arrivals a request that waits behind earlier ones (because best-effort work slowed
the GPU) carries that wait, which is what a user of the service would see.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from colocation.protocol import (
    PROGRESS_INTERVAL_S,
    ClientSpec,
    Message,
    control_fds_from_environment,
    send,
    spec_path,
)
from colocation.rundir import INFERENCE_COLUMNS, TRAINING_COLUMNS
from orion_common.csv_table import CsvTable
from orion_common.errors import OrionError
from orion_common.process_log import error_lines, log_to
from orion_common.runclock import RunClock

_LOG = logging.getLogger(__name__)
"""A client's own lines (finished, orphaned, failed): ``main`` sends them to stderr, which the
runner reads; a client in a Ray actor sends them to the actor's stderr, Ray's log of it."""

# Idle waits sleep in slices this long, so a stop request or a progress report is never late.
_IDLE_SLICE_S = 0.05
# Past the window's end plus the drain time, a training client that heard nothing stops itself:
# the runner is hung, and the GPU should not stay busy for nobody.
_ORPHAN_GRACE_S = 60.0


class Commands:
    """The runner's commands, read on a thread so a busy client still hears ``stop`` at once."""

    def __init__(self, fd: int) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.start_message: Message = {}
        self._fd = fd
        threading.Thread(target=self._listen, name="orion-commands", daemon=True).start()

    def _listen(self) -> None:
        import json

        with os.fdopen(self._fd, "rb", buffering=0) as pipe:
            for line in iter(pipe.readline, b""):
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if message.get("type") == "start":
                    self.start_message = message
                    self.started.set()
                elif message.get("type") == "stop":
                    self.stopped.set()
        self.stopped.set()  # end of file: the runner is gone


class Events:
    """Messages to the runner; a vanished runner turns into a stop instead of a crash."""

    def __init__(self, fd: int, commands: Commands | None = None) -> None:
        self._fd = fd
        self.commands = commands
        self.broken = False

    def send(self, message: Message) -> None:
        if self.broken:
            return
        try:
            send(self._fd, message)
        except OSError:  # BrokenPipeError: nobody is listening any more
            self.broken = True
            if self.commands is not None:
                self.commands.stopped.set()


class Progress:
    """Counts and fresh latencies, sent about every half second; also paces table flushes."""

    def __init__(self, events: Events, table: CsvTable) -> None:
        self._events = events
        self._table = table
        self.done = 0
        self._latencies: list[float] = []
        self._last = time.monotonic()

    def record(self, latency_ms: float | None = None) -> None:
        self.done += 1
        if latency_ms is not None:
            self._latencies.append(round(latency_ms, 4))
        self.tick()

    def tick(self, force: bool = False) -> None:
        self._table.flush_if_due()
        if force or time.monotonic() - self._last >= PROGRESS_INTERVAL_S:
            self._last = time.monotonic()
            latencies, self._latencies = self._latencies, []
            self._events.send({"type": "progress", "done": self.done, "latencies_ms": latencies})


class Client:
    """The client's life: build, warm up, wait for start, measure, finish, wait for stop."""

    def __init__(self, spec: ClientSpec, run_dir: Path, commands: Commands, events: Events) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.commands = commands
        self.events = events
        self.clock = RunClock(spec.clock_origin_ns)
        self.unfinished = 0
        self.last_end_s: float | None = None
        self.arrivals_model: Any = None

    # -- set-up ---------------------------------------------------------------------------
    def _build(self) -> Any:
        from workloads import WorkloadSpec, build_workload

        spec = self.spec
        workload = build_workload(
            WorkloadSpec(
                name=spec.workload,
                mode=spec.mode,
                batch_size=spec.batch_size,
                dtype=spec.dtype,
                device=spec.device,
                options=dict(spec.options),
                cuda_graph=spec.cuda_graph,
            )
        )
        if workload.device.type == "cpu":
            import torch

            # CPU runs exist for tests; one thread each keeps clients from fighting over cores.
            torch.set_num_threads(1)
        return workload

    def _stream(self, workload: Any) -> tuple[contextlib.AbstractContextManager[Any], int | None]:
        """The client's own CUDA stream (highest priority when the policy says so), entered."""
        if workload.device.type != "cuda":
            return contextlib.nullcontext(), None
        import torch

        priority = 0
        if self.spec.stream_priority == "highest":
            priority = _highest_stream_priority(torch)
        stream = torch.cuda.Stream(device=workload.device, priority=priority)
        return torch.cuda.stream(stream), int(stream.priority)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> int:
        spec = self.spec
        began = time.monotonic()
        workload = self._build()
        if spec.mode == "infer":
            self.arrivals_model = _arrivals_model(spec, self.run_dir)
            import colocation.arrivals  # noqa: F401  (imported now, not at the window's start)
        stream_context, priority = self._stream(workload)
        with stream_context:
            warm = time.monotonic()
            workload.warmup(spec.warmup_steps)
            warmup_s = time.monotonic() - warm
            served = " as a CUDA graph" if spec.cuda_graph else ""
            _log(
                f"{spec.name}: {spec.workload} {spec.mode} batch {spec.batch_size} {spec.dtype}"
                f"{served} "
                f"on {workload.device}, stream priority {priority}, built in "
                f"{warm - began:.1f} s, {spec.warmup_steps} warm-up steps in {warmup_s:.2f} s"
            )
            self.events.send(
                {
                    "type": "ready",
                    "pid": os.getpid(),
                    "device": str(workload.device),
                    "stream_priority": priority,
                    "warmup_s": warmup_s,
                }
            )
            while not self.commands.started.wait(_IDLE_SLICE_S):
                if self.commands.stopped.is_set():
                    return 0
            start = self.commands.start_message
            window_start = float(start["window_start_s"])
            window_s = start.get("window_s")
            window_end = window_start + float(window_s) if window_s is not None else None
            columns = INFERENCE_COLUMNS if spec.mode == "infer" else TRAINING_COLUMNS
            with CsvTable(self.run_dir / spec.table, columns) as table:
                progress = Progress(self.events, table)
                if spec.mode == "infer":
                    self._serve(workload, table, progress, window_start, window_s)
                else:
                    self._train(workload, table, progress, window_start, window_end)
                progress.tick(force=True)
        self.events.send(
            {
                "type": "finished",
                "done": progress.done,
                "unfinished": self.unfinished,
                "last_end_s": self.last_end_s,
                # Data rows written to the table, recorded in run.json to detect a cut table.
                "rows": table.rows,
            }
        )
        _log(f"{spec.name}: finished, {progress.done} done, {self.unfinished} unfinished")
        self.commands.stopped.wait()
        return 0

    def _wait_until(self, when_s: float, progress: Progress) -> bool:
        """Idle until run-clock ``when_s``; False when told to stop first."""
        while True:
            if self.commands.stopped.is_set():
                return False
            remaining = when_s - self.clock.now()
            if remaining <= 0:
                return True
            if remaining > 0.02:  # sleep in slices; the last 10 ms precisely (sleep_until)
                time.sleep(min(remaining - 0.01, _IDLE_SLICE_S))
                progress.tick()
                continue
            self.clock.sleep_until(when_s)
            return True

    def _serve(
        self,
        workload: Any,
        table: CsvTable,
        progress: Progress,
        window_start: float,
        window_s: float | None,
    ) -> None:
        """Requests in arrival order until the schedule, the count or the window runs out."""
        spec = self.spec
        window_end = window_start + window_s if window_s is not None else None
        arrivals = _arrivals(spec, self.arrivals_model, window_start, window_s)
        closed_think_s = arrivals.think_s
        request = 0
        arrival = arrivals.first()
        while arrival is not None:
            if not self._wait_until(arrival, progress):
                self._give_up(
                    table, arrivals, request, arrival, upto=self.clock.now(), end=window_end
                )
                return
            if window_end is not None and self.clock.now() > window_end + spec.drain_s:
                self._give_up(table, arrivals, request, arrival, upto=window_end, end=window_end)
                return
            start = self.clock.now()
            cpu_start = time.thread_time()
            workload.step()
            enqueued = self.clock.now()
            enqueue_cpu_ms = (time.thread_time() - cpu_start) * 1000.0
            workload.synchronize()
            end = self.clock.now()
            latency_ms = (end - arrival) * 1000.0
            enqueue_ms = (enqueued - start) * 1000.0
            table.append((request, arrival, start, end, latency_ms, enqueue_ms, enqueue_cpu_ms))
            self.last_end_s = end
            in_window = arrival >= window_start and (window_end is None or arrival <= window_end)
            progress.record(latency_ms if in_window else None)
            request += 1
            if spec.requests is not None and request >= spec.requests:
                return
            if closed_think_s is not None:
                arrival = end + closed_think_s
                if window_end is not None and arrival > window_end:
                    return
            else:
                arrival = arrivals.next()

    def _give_up(
        self,
        table: CsvTable,
        arrivals: _Arrivals,
        request: int,
        arrival: float | None,
        *,
        upto: float,
        end: float | None,
    ) -> None:
        """Record requests that arrived (by ``upto``, inside the window) but were never served."""
        limit = upto if end is None else min(upto, end)
        while arrival is not None and arrival <= limit:
            table.append((request, arrival, None, None, None, None, None))
            self.unfinished += 1
            request += 1
            if arrivals.think_s is not None:
                break  # closed loop: only the one request was waiting
            arrival = arrivals.next()

    def _train(
        self,
        workload: Any,
        table: CsvTable,
        progress: Progress,
        window_start: float,
        window_end: float | None,
    ) -> None:
        """Back-to-back iterations from the window's start until told to stop.

        Iterations go on past the window's end until ``stop``, so that requests still being
        served then see the same competition as during the window; the report counts only
        iterations that ended inside the window.
        """
        if not self._wait_until(window_start, progress):
            return
        give_up_at = (
            window_end + self.spec.drain_s + _ORPHAN_GRACE_S if window_end is not None else None
        )
        samples = workload.samples_per_step
        iteration = 0
        while not self.commands.stopped.is_set():
            start = self.clock.now()
            if give_up_at is not None and start > give_up_at:
                _log(f"{self.spec.name}: no stop from the runner {_ORPHAN_GRACE_S:.0f} s after "
                     "the window; stopping")  # fmt: skip
                return
            workload.step()
            workload.synchronize()
            end = self.clock.now()
            table.append((iteration, start, end, (end - start) * 1000.0, samples))
            self.last_end_s = end
            progress.record()
            iteration += 1


class _Arrivals:
    """Arrival times on the run clock: a precomputed open-loop schedule, or closed loop."""

    def __init__(
        self, schedule: Iterator[float] | None, window_start: float, think_s: float | None
    ):
        self._schedule = schedule
        self._window_start = window_start
        self.think_s = think_s

    def first(self) -> float | None:
        return self._window_start if self._schedule is None else self.next()

    def next(self) -> float | None:
        if self._schedule is None:
            return None
        try:
            return self._window_start + next(self._schedule)
        except StopIteration:
            return None


def _arrivals_model(spec: ClientSpec, run_dir: Path) -> Any:
    """The validated arrivals model (done during warm-up: the imports take a while)."""
    from pydantic import TypeAdapter

    from colocation.arrivals import ArrivalsModel

    return TypeAdapter(ArrivalsModel).validate_python(
        spec.arrivals or {"kind": "closed"}, context={"base_dir": run_dir}
    )


def _arrivals(
    spec: ClientSpec, model: Any, window_start: float, window_s: float | None
) -> _Arrivals:
    from colocation.arrivals import ArrivalSchedule, is_open_loop

    if not is_open_loop(model):
        return _Arrivals(None, window_start, model.think_ms / 1000.0)
    schedule = ArrivalSchedule(model, spec.seed, count=spec.requests, horizon_s=window_s)
    return _Arrivals(schedule, window_start, None)


def _highest_stream_priority(torch: Any) -> int:
    """The numerically lowest (most urgent) priority torch will create a stream with."""
    try:
        least, greatest = torch.cuda.Stream.priority_range()
        return int(min(least, greatest))
    except Exception:
        return -(2**16)  # torch maps an out-of-range priority to the nearest valid one


def _log(text: str) -> None:
    _LOG.info(f"orion client {text}")


_JOINED = "--joined"
"""The argument of the client restarted in its daemon's environment (it joins no more)."""


def _join_and_restart(run_dir: Path, name: str, events: Events) -> None:
    """Takes the client's slot (``spec.join``) and replaces this process with the client in the
    environment the daemon returned; returns only when the spec says not to join."""
    spec = ClientSpec.read(spec_path(run_dir, name))
    if spec.join is None:
        return
    from orion_daemon.admission import JoinRequest
    from orion_daemon.joining import join, program_environment
    from orion_daemon.mps import with_sm_share

    joined = join(
        int(spec.join["gpu"]),
        JoinRequest.from_message(spec.join["request"]),
        Path(spec.join["state_dir"]),
    )
    events.send({"type": "joined", "slot": int(joined["ORION_CLIENT"])})
    environment = with_sm_share(program_environment(os.environ, joined), spec.sm_percent)
    sys.stdout.flush()
    sys.stderr.flush()
    # The control pipes are inheritable still: the restarted client keeps them.
    os.execve(
        sys.executable,
        [sys.executable, "-m", "colocation.client", str(run_dir), name, _JOINED],
        environment,
    )


def _failed(error: OrionError, events: Events) -> int:
    for line in error_lines(error):
        _LOG.error(line)
    events.send({"type": "error", "message": error.message})
    return 1


def main(argv: list[str] | None = None) -> int:
    log_to(sys.stderr, _LOG.name)  # the runner reads a client's stderr
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or args[2:] not in ([], [_JOINED]):
        _LOG.error("usage: python -m colocation.client RUN_DIR CLIENT_NAME")
        return 2
    run_dir, name = Path(args[0]), args[1]
    command_fd, event_fd = control_fds_from_environment()
    if _JOINED not in args:
        try:
            _join_and_restart(run_dir, name, Events(event_fd))
        except OrionError as exc:
            return _failed(exc, Events(event_fd))
    for fd in (command_fd, event_fd):
        os.set_inheritable(fd, False)  # not for the workload's own subprocesses
    commands = Commands(command_fd)
    events = Events(event_fd, commands)
    try:
        spec = ClientSpec.read(spec_path(run_dir, name))
        return Client(spec, run_dir, commands, events).run()
    except OrionError as exc:
        return _failed(exc, events)
    except Exception as exc:
        traceback.print_exc()
        events.send({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
