"""Facts about this machine: GPU, driver, CUDA, torch, cuDNN, Nsight Compute and MPS.

Every query degrades to ``None`` instead of raising (after nvitop's habit), because the callers
(``orion doctor``, profile metadata, ``run.json``) must work on machines with no GPU, no driver
or no torch, and say what is missing rather than crash. The GPU questions are answered from
``ORION_STAND_IN_GPUS`` instead when it is set (:mod:`orion_common.stand_in_gpus`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from orion_common.stand_in_gpus import DRIVER_VERSION as STAND_IN_DRIVER
from orion_common.stand_in_gpus import StandInGpu, stand_in_gpus

_T = TypeVar("_T")

# Where NVIDIA installs tools outside PATH on common images.
_NCU_FALLBACKS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu")
_MPS_FALLBACKS = (
    "/usr/local/nvidia/bin/nvidia-cuda-mps-control",
    "/usr/bin/nvidia-cuda-mps-control",
)
_NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")


@dataclass(frozen=True)
class GpuFacts:
    """What NVML and the CUDA driver (torch where the driver API does not answer) say about one
    GPU."""

    index: int
    name: str
    memory_total_mib: int | None
    driver_version: str | None
    cuda_driver_version: str | None
    sm_count: int | None
    compute_capability: str | None


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None when there is no driver or no library."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def _ask_nvml(query: Callable[[Any], _T]) -> _T | None:
    """``query(pynvml)``, or None without NVML or when the driver refuses the question: every
    NVML fact degrades to "not available" in this one place instead of raising."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return query(nvml)
    except Exception:
        return None


def _as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_uuid(index: int) -> str | None:
    """GPU ``index``'s UUID (``GPU-...``), the name that stays with the GPU whatever
    ``CUDA_VISIBLE_DEVICES`` renumbers; None without NVML or such a GPU."""
    stand_ins = stand_in_gpus()
    if stand_ins is not None:
        return stand_ins[index].uuid if 0 <= index < len(stand_ins) else None
    return _ask_nvml(
        lambda nvml: _as_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index)))
    )


def gpu_count() -> int | None:
    """How many GPUs the driver shows; None without NVML."""
    stand_ins = stand_in_gpus()
    if stand_ins is not None:
        return len(stand_ins)
    return _ask_nvml(lambda nvml: int(nvml.nvmlDeviceGetCount()))


def nvml_available() -> bool:
    """True when the NVIDIA driver answers through NVML."""
    return _nvml() is not None


def driver_version() -> str | None:
    """The kernel driver's version, e.g. ``580.159.04``."""
    return _ask_nvml(lambda nvml: _as_text(nvml.nvmlSystemGetDriverVersion()))


def cuda_driver_version() -> str | None:
    """The newest CUDA version the driver supports, e.g. ``13.0``."""
    version = _ask_nvml(lambda nvml: int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    if version is None:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


@dataclass(frozen=True)
class _DeviceProperties:
    """The fields of torch's device properties that :func:`gpu_facts` reads."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int


# CUdevice_attribute values (cuda.h): stable across CUDA versions.
_CU_MULTIPROCESSOR_COUNT = 16
_CU_COMPUTE_CAPABILITY_MAJOR = 75
_CU_COMPUTE_CAPABILITY_MINOR = 76


def _driver_device_properties(index: int, library: str = "libcuda.so.1") -> Any | None:
    """GPU ``index``'s properties from the CUDA driver API, or None when the driver cannot say.

    Asked of the driver directly (``cuInit``, ``cuDeviceGetAttribute``: no context made) rather
    than of torch: `orion up` reads these facts beside a latency-critical service, and importing
    torch there costs seconds of CPU. Indices are CUDA's, as torch's are (both honour
    ``CUDA_VISIBLE_DEVICES``)."""
    try:
        cuda = ctypes.CDLL(library)
        if cuda.cuInit(0) != 0:
            return None
        count = ctypes.c_int()
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or not 0 <= index < count.value:
            return None
        device = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), index) != 0:
            return None
        attributes = []
        for attribute in (
            _CU_MULTIPROCESSOR_COUNT,
            _CU_COMPUTE_CAPABILITY_MAJOR,
            _CU_COMPUTE_CAPABILITY_MINOR,
        ):
            value = ctypes.c_int()
            if cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
                return None
            attributes.append(value.value)
        name = ctypes.create_string_buffer(256)
        if cuda.cuDeviceGetName(name, len(name), device) != 0:
            return None
        memory = ctypes.c_size_t()
        if cuda.cuDeviceTotalMem_v2(ctypes.byref(memory), device) != 0:
            return None
    except (OSError, AttributeError):  # no driver library, or one without these functions
        return None
    sm_count, major, minor = attributes
    return _DeviceProperties(
        name.value.decode(errors="replace"), memory.value, sm_count, major, minor
    )


def _torch_device_properties(index: int) -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        return torch.cuda.get_device_properties(index)
    except Exception:
        return None


def gpu_facts(index: int = 0) -> GpuFacts | None:
    """Facts about GPU ``index``, or None when there is no such GPU or no driver."""
    stand_ins = stand_in_gpus()
    if stand_ins is not None:
        return _stand_in_facts(stand_ins[index]) if 0 <= index < len(stand_ins) else None
    nvml = _nvml()
    # torch only where the driver API did not answer (it uses the same driver, so this is rare).
    props = _driver_device_properties(index) or _torch_device_properties(index)
    if nvml is None and props is None:
        return None
    name: str | None = None
    memory_mib: int | None = None
    if nvml is not None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _as_text(nvml.nvmlDeviceGetName(handle))
            memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024))
        except Exception:
            name = None
    if props is not None:
        name = name or props.name
        if memory_mib is None:
            memory_mib = int(props.total_memory // (1024 * 1024))
    if name is None:
        return None
    return GpuFacts(
        index=index,
        name=name,
        memory_total_mib=memory_mib,
        driver_version=driver_version(),
        cuda_driver_version=cuda_driver_version(),
        sm_count=int(props.multi_processor_count) if props is not None else None,
        compute_capability=f"{props.major}.{props.minor}" if props is not None else None,
    )


def _stand_in_facts(gpu: StandInGpu) -> GpuFacts:
    return GpuFacts(
        index=gpu.index,
        name=gpu.name,
        memory_total_mib=gpu.memory_mib,
        driver_version=STAND_IN_DRIVER,
        cuda_driver_version=None,
        sm_count=gpu.sm_count,
        compute_capability=None,
    )


def torch_versions() -> dict[str, str | None]:
    """torch, the CUDA it was built for, cuDNN, torchvision and cupy versions (None if absent)."""
    versions: dict[str, str | None] = {
        "torch_version": None,
        "torch_cuda_version": None,
        "cudnn_version": None,
        "torchvision_version": None,
        "cupy_version": None,
    }
    try:
        import torch

        versions["torch_version"] = torch.__version__
        versions["torch_cuda_version"] = torch.version.cuda
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        versions["cudnn_version"] = _format_cudnn(cudnn)
    except Exception:
        pass
    versions["torchvision_version"] = _module_version("torchvision")
    versions["cupy_version"] = _module_version("cupy")
    return versions


def _format_cudnn(version: int | None) -> str | None:
    """cuDNN reports 91900 for 9.19.0 (and 8907 for 8.9.7)."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def _module_version(name: str) -> str | None:
    try:
        module = __import__(name)
    except Exception:
        return None
    return getattr(module, "__version__", None)


def find_executable(name: str, fallbacks: tuple[str, ...] = ()) -> Path | None:
    """``name`` on PATH, else the first existing fallback path."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for candidate in fallbacks:
        if os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def find_ncu() -> Path | None:
    """The Nsight Compute command line, honouring ``ORION_NCU`` first."""
    override = os.environ.get("ORION_NCU")
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    extra = (f"{cuda_home}/bin/ncu",) if cuda_home else ()
    return find_executable("ncu", extra + _NCU_FALLBACKS)


def find_mps_control() -> Path | None:
    """``nvidia-cuda-mps-control``, needed by the MPS-based policies."""
    return find_executable("nvidia-cuda-mps-control", _MPS_FALLBACKS)


@functools.lru_cache(maxsize=8)
def ncu_version(ncu: Path) -> str | None:
    """Version string of ``ncu``, e.g. ``2025.3.1.0``."""
    try:
        out = subprocess.run(
            [str(ncu), "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Version\s+([\w.\-]+)", out)
    return match.group(1) if match else (out.strip().splitlines() or [None])[-1]


def profiling_counters_allowed() -> tuple[bool | None, str]:
    """Whether this user may read GPU performance counters (ncu's ERR_NVGPUCTRPERM).

    The driver restricts counters to administrators when ``RmProfilingAdminOnly`` is 1. Root (or
    CAP_SYS_ADMIN) may always read them. Returns (allowed, explanation); allowed is None when the
    driver's parameters cannot be read.
    """
    if os.geteuid() == 0:
        return True, "running as root"
    try:
        params = _NVIDIA_PARAMS.read_text()
    except OSError:
        return None, "cannot read /proc/driver/nvidia/params"
    match = re.search(r"RmProfilingAdminOnly:\s*(\d)", params)
    if match is None:
        return None, "driver does not report RmProfilingAdminOnly"
    if match.group(1) == "0":
        return True, "counters open to all users"
    return False, "driver restricts GPU performance counters to administrators (ERR_NVGPUCTRPERM)"


def software_summary(gpu_index: int = 0) -> dict[str, Any]:
    """The versions every profile and run records, so results can be compared and reproduced."""
    gpu = gpu_facts(gpu_index)
    summary: dict[str, Any] = {
        "gpu_name": gpu.name if gpu else None,
        "sm_count": gpu.sm_count if gpu else None,
        "compute_capability": gpu.compute_capability if gpu else None,
        "gpu_memory_mib": gpu.memory_total_mib if gpu else None,
        "driver_version": driver_version(),
        "cuda_version": cuda_driver_version(),
        "hostname": platform.node(),
        "python_version": platform.python_version(),
    }
    summary.update(torch_versions())
    return summary


def gpu_facts_dict(gpu_index: int = 0) -> dict[str, Any] | None:
    """:func:`gpu_facts` as a plain dict (for JSON)."""
    gpu = gpu_facts(gpu_index)
    return asdict(gpu) if gpu else None
