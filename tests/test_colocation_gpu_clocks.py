"""SM and memory clocks in gpu.csv: sampled through NVML, blank (not fatal) where NVML refuses."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from native_harness import wait_for

from colocation.gpu_monitor import GpuMonitor
from colocation.rundir import GPU_COLUMNS as WRITTEN_COLUMNS
from orion_common.runclock import RunClock
from reporting.rundata import GPU_COLUMNS, read_table


class ClockNvml:
    """pynvml as the monitor uses it, with clocks; ``refuse_clocks`` answers like a GPU that
    does not report them."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, refuse_clocks: bool = False) -> None:
        self.refuse_clocks = refuse_clocks

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=60, memory=20)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=1024 * 1024 * 1024, total=80 * 1024**3)

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        if self.refuse_clocks:
            raise RuntimeError("Not Supported")
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[kind]


def _sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml: ClockNvml) -> GpuMonitor:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuMonitor(tmp_path / "gpu.csv", RunClock.starting_now(), interval_s=0.01) as monitor:
        wait_for(lambda: monitor.samples > 3, what="four samples")
    return monitor


def test_the_writer_and_the_reader_agree_on_the_columns() -> None:
    assert tuple(c.name for c in GPU_COLUMNS) == WRITTEN_COLUMNS
    assert WRITTEN_COLUMNS[-2:] == ("sm_clock_mhz", "mem_clock_mhz")


def test_clocks_are_sampled(tmp_path, monkeypatch) -> None:
    monitor = _sample(tmp_path, monkeypatch, ClockNvml())
    assert monitor.note is None and monitor.clock_note is None
    rows = read_table(tmp_path / "gpu.csv", GPU_COLUMNS, notes=[])
    assert len(rows) == monitor.samples > 3
    assert set(rows["sm_clock_mhz"]) == {1980}
    assert set(rows["mem_clock_mhz"]) == {2619}


def test_refused_clocks_leave_blank_cells_and_sampling_goes_on(tmp_path, monkeypatch) -> None:
    monitor = _sample(tmp_path, monkeypatch, ClockNvml(refuse_clocks=True))
    assert monitor.note is None
    assert monitor.clock_note == "GPU clocks not sampled: Not Supported"
    rows = read_table(tmp_path / "gpu.csv", GPU_COLUMNS, notes=[])
    assert len(rows) > 3
    assert set(rows["sm_util_pct"]) == {60}
    assert rows["sm_clock_mhz"].isna().all() and rows["mem_clock_mhz"].isna().all()


def test_a_gpu_csv_from_before_the_clocks_reads_with_empty_clocks(tmp_path) -> None:
    path = tmp_path / "gpu.csv"
    path.write_text("time_s,sm_util_pct,mem_util_pct,mem_used_mib\n0.1,50,20,1024.0\n")
    rows = read_table(path, GPU_COLUMNS, notes=[])
    assert list(rows.columns) == [c.name for c in GPU_COLUMNS]
    assert rows["sm_clock_mhz"].isna().all()
    assert rows["sm_util_pct"].tolist() == [50.0]
