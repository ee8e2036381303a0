// The few CUDA driver types and entry points orion uses, declared here so that building the
// library needs only a C++ compiler: no CUDA toolkit, no cuda.h. The real functions are resolved
// at run time from libcuda.so.1. Layouts and values follow the driver API's public ABI (CUDA 12/13).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): ABI type
using cuuint64_t = std::uint64_t;

struct CUctx_st;
struct CUstream_st;
struct CUfunc_st;
struct CUkern_st;
struct CUevent_st;
struct CUgraphExec_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUfunction = CUfunc_st*;
using CUkernel = CUkern_st*;
using CUevent = CUevent_st*;
using CUgraphExec = CUgraphExec_st*;

// Opaque to orion: launch attributes are passed through untouched.
struct CUlaunchAttribute_st;
using CUlaunchAttribute = CUlaunchAttribute_st;

struct CUlaunchConfig {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
};

using CUdriverProcAddressQueryResult = int;
using CUstreamCaptureStatus = int;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;

// Special stream handles.
inline CUstream cu_stream_legacy() { return reinterpret_cast<CUstream>(0x1); }
inline CUstream cu_stream_per_thread() { return reinterpret_cast<CUstream>(0x2); }

constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0;
constexpr cuuint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;

constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x01;
constexpr unsigned int CU_MEMHOSTREGISTER_DEVICEMAP = 0x02;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned int CU_STREAM_DEFAULT = 0x0;
constexpr unsigned int CU_STREAM_WRITE_VALUE_DEFAULT = 0x0;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;

// Hooked entry points (the preload library defines functions with these exact signatures).
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                          void** extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void** kernelParams);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags);
CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);

}  // extern "C"

namespace orion::cuda {

// Driver functions orion calls but never hooks. Typed pointers, resolved once at run time.
using FuncGetNameFn = CUresult (*)(const char** name, CUfunction hfunc);
using KernelGetNameFn = CUresult (*)(const char** name, CUkernel hfunc);
using CtxGetCurrentFn = CUresult (*)(CUcontext* pctx);
using CtxGetStreamPriorityRangeFn = CUresult (*)(int* leastPriority, int* greatestPriority);
using StreamIsCapturingFn = CUresult (*)(CUstream hStream, CUstreamCaptureStatus* captureStatus);
using StreamWriteValue64Fn = CUresult (*)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags);
using MemHostRegisterFn = CUresult (*)(void* p, std::size_t bytesize, unsigned int Flags);
using MemHostGetDevicePointerFn = CUresult (*)(CUdeviceptr* pdptr, void* p, unsigned int Flags);
using EventCreateFn = CUresult (*)(CUevent* phEvent, unsigned int Flags);
using EventRecordFn = CUresult (*)(CUevent hEvent, CUstream hStream);
using StreamWaitEventFn = CUresult (*)(CUstream hStream, CUevent hEvent, unsigned int Flags);

}  // namespace orion::cuda
