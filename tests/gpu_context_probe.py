"""Run under a memory limit by test_scheduler_gpu.py: what a limited client sees of its context.

Prints one JSON object: ``torch.cuda.mem_get_info()`` before anything is allocated (``free0``,
``total``), whether allocating ``ask`` bytes (which fits the limit only without the context)
raised torch.OutOfMemoryError, the free figure with a ``hold``-byte tensor alive (``free1``),
and NVML's figures inside the process (``nvml_free``, ``nvml_total``; null without pynvml).
"""

from __future__ import annotations

import json
import sys

import torch


def _nvml() -> tuple[int | None, int | None]:
    try:
        import pynvml
    except ImportError:
        return None, None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(memory.free), int(memory.total)


def main() -> None:
    ask, hold = int(sys.argv[1]), int(sys.argv[2])
    free0, total = torch.cuda.mem_get_info()
    refused = False
    try:
        big = torch.empty(ask, dtype=torch.uint8, device="cuda")
        del big
    except torch.OutOfMemoryError:
        refused = True
    torch.cuda.empty_cache()
    block = torch.empty(hold, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    nvml_free, nvml_total = _nvml()
    del block
    result = {"free0": free0, "total": total, "ask_refused": refused, "free1": free1,
              "nvml_free": nvml_free, "nvml_total": nvml_total}  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
