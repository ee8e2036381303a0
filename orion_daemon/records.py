"""The preload library's statistics and trace, copied out of a run's or a daemon's shared state.

Both live in the run's shared memory, which is removed when the run ends, and the trace is a
ring per client that overwrites itself: the runner copies it out every half second while the
clients run (``trace.csv``) and rewrites ``scheduler.json`` periodically, so even an interrupted
run keeps what the scheduler saw up to then.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from orion_common import run_format
from orion_common.atomic_io import write_json_atomic
from orion_common.csv_table import CsvTable
from orion_common.runclock import RunClock


class SchedulerRecorder:
    """Writes ``scheduler.json`` and (when tracing) ``trace.csv`` from a ``SchedulerRun``."""

    def __init__(self, scheduler: Any, run_dir: Path, clock: RunClock) -> None:
        self._scheduler = scheduler
        self._clock = clock
        self._stats_path = run_dir / "scheduler.json"
        self._trace: CsvTable | None = None
        if scheduler.settings.trace_capacity:
            self._trace = CsvTable(
                run_dir / "trace.csv", run_format.column_names(run_format.TRACE_COLUMNS)
            )
        self._memory = CsvTable(
            run_dir / run_format.MEMORY_TABLE, run_format.column_names(run_format.MEMORY_COLUMNS)
        )
        settings = scheduler.settings
        self._shares: CsvTable | None = None
        if getattr(settings, "quotas", False) or settings.policy == "quota":
            self._shares = CsvTable(
                run_dir / run_format.SHARES_TABLE,
                run_format.column_names(run_format.SHARE_COLUMNS),
            )

    def _seconds(self, value: Any) -> float | None:
        return self._clock.seconds(int(value)) if value else None

    def drain_trace(self) -> int:
        """Append the launches recorded since the last call; returns how many."""
        if self._trace is None:
            return 0
        records = self._scheduler.drain_trace()
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
        for client, stats in self._scheduler.stats().items():
            if client.startswith("_") or "memory_used" not in stats:
                continue
            if self._shares is not None:
                self._shares.append(
                    (
                        round(now, 6),
                        client,
                        round(float(stats.get("gpu_share", 0.0)), 6),
                        float(stats.get("min_util", 0.0)),
                        float(stats.get("max_util", 1.0)),
                    )
                )
            limit = stats.get("memory_limit") or None
            self._memory.append(
                (
                    round(now, 6),
                    client,
                    int(stats["memory_used"]),
                    limit,
                    int(stats.get("allocations_refused", 0)),
                )
            )
        self._memory.flush()
        if self._shares is not None:
            self._shares.flush()

    def write_stats(self) -> None:
        stats = self._scheduler.stats()
        run_meta = stats.pop("_run", None)
        data: dict[str, Any] = {
            "clients": stats,
            "settings": dataclasses.asdict(self._scheduler.settings),
        }
        if run_meta is not None:
            data["trace_records_lost"] = run_meta.get("trace_records_lost", 0)
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
