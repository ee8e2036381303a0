"""GPU utilisation, memory and clocks sampled through NVML every 100 ms into ``gpu.csv``.

Latency and throughput say how each job fared; utilisation says why (an idle GPU between HP
requests is the capacity best-effort work can use). Clocks say whether two runs are comparable
at all: a GPU that boosts higher, or throttles, in one run than in another changes latencies by
more than the few percent a policy is judged on. NVML is read from a thread of the runner, so
it costs the clients nothing. Without NVML (no driver, a CPU test run) the monitor records no
samples and leaves a note instead of failing the run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from colocation.rundir import GPU_COLUMNS
from orion_common.csv_table import CsvTable
from orion_common.runclock import RunClock

SAMPLE_INTERVAL_S = 0.1
_MIB = 1024 * 1024


def _nvml_handle(gpu_index: int) -> tuple[Any, Any] | tuple[None, str]:
    """(pynvml, device handle), or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
    except Exception as exc:  # NVMLError subclasses: no driver, no such GPU
        return None, f"NVML is not available ({exc})"


class GpuMonitor:
    """Samples one GPU on a background thread until :meth:`stop`.

    ``note`` says why there are no (or no more) samples; ``None`` while all is well.
    """

    def __init__(
        self,
        table_path: Path,
        clock: RunClock,
        gpu_index: int = 0,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self._path = table_path
        self._clock = clock
        self._gpu_index = gpu_index
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.note: str | None = None
        self.clock_note: str | None = None
        self.samples = 0

    def start(self) -> bool:
        """Begin sampling; False (and ``note`` set) when NVML cannot be used."""
        nvml, handle = _nvml_handle(self._gpu_index)
        if nvml is None:
            self.note = f"no GPU utilisation samples: {handle}"
            return False
        self._thread = threading.Thread(
            target=self._run, args=(nvml, handle), name="orion-gpu-monitor", daemon=True
        )
        self._thread.start()
        return True

    def _run(self, nvml: Any, handle: Any) -> None:
        with CsvTable(self._path, GPU_COLUMNS) as table:
            while not self._stop.is_set():
                try:
                    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                except Exception as exc:
                    self.note = f"GPU sampling stopped after {self.samples} samples: {exc}"
                    return
                table.append(
                    (
                        self._clock.now(),
                        int(rates.gpu),
                        int(rates.memory),
                        memory.used / _MIB,
                        *self._clocks(nvml, handle),
                    )
                )
                self.samples += 1
                self._stop.wait(self._interval_s)

    def _clocks(self, nvml: Any, handle: Any) -> tuple[int | None, int | None]:
        """Current SM and memory clocks (MHz); empty cells where NVML cannot say.

        A GPU may refuse clock queries (some virtualised or MIG set-ups) while utilisation still
        works, so a refusal blanks the clock cells instead of ending the sampling; the first one
        is kept as a note.
        """
        clocks: list[int | None] = []
        for kind in ("NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
            try:
                clocks.append(int(nvml.nvmlDeviceGetClockInfo(handle, getattr(nvml, kind))))
            except Exception as exc:
                clocks.append(None)
                if self.clock_note is None:
                    self.clock_note = f"GPU clocks not sampled: {exc}"
        return clocks[0], clocks[1]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> GpuMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
