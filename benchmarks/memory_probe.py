"""A ResNet-50 training client under a GPU memory limit: what it sees and what it gets.

Run by ``benchmarks/quota_limits.py`` inside a scheduler run whose client has a
``memory_limit``; prints one JSON line:

- ``total``/``free``: ``torch.cuda.mem_get_info()`` after the training steps (the library
  reports the limit as the device's total);
- ``trained``: whether the steps ran (``train_error`` says why not);
- ``big_refused``: whether allocating ``--ask`` bytes raised ``torch.OutOfMemoryError``;
- ``nvml_process_bytes``: the process's GPU memory as NVML (nvidia-ml-py) reports it, or None
  where NVML lists no process of this pid (a container's own pid namespace); and
  ``nvml_device_delta_bytes``: the device's used memory now minus before this process touched
  CUDA, which counts this process alone when nothing else runs on the GPU (both also right
  after training, as ``trained_nvml_*``);
- ``context_bytes``: the device's used memory right after CUDA started (the context and
  torch's first block), the part of a process's memory no allocation limit covers.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def _nvml_used(pynvml: Any, handle: Any) -> int:
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def _nvml_process_bytes(pynvml: Any, handle: Any) -> int | None:
    for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if process.pid == os.getpid() and process.usedGpuMemory is not None:
            return int(process.usedGpuMemory)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ask", type=int, required=True, help="bytes of the refused allocation")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = _nvml_used(pynvml, handle)

    import torch

    from workloads import WorkloadSpec, build_workload

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    context = _nvml_used(pynvml, handle) - before
    result: dict[str, Any] = {"context_bytes": context, "trained": False, "train_error": None}
    try:
        workload = build_workload(WorkloadSpec("resnet50", "train", args.batch_size))
        for _ in range(args.steps):
            workload.step()
        workload.synchronize()
        result["trained"] = True
    except torch.OutOfMemoryError as error:
        result["train_error"] = str(error).splitlines()[0]
    torch.cuda.synchronize()
    result["trained_nvml_process_bytes"] = _nvml_process_bytes(pynvml, handle)
    result["trained_nvml_device_delta_bytes"] = _nvml_used(pynvml, handle) - before
    free, total = torch.cuda.mem_get_info()
    result |= {"free": free, "total": total, "torch_reserved_bytes": torch.cuda.memory_reserved()}
    try:
        big = torch.empty(args.ask, dtype=torch.uint8, device="cuda")
        result["big_refused"] = False
        del big
    except torch.OutOfMemoryError:
        result["big_refused"] = True
    torch.cuda.synchronize()
    result["nvml_process_bytes"] = _nvml_process_bytes(pynvml, handle)
    result["nvml_device_delta_bytes"] = _nvml_used(pynvml, handle) - before
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
