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

// Where memory lives (CUmemLocation): 1 a device, 2 the host (3, 4: host NUMA nodes).
struct MemLocation {
    int type, id;
};
struct MemAllocationProp {  // CUmemAllocationProp
    int type, requestedHandleTypes;
    MemLocation location;
    void* win32HandleMetaData;
    unsigned char allocFlags[8];
};
struct MemPoolProps {  // CUmemPoolProps, 88 bytes
    int allocType, handleTypes;
    MemLocation location;
    void* win32SecurityAttributes;
    unsigned char rest[64];
};
struct MemAllocNodeParams {  // CUDA_MEM_ALLOC_NODE_PARAMS
    MemPoolProps poolProps;
    const void* accessDescs;
    unsigned long accessDescCount;
    unsigned long bytesize;
    unsigned long long dptr;
};
