"""What one process's CUDA context takes of a GPU's memory, measured once per controller.

The driver gives every process that uses a GPU a context of its own: on an H100 or H200 about
0.6 GiB (the context with its default device heap, printf FIFO and per-thread stacks), which no
allocation call asks for and which ``nvidia-smi`` still counts as the process's. A client's
memory limit counts it (scheduler_core/native/memory_ledger.h), so the controller that writes
the run's decisions (a daemon as it starts, a closed run as it is created) measures it here and
hands it to the clients in the sealed decisions (``RunDecisions::context_bytes``).

The measurement runs in a short process of its own (:mod:`orion_common._context_probe`), so the
daemon never holds a context: it retains the GPU's primary context and reads its own memory from
NVML, bounded by :data:`TIMEOUT_S`. Where anything fails (no driver, no NVML, a timeout) the
footprint is 0 with the reason, which the caller logs in one line: orion then counts what it
counted before, never refuses to start. On stand-in GPUs (:mod:`orion_common.stand_in_gpus`)
the footprint is the GPU's declared ``context_mib``: nothing is measured.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orion_common.errors import OrionError
from orion_common.sizes import format_size
from orion_common.stand_in_gpus import stand_in_gpus

TIMEOUT_S = 60.0
"""The longest a measurement may take: a first cuInit on a machine of many GPUs without
persistence mode takes seconds; far longer means a driver that hangs, and a daemon must start."""
PROBE = Path(__file__).resolve().parent / "_context_probe.py"


@dataclass(frozen=True)
class ContextFootprint:
    """``bytes`` one context takes (0 where unknown) and ``how`` they were found, or why not."""

    bytes: int
    how: str

    def log_line(self, gpu: str) -> str:
        """The one line a controller's log gets about it."""
        if self.bytes == 0 and self.how.startswith("not measured"):
            return f"CUDA context of GPU {gpu}: counted as 0 ({self.how})"
        return f"CUDA context of GPU {gpu}: {format_size(self.bytes)} ({self.how})"


def context_footprint(device: str | None = None) -> ContextFootprint:
    """The footprint of a context on ``device`` (as ``CUDA_VISIBLE_DEVICES`` names a GPU: an
    index or a UUID; None: the first GPU this process may use). Never raises."""
    try:
        stand_ins = stand_in_gpus()
    except OrionError as error:
        return ContextFootprint(0, f"not measured: {error}")
    if stand_ins is not None:
        return _stand_in_footprint(stand_ins, device)
    return measure_footprint(device)


def _stand_in_footprint(stand_ins: list, device: str | None) -> ContextFootprint:
    wanted = device if device is not None else first_visible_gpu()
    for gpu in stand_ins:
        if wanted in (gpu.uuid, str(gpu.index)):
            return ContextFootprint(gpu.context_mib << 20, "the stand-in GPU's context_mib")
    return ContextFootprint(0, f"not measured: no stand-in GPU {wanted}")


def first_visible_gpu() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def measure_footprint(
    device: str | None = None, timeout_s: float = TIMEOUT_S, python: str = sys.executable
) -> ContextFootprint:
    """Measures in a process of its own (:mod:`orion_common._context_probe`); 0 and the reason
    when it cannot. ``python``: the interpreter it runs under (tests give one that fails)."""
    environment = dict(os.environ)
    if device is not None:
        environment["CUDA_VISIBLE_DEVICES"] = device
    # Nothing of orion's reaches the measured process: it must count a bare context.
    environment.pop("LD_PRELOAD", None)
    try:
        read_end, write_end = os.pipe()
    except OSError as error:  # out of file descriptors: the daemon starts all the same
        return ContextFootprint(0, f"not measured: {error}")
    try:
        try:
            subprocess.run(
                [python, "-I", "-S", str(PROBE), str(write_end)],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(write_end,),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return ContextFootprint(0, f"not measured: took over {timeout_s:g} s")
        except OSError as error:
            return ContextFootprint(0, f"not measured: cannot start {python}: {error}")
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as answer_file:
            read_end = -1
            raw = answer_file.read()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    return _answer(raw)


def _answer(raw: bytes) -> ContextFootprint:
    """The probe's JSON answer as a footprint; one that does not read is a failure said so."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return ContextFootprint(0, "not measured: the measuring process gave no answer")
    if not isinstance(answer, dict):
        return ContextFootprint(0, "not measured: the measuring process gave no answer")
    if "error" in answer:
        return ContextFootprint(0, f"not measured: {answer['error']}")
    size, how = answer.get("bytes"), answer.get("how")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return ContextFootprint(0, f"not measured: the measuring process said {size!r} bytes")
    return ContextFootprint(size, str(how))


@functools.cache
def _remembered(device: str | None, visible: str | None, stand_ins: str | None) -> ContextFootprint:
    del visible, stand_ins  # the cache's key only: context_footprint reads them itself
    return context_footprint(device)


def footprint_once(device: str | None = None) -> ContextFootprint:
    """:func:`context_footprint`, measured once per process for each GPU it names: a process
    that creates many runs (a benchmark's closed runs, one after another) measures one context,
    not one per run. The environment that decides the answer (``CUDA_VISIBLE_DEVICES``, the
    stand-in GPUs) is part of what is remembered."""
    return _remembered(
        device, os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("ORION_STAND_IN_GPUS")
    )
