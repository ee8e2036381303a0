"""One GPU case, run in its own process, for tests/test_scheduler_gpu.py.

    python tests/gpu_probe.py CASE RESULT.json

With orion's preload library active (ORION_RUN set) it reports how many launches the library
counted during exactly one step and how many kernels torch.profiler saw in the same step; in
every case it reports a hash of the step's output, so outputs with and without the library can
be compared bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable

import torch


def _cupy_case() -> tuple[Callable[[], torch.Tensor], int]:
    import cupy

    source = r"""
    extern "C" __global__ void scale_add(const float* x, float* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
    """
    kernel = cupy.RawKernel(source, "scale_add")
    n = 1 << 20
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    y = torch.ones(n, device="cuda", dtype=torch.float32)
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    x_view, y_view = cupy.asarray(x), cupy.asarray(y)  # zero-copy views of the torch tensors

    def step() -> torch.Tensor:
        with stream:
            kernel(((n + 255) // 256,), (256,), (x_view, y_view, cupy.float32(0.5), cupy.int32(n)))
        return y

    return step, 3


def _compiled_case() -> tuple[Callable[[], torch.Tensor], int]:
    @torch.compile(dynamic=False)
    def fused(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * 1.5 + x.sin()).sum(dim=-1) + x.mean()

    x = torch.randn(256, 4096, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    return (lambda: fused(x)), 3


def _compiled_graph_case() -> tuple[Callable[[], torch.Tensor], int]:
    # Inductor's own CUDA graphs (cudagraph trees): recorded during warm-up, then replayed, one
    # graph launch per step, instantiated by PyTorch itself, not by orion's workloads.
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    model.eval()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    x = torch.randn(64, 1024, device="cuda", generator=torch.Generator("cuda").manual_seed(0))

    def step() -> torch.Tensor:
        with torch.no_grad():
            return compiled(x).clone()  # the graph's output buffer is reused by the next replay

    return step, 5


def _workload_case(
    name: str, mode: str, batch: int, cuda_graph: bool = False
) -> tuple[Callable[[], torch.Tensor], int]:
    from workloads import WorkloadSpec, build_workload

    options = {"seq_len": 128} if name == "bert" else {}
    spec = WorkloadSpec(name, mode, batch, "fp32", "cuda", options, cuda_graph=cuda_graph)
    workload = build_workload(spec)
    return workload.step, 5


CASES: dict[str, Callable[[], tuple[Callable[[], torch.Tensor], int]]] = {
    "resnet50-infer": lambda: _workload_case("resnet50", "infer", 4),
    "resnet50-train": lambda: _workload_case("resnet50", "train", 8),
    "bert-infer": lambda: _workload_case("bert", "infer", 4),
    # Served as a CUDA graph: one cuGraphLaunch per step, its kernels seen only by the profiler.
    "resnet50-graph": lambda: _workload_case("resnet50", "infer", 4, cuda_graph=True),
    "compiled": _compiled_case,
    "compiled-graph": _compiled_graph_case,
    "cupy": _cupy_case,
}


def _library_launches() -> int | None:
    """Launches the preload library counted for this process so far (None without a run)."""
    name = os.environ.get("ORION_RUN")
    if not name:
        return None
    from scheduler_core import native_module

    run = native_module().Run.attach(name, os.environ.get("ORION_DECISIONS", ""))
    try:
        return int(run.client_stats(int(os.environ["ORION_CLIENT"]))["launches"])
    finally:
        run.close()


def _profiled_kernels(step: Callable[[], torch.Tensor]) -> tuple[int, torch.Tensor]:
    """Kernels torch.profiler (CUPTI) saw during one step, counted as orion's measurement pass
    counts them (Kineto's `kernel` events of the exported trace)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from profiler.measure import kernel_rows_from_trace

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as scratch:
        trace = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(trace)
        with open(trace, encoding="utf-8") as handle:
            kernels = kernel_rows_from_trace(json.load(handle))
    return len(kernels), out


def _digest(value: torch.Tensor) -> str:
    data = value.detach().float().cpu().contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def main() -> int:
    case, result_path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    step, warmup = CASES[case]()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    before = _library_launches()
    profiled, out = _profiled_kernels(step)
    after = _library_launches()
    # The output of a fresh step, outside the profiler, for the bit-for-bit comparison.
    digest = _digest(step())
    torch.cuda.synchronize()
    result = {
        "case": case,
        "library_launches": None if before is None else after - before,
        "profiler_kernels": profiled,
        "output_sha256": digest,
        "output_shape": list(out.shape),
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
