"""Synthetic CuPy kernels with a tunable grid: a compute-bound one and a memory-bound one.

They give the scheduler jobs whose resource use is known and adjustable (how many SMs a launch
wants, how long it runs), unlike a model's mix. One step is ``batch_size`` launches of the main
kernel. Training is a stand-in with no real backward pass: the same launches followed by one
"update" launch, an axpy (``y = alpha * x + y``) over the output buffer, which is what an
optimizer step looks like to the GPU.

Kernels run on torch's current stream (wrapped as a CuPy stream), so they queue,
synchronize and get prioritized exactly like the model workloads' kernels. Buffers are torch
tensors allocated once at build; steps allocate nothing.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np
import torch

from orion_common.errors import OrionError
from workloads import _kernels, _runtime
from workloads.base import Workload
from workloads.spec import WorkloadSpec

# The update launch's "learning rate": a power of two, so the bf16 result is easy to check.
UPDATE_ALPHA = -(2.0**-4)
_MIB = 1 << 20
_VECTOR_BYTES = 16  # the copy kernel moves float4 / 8 x bf16 per thread and iteration
_TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


class SyntheticWorkload(Workload):
    """``batch_size`` launches of one kernel per step (plus the update launch when training).

    ``grid`` and ``block`` are the launch shape actually used (the ``grid`` option resolved);
    ``inputs`` is the buffer the kernels read, ``output`` the one they write (and what
    ``step()`` returns). The kernels hold raw pointers into both, so the workload keeps them.
    """

    def __init__(
        self,
        spec: WorkloadSpec,
        launch: _Launch,
        kernel_args: tuple[Any, ...],
        update_args: tuple[Any, ...],
        inputs: torch.Tensor,
        output: torch.Tensor,
    ) -> None:
        super().__init__(spec, launch.device)
        self.grid = launch.grid
        self.block = launch.block
        self.inputs = inputs
        self.output = output
        self.kernel_name = launch.kernel_name
        self._cupy = launch.cupy
        self._cupy_device = launch.cupy.cuda.Device(launch.device.index)
        self._kernel = launch.kernel
        self._kernel_args = kernel_args
        self._update = launch.update if spec.mode == "train" else None
        self._update_args = update_args
        self._streams: dict[int, Any] = {}

    def _external_stream(self, stream: torch.cuda.Stream) -> Any:
        handle = stream.cuda_stream
        external = self._streams.get(handle)
        if external is None:
            # CuPy 14 wraps any object speaking the CUDA stream protocol (torch streams do);
            # ExternalStream, deprecated there, is what older CuPy has.
            from_external = getattr(self._cupy.cuda.Stream, "from_external", None)
            if from_external is not None and hasattr(stream, "__cuda_stream__"):
                external = from_external(stream)
            else:
                external = self._cupy.cuda.ExternalStream(handle, self.device.index)
            self._streams[handle] = external
        return external

    def _step(self, stream: torch.cuda.Stream | None) -> torch.Tensor:
        assert stream is not None  # the registry only builds synthetic workloads on CUDA
        grid, block = (self.grid,), (self.block,)
        with self._cupy_device, self._external_stream(stream):
            for _ in range(self.spec.batch_size):
                self._kernel(grid, block, self._kernel_args)
            if self._update is not None:
                self._update(grid, block, self._update_args)
        return self.output


class _Launch(NamedTuple):
    """The part of a synthetic workload both kernels resolve alike, read once by ``_prepare``.

    Only the buffers and the kernels' arguments differ between the compute and the memory
    kernel; keeping the rest in one place keeps their option handling and checks the same.
    """

    device: torch.device
    cupy: Any
    options: dict[str, Any]
    grid: int
    block: int
    kernel_name: str
    kernel: Any
    update: Any


def _prepare(spec: WorkloadSpec, kernel_names: dict[str, str]) -> _Launch:
    """Resolve the device, grid and block, and load the main kernel (by dtype) and the update."""
    device = _runtime.resolve_device(spec)
    cupy = _runtime.require("cupy", spec.name)
    options = spec.resolved_options()
    grid = _resolve_grid(options["grid"], device)
    block = options["block"]
    kernel_name = kernel_names[spec.dtype]
    kernel = _load(cupy, device, spec, kernel_name, block)
    update = _load(cupy, device, spec, _kernels.AXPY_KERNEL[spec.dtype], block)
    return _Launch(device, cupy, options, grid, block, kernel_name, kernel, update)


def build_synthetic_compute(spec: WorkloadSpec) -> SyntheticWorkload:
    """Per-thread FMA chains; buffers of ``grid * block`` elements, one per thread."""
    launch = _prepare(spec, _kernels.COMPUTE_KERNEL)
    threads = launch.grid * launch.block
    # Kernels see 4-byte elements: one float, or one bf16 pair.
    values_per_element = 1 if spec.dtype == "fp32" else 2
    sizes = (_kernels.CHAINS * threads * values_per_element, threads * values_per_element)
    inputs, output = _allocate(spec, launch.device, sizes)
    in_view, out_view = _as_cupy(launch.cupy, inputs), _as_cupy(launch.cupy, output)
    kernel_args = (in_view, out_view, np.int32(launch.options["iterations"]))
    # The update reads chain 0's inputs, the first `threads` elements of the input buffer.
    update_args = (in_view, out_view, np.uint64(threads), np.float32(UPDATE_ALPHA))
    _runtime.finish_build(launch.device)
    return SyntheticWorkload(spec, launch, kernel_args, update_args, inputs, output)


def build_synthetic_memory(spec: WorkloadSpec) -> SyntheticWorkload:
    """Grid-stride copy of ``mib`` MiB between two buffers, as a scale by 1."""
    launch = _prepare(spec, _kernels.COPY_KERNEL)
    nbytes = launch.options["mib"] * _MIB
    values = nbytes // _TORCH_DTYPE[spec.dtype].itemsize
    source, destination = _allocate(spec, launch.device, (values, values))
    src_view, dst_view = _as_cupy(launch.cupy, source), _as_cupy(launch.cupy, destination)
    kernel_args = (src_view, dst_view, np.uint64(nbytes // _VECTOR_BYTES), np.float32(1.0))
    update_args = (src_view, dst_view, np.uint64(nbytes // 4), np.float32(UPDATE_ALPHA))
    _runtime.finish_build(launch.device)
    return SyntheticWorkload(spec, launch, kernel_args, update_args, source, destination)


def _resolve_grid(grid: int, device: torch.device) -> int:
    """``0`` means one block per SM: the smallest grid that can touch every SM."""
    if grid:
        return grid
    return torch.cuda.get_device_properties(device).multi_processor_count


def _load(cupy: Any, device: torch.device, spec: WorkloadSpec, name: str, block: int) -> Any:
    """Compile (NVRTC; cached on disk by CuPy) and load one kernel, and check the block fits it."""
    try:
        with cupy.cuda.Device(device.index):
            function = _module().get_function(name)
            limit = int(function.max_threads_per_block)
    except Exception as exc:  # NVRTC or CUDA headers missing or broken: nothing to fix here
        detail = " ".join(str(exc).split())[:160]
        raise OrionError(
            f"could not compile the {spec.name} kernel {name} with NVRTC "
            f"({type(exc).__name__}: {detail})",
            hint="CuPy needs NVRTC and the CUDA headers (cuda_bf16.h) of its CUDA major version",
        ) from None
    if block > limit:
        raise OrionError(
            f"block of {block} threads is too large for kernel {name} on this GPU; "
            f"at most {limit} threads per block"
        )
    return function


@functools.cache
def _module() -> Any:
    """One ``RawModule`` per process (CuPy compiles and loads it per device on first use)."""
    import cupy

    return cupy.RawModule(code=_kernels.SOURCE, options=("--std=c++17",))


def _allocate(
    spec: WorkloadSpec, device: torch.device, sizes: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """An input buffer of exactly representable random values and a NaN-filled output buffer.

    Inputs are multiples of 2^-8 in [0, 1), exact in both fp32 and bf16, so a CPU can reproduce
    the kernels' arithmetic. NaN in the output shows any element a launch did not write.
    """
    dtype = _TORCH_DTYPE[spec.dtype]
    n_in, n_out = sizes
    try:
        with _runtime.seeded(device):
            inputs = torch.randint(0, 256, (n_in,), dtype=torch.uint8, device=device)
            inputs = inputs.to(dtype).mul_(1 / 256)
            output = torch.full((n_out,), float("nan"), dtype=dtype, device=device)
    except torch.OutOfMemoryError:
        needed = (n_in + n_out) * dtype.itemsize / _MIB
        raise OrionError(
            f"the {spec.name} buffers ({needed:.0f} MiB) do not fit in the free GPU memory",
            hint="lower the grid, block or mib option",
        ) from None
    return inputs, output


def _as_cupy(cupy: Any, tensor: torch.Tensor) -> Any:
    """A CuPy view of a torch buffer (as bytes: CuPy has no bf16 dtype; kernels take pointers)."""
    return cupy.asarray(tensor.view(torch.uint8))
