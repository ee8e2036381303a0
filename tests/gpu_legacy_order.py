"""A GPU program whose answer depends on the legacy default stream's ordering (for
tests/test_scheduler_gpu.py): a slow kernel on the legacy stream writes a buffer, then a kernel on
a blocking stream of the program's own (CuPy's default ``Stream()``) reads it. CUDA orders the
second after the first; a library that moves the first to another blocking stream without
keeping that order lets the reader see zeros. Prints the number of wrong elements (0 is right).
"""

from __future__ import annotations

import sys

import cupy as cp

WRITE_SLOWLY = r"""
extern "C" __global__ void write_slowly(float* out, int n, long long spin) {
    long long start = clock64();
    while (clock64() - start < spin) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 1.0f;
}
"""
COPY = r"""
extern "C" __global__ void copy(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
"""


def main() -> int:
    n = 1 << 20
    write = cp.RawKernel(WRITE_SLOWLY, "write_slowly")
    copy = cp.RawKernel(COPY, "copy")
    wrong = 0
    for _ in range(5):
        source = cp.zeros(n, dtype=cp.float32)
        target = cp.zeros(n, dtype=cp.float32)
        cp.cuda.Device().synchronize()
        # About 20 ms of spinning on the legacy default stream (CuPy's null stream).
        write(((n + 255) // 256,), (256,), (source, cp.int32(n), cp.int64(40_000_000)))
        reader = cp.cuda.Stream()  # a blocking stream: must wait for the legacy stream's work
        with reader:
            copy(((n + 255) // 256,), (256,), (source, target, cp.int32(n)))
        reader.synchronize()
        wrong += int((target != 1.0).sum())
    print(wrong)
    return 0


if __name__ == "__main__":
    sys.exit(main())
