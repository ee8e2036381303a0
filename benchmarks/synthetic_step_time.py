"""How long a ``synthetic-compute`` training step (batch 16) runs on the GPU, per loop length.

    python benchmarks/synthetic_step_time.py [--iterations 4096 16384] [--steps 500]

Prints, per ``iterations`` value, the GPU time of one step of 17 launches run back to back: the
steps are queued behind a long sleep kernel, so the host is far ahead and the GPU never waits for
a launch. Compared with the host's cost per launch (CuPy's launch path plus orion's hook, in
``benchmarks/launch_overhead.py``), it says whether a client of that loop length saturates the
GPU or is bound by its host thread, which is what `benchmarks/quota_limits.py` needs to know:
only a client that saturates the GPU turns a share of GPU time into that share of its throughput.

On an NVIDIA H100 80GB HBM3 (driver 580.159.04, torch 2.11.0+cu130, CuPy 14.2.0) on 2026-11-24:
352 us per step at 4096 iterations (21 us per launch, about the host's cost of a launch through
CuPy with the hook) and 1296 us per step at 16384 (76 us per launch).
"""

from __future__ import annotations

import argparse

import torch

from workloads.build import build_workload
from workloads.spec import WorkloadSpec

SLEEP_CYCLES = 200_000_000  # about 0.1 s at Hopper clocks: far more than the host needs to queue


def gpu_step_us(iterations: int, steps: int) -> float:
    """Mean GPU time of one step, in microseconds, with the steps run back to back."""
    spec = WorkloadSpec(
        name="synthetic-compute", mode="train", batch_size=16, options={"iterations": iterations}
    )
    workload = build_workload(spec)
    for _ in range(50):  # warm-up: CuPy compiles and caches the kernels
        workload.step()
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        workload.step()
    end.record()
    torch.cuda.synchronize()
    return 1e3 * start.elapsed_time(end) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    for iterations in args.iterations:
        step = gpu_step_us(iterations, args.steps)
        per_launch = step / 17  # 16 launches of the main kernel and the update
        print(f"iterations {iterations}: {step:.1f} us a step, {per_launch:.1f} us a launch (GPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
