"""The preload library's statistics and trace, copied out of a daemon's shared state.

Both live in the shared memory, and the daemon gives a client's slot back (statistics, trace
and all) as soon as its process is gone; the trace is a ring per client that overwrites itself.
So the recorder copies the trace out every half second, rewrites ``scheduler.json`` as it goes
and, before a slot is given back, takes the client's last trace records and final statistics
(:meth:`SchedulerRecorder.client_gone`): even an interrupted run keeps what the scheduler saw.

One recorder writes the daemon's own records in its state folder (every client); a run asks for
one of its own (:class:`Recordings`), which writes the run's clients only, on the run's clock,
into the run directory (the run-directory formats of ``orion_common.run_format``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orion_common import run_format
from orion_common.atomic_io import write_json_atomic
from orion_common.csv_table import CsvTable
from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_common.runclock import RunClock
from scheduler_core.shares import NO_CAP, NO_PROMISE


class SchedulerRecorder:
    """Writes ``scheduler.json``, ``memory.csv``, ``shares.csv`` (with GPU-time shares) and,
    when tracing, ``trace.csv`` from a ``SchedulerRun``: for every client, or the ``names``."""

    def __init__(
        self,
        scheduler: Any,
        folder: Path,
        clock: RunClock,
        *,
        names: Collection[str] | None = None,
        trace: bool = True,
    ) -> None:
        self._scheduler = scheduler
        self._clock = clock
        self._names = None if names is None else frozenset(names)
        self._stats_path = folder / "scheduler.json"
        self._departed: dict[str, dict[str, Any]] = {}
        self._lost = 0
        self._trace: CsvTable | None = None
        if trace and scheduler.settings.trace_capacity:
            self._trace = CsvTable(
                folder / run_format.TRACE_TABLE, run_format.column_names(run_format.TRACE_COLUMNS)
            )
        self._memory = CsvTable(
            folder / run_format.MEMORY_TABLE, run_format.column_names(run_format.MEMORY_COLUMNS)
        )
        settings = scheduler.settings
        self._shares: CsvTable | None = None
        if getattr(settings, "quotas", False) or settings.policy == "quota":
            self._shares = CsvTable(
                folder / run_format.SHARES_TABLE,
                run_format.column_names(run_format.SHARE_COLUMNS),
            )

    def _slots(self) -> dict[int, str]:
        """The recorded clients holding a slot now, by slot."""
        return {
            slot: name
            for slot, name in self._scheduler.client_indices().items()
            if self._names is None or name in self._names
        }

    def _seconds(self, value: Any) -> float | None:
        return self._clock.seconds(int(value)) if value else None

    def drain_trace(self, slots: Collection[int] | None = None) -> int:
        """Append the launches recorded since the last call (of ``slots``; None: every recorded
        client); returns how many."""
        if self._trace is None:
            return 0
        records = self._scheduler.drain_trace(list(self._slots() if slots is None else slots))
        self._lost += int(records.attrs.get("records_lost", 0))
        for row in records.itertuples(index=False):
            self._trace.append(
                (
                    str(row.client),
                    int(row.seq),  # the library's record number: gaps are lost records
                    str(row.kernel_name),
                    str(row.kernel_class),
                    int(row.sm_needed),
                    int(row.duration_ns),
                    self._seconds(row.enqueue_ns),
                    self._seconds(row.launch_ns),
                    str(row.reason),
                )
            )
        self._trace.flush()
        return len(records)

    def sample_memory(self) -> None:
        """Append each client's GPU memory in use and its limit now (memory.csv), and in runs
        with GPU-time shares its share of the last window (shares.csv)."""
        now = self._clock.now()
        for slot, client in self._slots().items():
            stats = self._scheduler.client_stats(slot)
            if self._shares is not None:
                self._shares.append(
                    (
                        round(now, 6),
                        client,
                        round(float(stats.get("gpu_share", 0.0)), 6),
                        float(stats.get("min_util", NO_PROMISE)),
                        float(stats.get("max_util", NO_CAP)),
                    )
                )
            limit = stats.get("memory_limit") or None
            self._memory.append(
                (
                    round(now, 6),
                    client,
                    int(stats.get("memory_used", 0)),
                    limit,
                    int(stats.get("allocations_refused", 0)),
                )
            )
        self._memory.flush()
        if self._shares is not None:
            self._shares.flush()

    def client_gone(self, slot: int) -> None:
        """The client in ``slot`` is gone and its slot is about to be given back: copy out its
        last trace records and keep its final statistics for ``scheduler.json``."""
        name = self._slots().get(slot)
        if name is None:
            return
        self.drain_trace([slot])
        self._departed[name] = self._scheduler.client_stats(slot)

    def write_stats(self) -> None:
        clients = dict(self._departed)
        clients.update({name: self._scheduler.client_stats(s) for s, name in self._slots().items()})
        data: dict[str, Any] = {
            "clients": clients,
            "settings": dataclasses.asdict(self._scheduler.settings),
        }
        if self._trace is not None:
            data["trace_records_lost"] = self._lost
        if self._scheduler.settings.holds_be_on_gpu:
            # How often the controller's keeper opened and closed BE gates (HP closes are not
            # counted: every HP launch closes them).
            data["gate_keeper"] = self._scheduler.gate_stats()
        write_json_atomic(self._stats_path, data)

    def close(self) -> None:
        """Copy out the last trace records and statistics (before the shared state goes)."""
        self.drain_trace()
        self.sample_memory()
        self.write_stats()
        if self._trace is not None:
            self._trace.close()
        self._memory.close()
        if self._shares is not None:
            self._shares.close()


@dataclass
class Recording:
    """A run's records, kept by the daemon: its clients' names, its folder, who asked."""

    folder: Path
    names: frozenset[str]
    owner_pid: int
    recorder: SchedulerRecorder


class Recordings:
    """The runs a daemon records for (the ``record`` and ``record_end`` requests).

    A run names its clients and its folder before they join; the daemon then writes their
    statistics, memory and shares samples and trace into that folder on the run's clock, the
    run-directory formats, until the run says ``record_end`` or the process that asked is gone.
    Two runs never record one name: clients are told apart by name.
    """

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self._open: dict[Path, Recording] = {}

    def names(self) -> frozenset[str]:
        """Every client name some run records."""
        return frozenset().union(*(r.names for r in self._open.values()))

    def start(self, message: dict[str, Any], pid: int) -> None:
        """A ``record`` request: ``folder`` (an existing folder), ``clients`` (names),
        ``clock_origin_ns`` (the run clock's origin) and ``trace``."""
        folder = message.get("folder")
        names = message.get("clients")
        origin = message.get("clock_origin_ns")
        if not isinstance(folder, str) or not Path(folder).is_absolute():
            raise OrionError("record: folder must be an absolute path")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise OrionError("record: clients must be a list of client names")
        if isinstance(origin, bool) or not isinstance(origin, int):
            raise OrionError("record: clock_origin_ns must be a whole number")
        path = Path(folder)
        if not path.is_dir():
            raise OrionError(f"record: no folder {path}")
        if path in self._open:
            raise OrionError(f"record: {path} is being recorded already")
        taken = sorted(self.names() & set(names))
        if taken:
            raise OrionError(f"record: another run records client {taken[0]!r} on this GPU")
        trace = bool(message.get("trace", False))
        if trace and not self._scheduler.settings.trace_capacity:
            raise OrionError("record: this daemon keeps no kernel trace")
        recorder = SchedulerRecorder(
            self._scheduler, path, RunClock(origin), names=names, trace=trace
        )
        self._open[path] = Recording(path, frozenset(names), pid, recorder)

    def end(self, folder: Any) -> None:
        """A ``record_end`` request: the run's last records are written when this returns."""
        recording = self._open.pop(Path(str(folder)), None)
        if recording is None:
            raise OrionError(f"record_end: nothing is being recorded into {folder}")
        recording.recorder.close()

    def sample(self) -> list[str]:
        """Every half second: trace, samples and statistics of each run; a run whose process is
        gone is closed. Returns what to note about it."""
        notes = []
        for folder, recording in list(self._open.items()):
            if not process_alive(recording.owner_pid):
                del self._open[folder]
                recording.recorder.close()
                notes.append(f"closed the records of {folder}: the run (pid "
                             f"{recording.owner_pid}) ended without saying")  # fmt: skip
                continue
            recording.recorder.drain_trace()
            recording.recorder.sample_memory()
            recording.recorder.write_stats()
        return notes

    def client_gone(self, slot: int) -> None:
        """Before the daemon gives ``slot`` back (see :meth:`SchedulerRecorder.client_gone`)."""
        for recording in self._open.values():
            recording.recorder.client_gone(slot)

    def close(self) -> None:
        """The daemon stops: every run's last records."""
        while self._open:
            _, recording = self._open.popitem()
            recording.recorder.close()
