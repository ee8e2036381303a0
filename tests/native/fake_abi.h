// Driver ABI structs the stand-in driver and the test launcher both need, declared once.
#pragma once

using CUresult = int;
struct CUlaunchConfig {  // the driver's layout, as cuLaunchKernelEx takes it
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void* hStream;
    void* attrs;
    unsigned int numAttrs;
};

struct KernelNodeParams {  // CUDA_KERNEL_NODE_PARAMS_v2's layout
    void* func;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void** kernelParams;
    void** extra;
    void* kern;
    void* ctx;
};
