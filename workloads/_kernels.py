"""CUDA C++ source of the synthetic kernels, compiled at build time with NVRTC through CuPy.

Kernel names carry the dtype, so profiles of the fp32 and bf16 variants never share an identity.
Every kernel takes 4-byte elements (``float`` or ``__nv_bfloat162``); the copy kernel moves
16 bytes per thread per iteration so that it is limited by DRAM bandwidth, not by issue rate.

The FMA constants are exact in bf16 and keep values bounded: ``x -> x * A + B`` contracts towards
1 (``A = 1 - 2^-8``, ``B = 2^-8``), so any loop length gives finite numbers that a CPU can check.
"""

from __future__ import annotations

FMA_A = 1.0 - 2.0**-8
FMA_B = 2.0**-8
CHAINS = 4  # independent FMA chains per thread (per bf16 lane pair for bf16)

COMPUTE_KERNEL = {"fp32": "orion_fma_chain_f32", "bf16": "orion_fma_chain_bf16"}
COPY_KERNEL = {"fp32": "orion_copy_f32", "bf16": "orion_copy_bf16"}
AXPY_KERNEL = {"fp32": "orion_axpy_f32", "bf16": "orion_axpy_bf16"}

SOURCE = r"""
#include <cuda_bf16.h>

#define ORION_FMA_A 0.99609375f
#define ORION_FMA_B 0.00390625f

typedef unsigned long long u64;

/* Compute-bound: each thread runs four independent FMA chains, so a warp always has independent
   FMAs to issue while earlier ones are in flight. `in` holds 4 * n elements (chain k of thread i
   starts at in[k * n + i]); `out` holds n = gridDim.x * blockDim.x elements, one per thread. */
extern "C" __global__ void orion_fma_chain_f32(const float* __restrict__ in,
                                               float* __restrict__ out, int iterations) {
    const u64 n = (u64)gridDim.x * blockDim.x;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    float x0 = in[i], x1 = in[n + i], x2 = in[2 * n + i], x3 = in[3 * n + i];
#pragma unroll 4
    for (int k = 0; k < iterations; ++k) {
        x0 = fmaf(x0, ORION_FMA_A, ORION_FMA_B);
        x1 = fmaf(x1, ORION_FMA_A, ORION_FMA_B);
        x2 = fmaf(x2, ORION_FMA_A, ORION_FMA_B);
        x3 = fmaf(x3, ORION_FMA_A, ORION_FMA_B);
    }
    out[i] = ((x0 + x1) + x2) + x3;
}

extern "C" __global__ void orion_fma_chain_bf16(const __nv_bfloat162* __restrict__ in,
                                                __nv_bfloat162* __restrict__ out, int iterations) {
    const u64 n = (u64)gridDim.x * blockDim.x;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const __nv_bfloat162 a = __float2bfloat162_rn(ORION_FMA_A);
    const __nv_bfloat162 b = __float2bfloat162_rn(ORION_FMA_B);
    __nv_bfloat162 x0 = in[i], x1 = in[n + i], x2 = in[2 * n + i], x3 = in[3 * n + i];
#pragma unroll 4
    for (int k = 0; k < iterations; ++k) {
        x0 = __hfma2(x0, a, b);
        x1 = __hfma2(x1, a, b);
        x2 = __hfma2(x2, a, b);
        x3 = __hfma2(x3, a, b);
    }
    out[i] = __hadd2(__hadd2(__hadd2(x0, x1), x2), x3);
}

/* Memory-bound: grid-stride copy dst = scale * src over n 16-byte vectors. */
extern "C" __global__ void orion_copy_f32(const float4* __restrict__ src,
                                          float4* __restrict__ dst, u64 n, float scale) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float4 v = src[i];
        v.x *= scale;
        v.y *= scale;
        v.z *= scale;
        v.w *= scale;
        dst[i] = v;
    }
}

struct __align__(16) orion_bf16x8 {
    __nv_bfloat162 h[4];
};

extern "C" __global__ void orion_copy_bf16(const orion_bf16x8* __restrict__ src,
                                           orion_bf16x8* __restrict__ dst, u64 n, float scale) {
    const __nv_bfloat162 s = __float2bfloat162_rn(scale);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        orion_bf16x8 v = src[i];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            v.h[k] = __hmul2(v.h[k], s);
        }
        dst[i] = v;
    }
}

/* The training stand-in's "update": y = alpha * x + y over n 4-byte elements, grid-stride. */
extern "C" __global__ void orion_axpy_f32(const float* __restrict__ x, float* __restrict__ y,
                                          u64 n, float alpha) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = fmaf(alpha, x[i], y[i]);
    }
}

extern "C" __global__ void orion_axpy_bf16(const __nv_bfloat162* __restrict__ x,
                                           __nv_bfloat162* __restrict__ y, u64 n, float alpha) {
    const __nv_bfloat162 a = __float2bfloat162_rn(alpha);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = __hfma2(a, x[i], y[i]);
    }
}
"""
