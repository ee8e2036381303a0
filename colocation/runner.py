"""``orion colocate``: run the clients of a jobs config under one sharing policy, record it all.

The order matters and is fixed: check every prerequisite (:mod:`colocation.preflight`), create
the run directory, start the GPU's daemon for the run or take the running one
(:mod:`colocation.gpu_daemon`: the shared state, the gate keeper, the MPS daemon under MPS
policies) and have it record the run's clients into the run directory, start the GPU monitor,
then start the clients, each of which joins the daemon as `orion run` does (the HP client
first, so the BE queue bound it sets holds from the first BE launch), wait until all have warmed
up, and give them one common measurement window starting half a second later. Under
``dedicated`` each client runs alone, one after another, each in its own window of the same
length.

However the run ends (the window is over, a client crashes, Ctrl-C, SIGTERM, ``stop_event``,
the daemon stopping under it), the clients are stopped first (they hold the GPU and the MPS
server), then the monitor goes, the daemon writes the run's last records and, if the run
started it, stops (MPS and the shared memory with it), and ``run.json`` gets its final state:
``complete``, ``incomplete`` (interrupted) or ``failed`` (every client failed). An interrupt is
re-raised as ``KeyboardInterrupt`` afterwards, so callers still see it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from colocation.arrivals import derive_seed
from colocation.config import JobsConfig
from colocation.gpu_daemon import RunDaemon, run_daemon
from colocation.gpu_monitor import GpuMonitor
from colocation.preflight import RunPlan, prepare_run
from colocation.processes import FINISHED, READY, RUNNING, WAITING, WARMING_UP, ClientProcess
from colocation.protocol import ClientSpec, spec_path
from colocation.rundir import (
    STATUS_COMPLETE,
    STATUS_FAILED,
    RunRecord,
    client_entry,
    create_run_dir,
)
from orion_common import run_format
from orion_common.csv_table import table_rows
from orion_common.errors import OrionError
from orion_common.runclock import RunClock
from orion_daemon.joining import ungated_environment
from orion_daemon.signals import DeferredSignals, sigterm_as_interrupt

START_DELAY_S = 0.5
"""Between the last client becoming ready and the window's start: every client has the start
message well before it, so all begin at the same instant."""
DRAIN_S = 5.0
"""After the window, how long inference clients may still serve requests that arrived in it."""
_DRAIN_GRACE_S = 5.0
_TICK_S = 0.1
_PROGRESS_INTERVAL_S = 0.5


def client_spec(
    config: JobsConfig, client: Any, *, device: str, clock_origin_ns: int, **extra: Any
) -> ClientSpec:
    """What a client process of ``config`` is told to run (its spec file), wherever it runs:
    `orion colocate`'s processes and jobs on Ray alike. ``extra``: the fields only one of them
    sets (a local run's request count, SM share and daemon join)."""
    run = config.run
    highest = config.policy.hp_stream_priority_by_client and client.is_hp
    return ClientSpec(
        name=client.name,
        role=client.role,
        workload=client.workload,
        mode=client.mode,
        batch_size=client.batch_size,
        dtype=client.dtype,
        device=device,
        table=run_format.client_table(client.name),
        clock_origin_ns=clock_origin_ns,
        seed=derive_seed(run.seed, client.name),
        warmup_steps=run.warmup_steps,
        stream_priority="highest" if highest else "default",
        arrivals=client.arrivals.model_dump(mode="json") if client.arrivals else None,
        drain_s=DRAIN_S,
        options=dict(client.options),
        cuda_graph=client.cuda_graph,
        **extra,
    )


@dataclass(frozen=True)
class ClientProgress:
    """One client, as the live view shows it."""

    name: str
    role: str
    mode: str
    state: str
    pid: int | None
    done: int
    """Requests served or iterations run so far."""
    error: str | None


@dataclass(frozen=True)
class RunProgress:
    """The run so far, reported about every half second."""

    run_dir: Path
    policy: str
    phase: int
    """1-based; ``dedicated`` runs one phase per client, other policies one in all."""
    phases: int
    state: str
    """``starting``, ``warming up``, ``measuring``, ``draining`` or ``stopping``."""
    elapsed_s: float | None
    """Seconds since the current window started (``None`` before it)."""
    remaining_s: float | None
    """Seconds to the window's end (``None`` when unknown: before it, or in requests mode)."""
    clients: tuple[ClientProgress, ...]
    hp_requests: int
    """HP requests that arrived inside the window and finished, so far."""
    hp_p50_ms: float | None
    hp_p99_ms: float | None
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended and where its record is."""

    run_dir: Path
    status: str
    warnings: tuple[str, ...]
    failed_clients: tuple[str, ...]


ProgressCallback = Callable[[RunProgress], None]


def run_jobs(
    run: JobsConfig | RunPlan,
    *,
    progress: ProgressCallback | None = None,
    stop_event: threading.Event | None = None,
    ready_timeout_s: float = 600.0,
    stop_timeout_s: float = 30.0,
) -> RunOutcome:
    """Run a jobs config and record it in a new run directory under ``run.output_dir``.

    ``run`` is the config, checked here by :func:`colocation.preflight.prepare_run` (any refusal
    happens before anything is created), or that function's result when the caller already made
    it (to show its warnings first). ``progress`` is called about every 0.5 s from this thread;
    an exception it raises ends the run like Ctrl-C does. Setting ``stop_event`` stops the run
    early (``incomplete``), as Ctrl-C and SIGTERM do; all three re-raise ``KeyboardInterrupt``.
    """
    plan = run if isinstance(run, RunPlan) else prepare_run(run)
    return _Runner(plan, progress, stop_event, ready_timeout_s, stop_timeout_s).run()


class _Runner:
    """One run's moving parts; lives for one :func:`run_jobs` call."""

    def __init__(
        self,
        plan: RunPlan,
        progress: ProgressCallback | None,
        stop_event: threading.Event | None,
        ready_timeout_s: float,
        stop_timeout_s: float,
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.policy = plan.policy
        self.progress = progress
        self.stop_event = stop_event
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.clients: list[ClientProcess] = []
        self.stack = contextlib.ExitStack()
        self.daemon: RunDaemon | None = None
        self.device = plan.device
        self.monitor: GpuMonitor | None = None
        self.daemon_notes: list[str] = []
        self.phase = 0
        self.phases = 1
        self.state = "starting"
        self.window: tuple[float, float | None] | None = None
        self._closing = False
        self._last_progress = 0.0

    # -- the whole run --------------------------------------------------------------------
    def run(self) -> RunOutcome:
        with sigterm_as_interrupt():
            self.run_dir = create_run_dir(self.config.run.output_dir, self.policy.name)
            self.clock = RunClock.starting_now()
            self.record = RunRecord.begin(
                self.run_dir,
                policy=self.policy.name,
                config=self.config.to_json_dict(),
                environment={**self.plan.environment, "client_device": self.plan.device},
                clients=[self._entry(client) for client in self.config.clients],
                warnings=self.plan.warnings,
            )
            with self.record:  # leaving by an exception marks the run incomplete
                try:
                    self._set_up()
                    self._emit(force=True)
                    self._run_phases()
                finally:
                    with DeferredSignals():
                        self._tear_down()
                return self._finish()

    def _entry(self, client: Any) -> dict[str, Any]:
        """The client's first run.json entry; the changing fields are filled in as it runs."""
        return client_entry(
            client,
            seed=derive_seed(self.config.run.seed, client.name),
            profile=self.plan.profile_paths.get(client.name),
            table=f"clients/{client.name}.csv",
            log=f"logs/{client.name}.log",
        )

    def _set_up(self) -> None:
        self.daemon = self.stack.enter_context(
            run_daemon(self.plan.daemon, self.run_dir, self.daemon_notes)
        )
        self.device = self.daemon.client_device(self.plan.device)
        for client in self.config.clients:
            self.clients.append(ClientProcess(client, self.run_dir))
            self._spec(client).write(spec_path(self.run_dir, client.name))
        # Which daemon holds the live run's clients, for `orion quota` (and the run clock's origin).
        self.record.data["scheduler"] = self.daemon.scheduler_entry(self.clock.origin_ns)
        mps = self.daemon.record.get("mps")
        if mps is not None:
            self.record.data["mps"] = mps
        self.record.save()
        self.daemon.start_recording(
            self.run_dir,
            [client.name for client in self.config.clients],
            self.clock.origin_ns,
            trace=self.plan.daemon.settings.trace,
        )
        self.stack.callback(self._end_recording)  # before the daemon stops
        self.monitor = GpuMonitor(self.run_dir / "gpu.csv", self.clock, self.config.run.gpu)
        if not self.monitor.start() and self.monitor.note:
            self.record.note(self.monitor.note)
        self.stack.callback(self.monitor.stop)
        self.phases = len(self._phase_plan())
        self.record.save()

    def _end_recording(self) -> None:
        """The run's last records (trace, statistics, samples), written by the daemon now."""
        assert self.daemon is not None
        try:
            self.daemon.end_recording(self.run_dir)
        except OrionError as error:  # the daemon is gone: what it wrote so far stays
            self.record.note(f"the daemon did not write the run's last records: {error.message}")

    def _join(self, client: Any) -> dict[str, Any]:
        """The client's join (spec.join): the request the plan checked, with its command line
        (what the daemon's clients.csv and `orion status` show)."""
        assert self.daemon is not None
        request = next(r for r in self.plan.daemon.clients if r.name == client.name)
        command = [sys.executable, "-m", "colocation.client", str(self.run_dir), client.name]
        return {
            "gpu": self.daemon.gpu,
            "state_dir": str(self.daemon.folder),
            "request": dataclasses.asdict(dataclasses.replace(request, command=command)),
        }

    def _spec(self, client: Any) -> ClientSpec:
        return client_spec(
            self.config,
            client,
            device=self.device,
            clock_origin_ns=self.clock.origin_ns,
            requests=self.config.run.requests if client.is_hp else None,
            sm_percent=client.sm_percent,
            join=self._join(client),
        )

    def _phase_plan(self) -> list[list[ClientProcess]]:
        """Which clients run together: all at once, or (``dedicated``) one after another."""
        if not self.policy.sequential:
            return [list(self.clients)]
        # HP first: in requests mode its measured time sets the others' window length
        return [[client] for client in sorted(self.clients, key=lambda c: not c.config.is_hp)]

    def _run_phases(self) -> None:
        phases = self._phase_plan()
        requests_mode = self.config.run.requests is not None
        length = self.config.run.duration_s
        for number, phase in enumerate(phases, start=1):
            self.phase = number
            hp = next((c for c in phase if c.config.is_hp), None)
            if requests_mode and hp is None:
                if length is None:
                    for client in phase:
                        client.fail("not run: the HP client measured no time span to match")
                    continue
                self._run_phase(phase, length, None)
            else:
                self._run_phase(
                    phase, None if requests_mode else length, hp if requests_mode else None
                )
            if requests_mode and hp is not None:
                start, end = hp.window_start_s, hp.window_end_s
                length = end - start if start is not None and end is not None else None

    def _run_phase(
        self, phase: list[ClientProcess], length: float | None, requests_hp: ClientProcess | None
    ) -> None:
        """Start ``phase``'s clients, measure one common window, stop them.

        ``length`` is the window in seconds; ``None`` with ``requests_hp``: the window lasts
        until that client has served its requests (``run.requests``).
        """
        self.state = "warming up"
        self.window = None
        deadline = time.monotonic() + self.ready_timeout_s
        self._spawn(phase, deadline)
        while any(c.state == WARMING_UP for c in phase):
            self._tick(phase)
            if time.monotonic() >= deadline:
                for client in phase:
                    if client.state == WARMING_UP:
                        client.fail(f"not ready after {self.ready_timeout_s:.0f} s of warm-up")
                break
        ready = [c for c in phase if c.state == READY]
        if not ready or (requests_hp is not None and requests_hp not in ready):
            if requests_hp is not None and ready:
                self.record.note("the HP client failed before the start: nothing was measured")
            self._stop_phase(phase)
            return

        start = self.clock.now() + START_DELAY_S
        end = start + length if length is not None else None
        for client in ready:
            client.start(start, length)
        self.window = (start, end)
        self.state = "measuring"
        self._save()
        while any(c.alive for c in phase):
            self._tick(phase)
            if requests_hp is not None:
                if requests_hp.state == FINISHED or not requests_hp.alive:
                    break
                continue
            now = self.clock.now()
            if end is not None and now >= end:
                self.state = "draining"
                serving = [
                    c for c in phase if c.alive and c.config.mode == "infer" and c.state == RUNNING
                ]
                if not serving or now >= end + DRAIN_S + _DRAIN_GRACE_S:
                    break
        if requests_hp is not None:
            last = requests_hp.finished_info.get("last_end_s")
            measured_end = float(last) if last is not None else self.clock.now()
            for client in ready:
                client.window_end_s = measured_end
            self.window = (start, measured_end)
        self._stop_phase(phase)

    def _spawn(self, phase: list[ClientProcess], deadline: float) -> None:
        """Start ``phase``'s clients, the HP client first: the others start once it has its slot
        (or has failed), so that the BE queue bound its join sets is in place when they attach.
        Each joins the daemon itself; it inherits no join of this process."""
        base = ungated_environment(os.environ)
        hp = [c for c in phase if c.config.is_hp]
        for client in hp:
            client.spawn(base)
        self._save()  # pids, so an operator can find (and kill) a client right away
        while any(c.alive and c.slot is None for c in hp) and time.monotonic() < deadline:
            self._tick(phase)
        for client in phase:
            if client not in hp:
                client.spawn(base)
        self._save()

    def _stop_phase(self, phase: list[ClientProcess]) -> None:
        """Stop every client of ``phase``: ask, wait, then kill what is left."""
        self.state = "stopping"
        for client in phase:
            if not client.alive:
                continue
            client.stop()
            if client.state in (WARMING_UP, WAITING, READY):
                # it measured nothing, so nothing is lost by not waiting for its warm-up
                client.fail("stopped before the measurement started")
                client.kill()
        deadline = time.monotonic() + self.stop_timeout_s
        while any(c.alive for c in phase) and time.monotonic() < deadline:
            self._tick(phase, check_stop=False)
        for client in phase:
            if client.alive:
                client.fail(f"did not exit within {self.stop_timeout_s:.0f} s of stop; killed")
                client.kill()
                client.wait(5.0)
        self._save()

    # -- while running --------------------------------------------------------------------
    def _tick(self, phase: list[ClientProcess], *, check_stop: bool = True) -> None:
        """Wait a little for messages, then handle them, ended clients, trace and progress."""
        if check_stop and self.stop_event is not None and self.stop_event.is_set():
            raise KeyboardInterrupt("stop requested")
        fds = [c.reader.fd for c in phase if c.reader is not None and not c.reader.eof]
        if fds:
            select.select(fds, [], [], _TICK_S)
        else:
            time.sleep(_TICK_S)
        for client in self.clients:
            was_alive = client.alive
            client.poll()
            if was_alive and not client.alive:
                self._save()
        if check_stop and self.daemon is not None:
            self.daemon.check()  # gone: the clients run ungated, the measurement is spoilt
        self._emit()

    def _emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress is None or self._closing:
            return  # never during tear-down: a callback that raised once may raise again
        if not force and now - self._last_progress < _PROGRESS_INTERVAL_S:
            return
        self._last_progress = now
        self.progress(self._snapshot())

    def _snapshot(self) -> RunProgress:
        elapsed = remaining = None
        if self.window is not None:
            now = self.clock.now()
            elapsed = now - self.window[0]
            if self.window[1] is not None:
                remaining = max(0.0, self.window[1] - now)
        hp = next((c for c in self.clients if c.config.is_hp), None)
        latencies = np.asarray(hp.latencies_ms if hp is not None else [], dtype=float)
        p50 = p99 = None
        if latencies.size:
            p50, p99 = (float(v) for v in np.percentile(latencies, [50, 99]))
        return RunProgress(
            run_dir=self.run_dir,
            policy=self.policy.name,
            phase=self.phase,
            phases=self.phases,
            state=self.state,
            elapsed_s=elapsed,
            remaining_s=remaining,
            clients=tuple(
                ClientProgress(
                    name=c.name,
                    role=c.config.role,
                    mode=c.config.mode,
                    state=c.state,
                    pid=c.pid,
                    done=c.done,
                    error=c.error,
                )
                for c in self.clients
            ),
            hp_requests=int(latencies.size),
            hp_p50_ms=p50,
            hp_p99_ms=p99,
            warnings=self.plan.warnings,
        )

    def _save(self) -> None:
        for client in self.clients:
            self.record.client(client.name).update(client.record())
        starts = [c.window_start_s for c in self.clients if c.window_start_s is not None]
        ends = [c.window_end_s for c in self.clients if c.window_end_s is not None]
        self.record.data["measure_start_s"] = min(starts) if starts else None
        self.record.data["measure_end_s"] = max(ends) if ends else None
        self.record.save()

    # -- the end --------------------------------------------------------------------------
    def _tear_down(self) -> None:
        """Clients first (they hold the GPU and the MPS server), then everything else."""
        self._closing = True
        try:
            alive = [c for c in self.clients if c.alive]
            if alive:
                self._stop_phase(alive)
        finally:
            try:
                self.stack.close()  # GPU monitor, the run's last records, the run's daemon
            finally:
                for client in self.clients:
                    client.close_pipes()
                if self.monitor is not None and self.monitor.note:
                    self.record.note(self.monitor.note)
                if self.monitor is not None and self.monitor.clock_note:
                    self.record.note(self.monitor.clock_note)
                for note in self.daemon_notes:
                    self.record.note(note)
                self._record_table_rows()
                self._save()

    def _record_table_rows(self) -> None:
        """Every table is closed now: record the rows each holds, so a reader sees a cut one."""
        rows: dict[str, int] = {}
        for client in self.clients:
            entry = self.record.client(client.name)
            table = str(entry.get("table") or run_format.client_table(client.name))
            path = self.run_dir / table
            if path.is_file():
                reported = client.finished_info.get("rows")
                known = reported if isinstance(reported, int) and reported >= 0 else None
                rows[table] = table_rows(path, known)
        for table in (run_format.GPU_TABLE, run_format.TRACE_TABLE):
            path = self.run_dir / table
            if path.is_file():
                rows[table] = table_rows(path)
        self.record.record_table_rows(rows)

    def _finish(self) -> RunOutcome:
        failed = tuple(c.name for c in self.clients if c.failed)
        status = STATUS_FAILED if len(failed) == len(self.clients) else STATUS_COMPLETE
        self.record.finish(status)
        return RunOutcome(self.run_dir, status, self.plan.warnings, failed)
