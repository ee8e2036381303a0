"""What every builder does before building: import what it needs, check and pin the device.

Kept apart from the registry because everything here imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from orion_common.errors import OrionError

if TYPE_CHECKING:
    import torch

    from workloads.spec import WorkloadSpec

# Seed for weights and synthetic inputs: the profiling run and the co-location run see the same
# numbers, so nothing data-dependent can differ between them.
SEED = 0

# Module name -> what to pip install for it.
_PIP_NAMES = {
    "torch": "torch",
    "torchvision": "torchvision",
    "transformers": "transformers",
    "cupy": "cupy-cuda13x",
}


def require(module: str, workload: str) -> ModuleType:
    """Import ``module`` or raise a one-line :class:`OrionError` saying what to install."""
    pip_name = _PIP_NAMES.get(module, module)
    try:
        return importlib.import_module(module)
    except ImportError:
        hint = f"pip install {pip_name}"
        if module == "cupy":
            hint += " (or the cupy-cudaXYx wheel matching your CUDA major version)"
        raise OrionError(
            f"workload {workload!r} needs the Python module {module!r}, which is not installed",
            hint=hint,
        ) from None
    except Exception as exc:  # e.g. a torchvision built for another torch fails at import
        detail = " ".join(str(exc).split())[:120]
        raise OrionError(
            f"{module} is installed but fails to import ({type(exc).__name__}: {detail})",
            hint=f"install a {pip_name} build that matches the installed torch",
        ) from None


def resolve_device(spec: WorkloadSpec) -> torch.device:
    """The spec's device with its index filled in, after checking it exists.

    Makes that device the current one: what torch and CuPy do without naming a device (a CUDA
    graph's capture stream, a side stream, a library handle) then happens on the workload's GPU,
    not on GPU 0, for a client pinned to another GPU.

    Also switches cuDNN autotuning off. The scheduler identifies kernels by name and launch
    shape, and the profiling run and the co-location run must launch the same sequence;
    ``cudnn.benchmark`` times candidate algorithms at first use and could pick different kernels
    in different runs (timings are noisy, more so next to another job).
    """
    torch = require("torch", spec.name)
    torch.backends.cudnn.benchmark = False
    device = torch.device(spec.device)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise OrionError(
            f"workload {spec.name!r} asks for device {spec.device!r}, but torch sees no CUDA GPU",
            hint="run on a machine with an NVIDIA GPU and a CUDA build of torch, or use device cpu",
        )
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= count:
        raise OrionError(
            f"device {spec.device!r} does not exist; torch sees {count} CUDA device(s)"
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


@contextlib.contextmanager
def seeded(device: torch.device) -> Iterator[None]:
    """Make weights and inputs reproducible without disturbing the caller's random state."""
    import torch

    devices = [device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(SEED)
        yield


def autocast(spec: WorkloadSpec, device: torch.device) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast for a ``bf16`` spec (weights stay fp32), nothing for ``fp32``."""
    import torch

    if spec.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def finish_build(device: torch.device) -> None:
    """Wait for build-time work (weights, inputs), so the first step starts from an idle GPU."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
