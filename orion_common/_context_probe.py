"""The measuring process of :mod:`orion_common.context_footprint`: run as a script of its own.

It makes the one CUDA context whose size is measured, so it must not be the daemon (a daemon
that held a context would take that memory from its clients for as long as it runs, and under
MPS would be one more client). Standard library only (``python -I -S`` starts it in tens of
milliseconds): ctypes on ``libcuda.so.1`` and ``libnvidia-ml.so.1``.

``python -I -S _context_probe.py FD``: device 0 of the CUDA devices it sees (its parent sets
``CUDA_VISIBLE_DEVICES`` to the GPU to measure) gets its primary context retained and made
current; NVML then says this process's memory on that GPU (exact), or, where it lists no such
process (a pid namespace of its own, an older driver), the device's used memory after minus
before. One JSON object is written to the descriptor FD: ``{"bytes": N, "how": "..."}``, or
``{"error": "..."}`` saying what failed. The context is released before it exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF
"""What NVML reports as a process's memory when it cannot tell it (no permission, MIG)."""


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _NvmlProcessInfo(ctypes.Structure):
    """``nvmlProcessInfo_t``, as ``nvmlDeviceGetComputeRunningProcesses_v3`` fills it."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProbeError(Exception):
    """One step failed: its message is the one line the daemon's log gets."""


def _check(what: str, result: int) -> None:
    if result != 0:
        raise ProbeError(f"{what} failed (error {result})")


def _own_process_memory(nvml: Any, handle: ctypes.c_void_p) -> int | None:
    """This process's memory on the GPU as NVML lists it; None when it is not listed."""
    capacity = 64
    while True:
        count = ctypes.c_uint(capacity)
        entries = (_NvmlProcessInfo * capacity)()
        result = nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), entries)
        if result == NVML_ERROR_INSUFFICIENT_SIZE and capacity < 65536:
            capacity = max(capacity * 2, count.value)
            continue
        _check("nvmlDeviceGetComputeRunningProcesses_v3", result)
        break
    for entry in entries[: count.value]:
        if entry.pid == os.getpid() and entry.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE:
            return int(entry.usedGpuMemory)
    return None


def _device_used(nvml: Any, handle: ctypes.c_void_p) -> int:
    memory = _NvmlMemory()
    _check("nvmlDeviceGetMemoryInfo", nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)))
    return int(memory.used)


def measure() -> dict[str, Any]:
    """The footprint of one context on device 0, and how it was found."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise ProbeError(f"no CUDA driver: {error}") from None
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as error:
        raise ProbeError(f"no NVML: {error}") from None
    try:
        _check("nvmlInit_v2", nvml.nvmlInit_v2())
        _check("cuInit", cuda.cuInit(0))
        device = ctypes.c_int()
        _check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
        # NVML's handle for the very device CUDA calls 0: by PCI bus id, whatever the orders.
        bus_id = ctypes.create_string_buffer(64)
        _check("cuDeviceGetPCIBusId", cuda.cuDeviceGetPCIBusId(bus_id, len(bus_id), device))
        handle = ctypes.c_void_p()
        _check(
            "nvmlDeviceGetHandleByPciBusId_v2",
            nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id, ctypes.byref(handle)),
        )
        before = _device_used(nvml, handle)
        context = ctypes.c_void_p()
        _check(
            "cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
        )
        try:
            _check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
            _check("cuCtxSynchronize", cuda.cuCtxSynchronize())
            own = _own_process_memory(nvml, handle)
            if own is not None:
                return {"bytes": own, "how": "NVML's memory of the measuring process"}
            after = _device_used(nvml, handle)
            return {
                "bytes": max(0, after - before),
                "how": "NVML's device memory used after the context minus before",
            }
        finally:
            cuda.cuDevicePrimaryCtxRelease_v2(device)
    except AttributeError as error:  # a library without one of these functions
        raise ProbeError(f"the driver lacks a function: {error}") from None


def main(argv: list[str]) -> int:
    """Writes :func:`measure`'s answer, or what failed, to the descriptor ``argv[0]``."""
    fd = int(argv[0])
    try:
        answer = measure()
    except ProbeError as error:
        answer = {"error": str(error)}
    with os.fdopen(fd, "w") as out:
        json.dump(answer, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
