"""Run under a memory limit by test_scheduler_gpu.py: each view of memory, two routes past torch.

Prints one JSON line:

- ``torch``, ``driver``, ``nvml``: (free, total) as ``torch.cuda.mem_get_info()``, the driver's
  ``cuMemGetInfo`` (ctypes on libcuda) and NVML's ``nvmlDeviceGetMemoryInfo`` (nvidia-ml-py) see
  them, read back to back with nothing allocated in between, and NVML's ``used``;
- ``array_big``/``array_small``: the CUresult of a CUDA array of ``big`` / ``small`` bytes
  (``cuArray3DCreate``, 2-D, four float channels: 16 bytes an element);
- ``graph_big``/``graph_small``: the CUresult of instantiating a graph whose one node is a memory
  allocation node of ``big`` / ``small`` bytes (``cuGraphAddMemAllocNode``), and for the small one
  ``graph_small_launch``, the result of launching it and waiting for it.

Arguments: ``big`` and ``small`` in bytes (each a multiple of 1 MiB).
"""

from __future__ import annotations

import ctypes
import json
import sys

import torch

CU_AD_FORMAT_FLOAT = 0x20
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
ARRAY_WIDTH = 16384  # elements of 16 bytes: a row of 256 KiB


class ArrayDescriptor(ctypes.Structure):
    """CUDA_ARRAY3D_DESCRIPTOR."""

    _fields_ = [
        ("width", ctypes.c_size_t),
        ("height", ctypes.c_size_t),
        ("depth", ctypes.c_size_t),
        ("format", ctypes.c_int),
        ("channels", ctypes.c_uint),
        ("flags", ctypes.c_uint),
    ]


class PoolProps(ctypes.Structure):
    """CUmemPoolProps: the allocation type, handle types, location, then 72 bytes left zero."""

    _fields_ = [
        ("alloc_type", ctypes.c_int),
        ("handle_types", ctypes.c_int),
        ("location_type", ctypes.c_int),
        ("location_id", ctypes.c_int),
        ("rest", ctypes.c_ubyte * 72),
    ]


class MemAllocNodeParams(ctypes.Structure):
    """CUDA_MEM_ALLOC_NODE_PARAMS."""

    _fields_ = [
        ("pool_props", PoolProps),
        ("access_descs", ctypes.c_void_p),
        ("access_desc_count", ctypes.c_size_t),
        ("bytesize", ctypes.c_size_t),
        ("dptr", ctypes.c_uint64),
    ]


def driver_view(cuda: ctypes.CDLL) -> list[int]:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    result = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    if result != 0:
        raise RuntimeError(f"cuMemGetInfo_v2 returned {result}")
    return [free.value, total.value]


def array_result(cuda: ctypes.CDLL, size: int) -> int:
    rows = size // (ARRAY_WIDTH * 16)
    descriptor = ArrayDescriptor(ARRAY_WIDTH, rows, 0, CU_AD_FORMAT_FLOAT, 4, 0)
    array = ctypes.c_void_p()
    result = cuda.cuArray3DCreate_v2(ctypes.byref(array), ctypes.byref(descriptor))
    if result == 0:
        cuda.cuArrayDestroy(array)
    return int(result)


def graph_result(cuda: ctypes.CDLL, size: int, device: int, launch: bool) -> tuple[int, int | None]:
    graph, node, exec_ = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    if cuda.cuGraphCreate(ctypes.byref(graph), 0) != 0:
        raise RuntimeError("cuGraphCreate failed")
    params = MemAllocNodeParams()
    params.pool_props.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED
    params.pool_props.location_type = CU_MEM_LOCATION_TYPE_DEVICE
    params.pool_props.location_id = device
    params.bytesize = size
    added = cuda.cuGraphAddMemAllocNode(ctypes.byref(node), graph, None, 0, ctypes.byref(params))
    if added != 0:
        raise RuntimeError(f"cuGraphAddMemAllocNode returned {added}")
    made = int(cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)))
    ran = None
    if made == 0:
        if launch:
            ran = int(cuda.cuGraphLaunch(exec_, None)) or int(cuda.cuCtxSynchronize())
        cuda.cuGraphExecDestroy(exec_)
        # The allocation outlives the executable in the graph pool until it is freed: free it
        # and trim, so that a later run of this probe starts from a clean pool.
        cuda.cuMemFree_v2(ctypes.c_uint64(params.dptr))
        cuda.cuDeviceGraphMemTrim(device)
    cuda.cuGraphDestroy(graph)
    return made, ran


def main() -> None:
    big, small = int(sys.argv[1]), int(sys.argv[2])
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    device = torch.cuda.current_device()
    cuda = ctypes.CDLL("libcuda.so.1")
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(device)
    torch_view = list(torch.cuda.mem_get_info())
    driver = driver_view(cuda)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    result: dict[str, object] = {
        "torch": torch_view,
        "driver": driver,
        "nvml": [int(memory.free), int(memory.total)],
        "nvml_used": int(memory.used),
        "array_big": array_result(cuda, big),
        "array_small": array_result(cuda, small),
    }
    result["graph_big"], _ = graph_result(cuda, big, device, launch=False)
    made, ran = graph_result(cuda, small, device, launch=True)
    result["graph_small"], result["graph_small_launch"] = made, ran
    print(json.dumps(result))


if __name__ == "__main__":
    main()
