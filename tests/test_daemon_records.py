"""The preload library's trace and statistics as the run directory keeps them: trace.csv in the
documented columns on the run clock, per-client sequence numbers, scheduler.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from orion_common.runclock import RunClock
from orion_daemon.records import SchedulerRecorder
from reporting.rundata import TRACE_COLUMNS, read_table
from scheduler_core import TRACE_COLUMNS as NATIVE_TRACE_COLUMNS
from scheduler_core import SchedulerSettings

ORIGIN_NS = 5_000_000_000


class FakeScheduler:
    """What SchedulerRun hands the recorder: settings, its clients by slot, their statistics,
    trace batches (with the records the ring lost before each drain)."""

    def __init__(
        self,
        batches: list[tuple[list[tuple[Any, ...]], int]] = (),
        stats: dict[str, dict[str, Any]] | None = None,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.settings = settings or SchedulerSettings(
            "orion", 132, 50_000, 50_000, trace_capacity=1024
        )
        self._batches = list(batches)
        self._stats = stats or {
            "hp": {"state": "exited", "launches": 3, "blocked_ms": 0.0},
            "be": {"state": "dead", "launches": 1, "blocked_ms": 1.5},
        }
        self.slots = dict(enumerate(self._stats))

    def client_indices(self) -> dict[int, str]:
        return dict(self.slots)

    def client_stats(self, slot: int) -> dict[str, Any]:
        return dict(self._stats[self.slots[slot]])

    def drain_trace(self, indices: list[int]) -> pd.DataFrame:
        rows, lost = self._batches.pop(0) if self._batches else ([], 0)
        names = {self.slots[i] for i in indices}
        frame = pd.DataFrame([r for r in rows if r[0] in names], columns=NATIVE_TRACE_COLUMNS)
        frame.attrs["records_lost"] = lost
        return frame

    def gate_stats(self) -> dict[str, Any]:
        return {"keeper_running": True, "opens": 4, "closes": 1}


def launch(
    client: str, seq: int, name: str, enqueue_s: float, launch_s: float | None, reason: str
) -> tuple:
    def ns(seconds: float | None) -> int:
        return 0 if seconds is None else ORIGIN_NS + round(seconds * 1e9)

    return (client, seq, name, "compute", 66, 12_000, True, reason, ns(enqueue_s), ns(launch_s))


def test_trace_and_statistics_are_copied_out(tmp_path: Path) -> None:
    scheduler = FakeScheduler(
        [
            (
                [
                    launch("hp", 1, "gemm", 1.0, 1.0, "high_priority"),
                    launch("be", 1, "conv<#1>, x", 1.1, 1.25, "fits_beside"),
                ],
                0,
            ),
            # be's record 2 was overwritten in the ring before it was drained: its number is gone
            (
                [
                    launch("hp", 2, "relu", 2.0, 2.0, "high_priority"),
                    launch("be", 3, "bn", 2.1, None, "hp_idle"),
                ],
                1,
            ),
        ]
    )
    recorder = SchedulerRecorder(scheduler, tmp_path, RunClock(ORIGIN_NS))
    assert recorder.drain_trace() == 2
    recorder.close()  # the last batch and the statistics
    trace = read_table(tmp_path / "trace.csv", TRACE_COLUMNS, notes=[])
    assert list(trace.columns) == [c.name for c in TRACE_COLUMNS]
    assert trace["client"].tolist() == ["hp", "be", "hp", "be"]
    assert trace["seq"].tolist() == [1, 1, 2, 3]  # the library's numbers: be lost record 2
    assert trace["reason"].tolist() == ["high_priority", "fits_beside", "high_priority", "hp_idle"]
    assert trace["kernel_name"].tolist() == ["gemm", "conv<#1>, x", "relu", "bn"]
    assert trace["enqueue_s"].tolist() == [1.0, 1.1, 2.0, 2.1]
    assert trace["launch_s"].tolist()[:3] == [1.0, 1.25, 2.0]
    assert pd.isna(trace["launch_s"].iloc[3])  # not launched yet
    stats = json.loads((tmp_path / "scheduler.json").read_text())
    assert stats["clients"]["be"] == {"state": "dead", "launches": 1, "blocked_ms": 1.5}
    assert stats["settings"]["policy"] == "orion"
    assert stats["settings"]["trace_capacity"] == 1024
    assert stats["settings"]["hp_completion"] == "estimate"
    assert stats["trace_records_lost"] == 1
    # BE launches held on the GPU (the default): what the controller's gate keeper did.
    assert stats["settings"]["be_gate"] == "gpu"
    assert stats["gate_keeper"] == {"keeper_running": True, "opens": 4, "closes": 1}


def test_no_trace_file_without_tracing(tmp_path: Path) -> None:
    scheduler = FakeScheduler(
        stats={"hp": {"state": "exited"}},
        settings=SchedulerSettings("passthrough", 132, 50_000, 50_000),
    )
    recorder = SchedulerRecorder(scheduler, tmp_path, RunClock(ORIGIN_NS))
    assert recorder.drain_trace() == 0
    recorder.close()
    assert not (tmp_path / "trace.csv").exists()
    assert json.loads((tmp_path / "scheduler.json").read_text())["clients"] == {
        "hp": {"state": "exited"}
    }


def test_memory_and_gpu_shares_are_sampled_per_client(tmp_path: Path) -> None:
    stats = {
        "a": {"memory_used": 2048, "memory_limit": 4096, "allocations_refused": 1,
              "gpu_share": 0.31, "min_util": 0.0, "max_util": 0.3},
        "b": {"memory_used": 0, "memory_limit": 0, "allocations_refused": 0,
              "gpu_share": 0.69, "min_util": 0.0, "max_util": 1.0},
    }  # fmt: skip
    scheduler = FakeScheduler(
        stats=stats, settings=SchedulerSettings("quota", 132, 50_000, 50_000, quotas=True)
    )
    recorder = SchedulerRecorder(scheduler, tmp_path, RunClock(ORIGIN_NS))
    recorder.sample_memory()
    recorder.close()
    memory = pd.read_csv(tmp_path / "memory.csv")
    assert memory["client"].tolist() == ["a", "b", "a", "b"]  # sampled, then once at the end
    assert memory["used_bytes"].tolist()[:2] == [2048, 0]
    assert memory["limit_bytes"].isna().tolist()[:2] == [False, True]  # b has no limit
    shares = pd.read_csv(tmp_path / "shares.csv")
    assert shares[["client", "gpu_share", "max_util"]].values.tolist()[:2] == [
        ["a", 0.31, 0.3],
        ["b", 0.69, 1.0],
    ]


def test_no_shares_table_without_shares(tmp_path: Path) -> None:
    scheduler = FakeScheduler(
        stats={"a": {"memory_used": 0, "memory_limit": 0}},
        settings=SchedulerSettings("orion", 132, 50_000, 50_000),
    )
    recorder = SchedulerRecorder(scheduler, tmp_path, RunClock(ORIGIN_NS))
    recorder.close()
    assert (tmp_path / "memory.csv").exists()
    assert not (tmp_path / "shares.csv").exists()


def test_a_runs_records_hold_its_clients_only_with_the_final_statistics_of_those_gone(
    tmp_path: Path,
) -> None:
    # A daemon serving a run ("hp") and another program ("other"): the run's folder gets hp's
    # trace, samples and statistics, also those hp left when its slot was given back.
    scheduler = FakeScheduler(
        [
            (
                [
                    launch("hp", 1, "gemm", 1.0, 1.0, "high_priority"),
                    launch("other", 1, "copy", 1.0, 1.0, "hp_idle"),
                ],
                0,
            ),
            ([launch("hp", 2, "relu", 2.0, 2.0, "high_priority")], 0),
        ],
        stats={
            "hp": {"state": "exited", "launches": 2, "memory_used": 4096},
            "other": {"state": "attached", "launches": 1, "memory_used": 0},
        },
    )
    recorder = SchedulerRecorder(scheduler, tmp_path, RunClock(ORIGIN_NS), names=["hp"])
    assert recorder.drain_trace() == 1
    recorder.sample_memory()
    recorder.client_gone(0)  # hp's process is gone: its last records, before the slot goes
    del scheduler.slots[0]
    recorder.close()
    trace = read_table(tmp_path / "trace.csv", TRACE_COLUMNS, notes=[])
    assert trace["client"].tolist() == ["hp", "hp"]
    assert trace["seq"].tolist() == [1, 2]
    stats = json.loads((tmp_path / "scheduler.json").read_text())
    assert stats["clients"] == {"hp": {"state": "exited", "launches": 2, "memory_used": 4096}}
    memory = pd.read_csv(tmp_path / "memory.csv")
    assert memory["client"].tolist() == ["hp"]  # sampled while it ran; nothing once gone
