"""GPU sampling: rows on the run clock through NVML, and a note instead of a failure without it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from native_harness import wait_for

from colocation.gpu_monitor import GpuMonitor
from orion_common.runclock import RunClock
from reporting.rundata import GPU_COLUMNS, read_table


class FakeNvml:
    """The four pynvml calls the monitor makes, answering like one busy GPU."""

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=3 * 1024 * 1024 * 1024, total=80 * 1024**3)


def test_samples_land_in_gpu_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    clock = RunClock.starting_now()
    with GpuMonitor(tmp_path / "gpu.csv", clock, interval_s=0.01) as monitor:
        wait_for(lambda: monitor.samples > 3, what="four samples")
    assert monitor.note is None
    rows = read_table(tmp_path / "gpu.csv", GPU_COLUMNS, notes=[])
    assert len(rows) == monitor.samples > 3
    assert rows["time_s"].is_monotonic_increasing
    assert rows["time_s"].iloc[-1] < clock.now()
    assert set(rows["sm_util_pct"]) == {87}
    assert set(rows["mem_used_mib"]) == {3072}


def test_without_nvml_there_is_a_note_and_no_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    monitor = GpuMonitor(tmp_path / "gpu.csv", RunClock.starting_now())
    assert monitor.start() is False
    monitor.stop()
    assert "NVML is not available" in (monitor.note or "")
    assert not (tmp_path / "gpu.csv").exists()
