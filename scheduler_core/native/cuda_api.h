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
using cuuint32_t = std::uint32_t;

struct CUctx_st;
struct CUstream_st;
struct CUfunc_st;
struct CUkern_st;
struct CUevent_st;
struct CUgraphExec_st;
struct CUgraph_st;
struct CUmod_st;
struct CUlib_st;
struct CUgraphNode_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUfunction = CUfunc_st*;
using CUkernel = CUkern_st*;
using CUevent = CUevent_st*;
using CUgraphExec = CUgraphExec_st*;
using CUgraph = CUgraph_st*;
using CUmodule = CUmod_st*;
using CUlibrary = CUlib_st*;
using CUgraphNode = CUgraphNode_st*;
using CUgraphNodeType = int;
using CUmemGenericAllocationHandle = unsigned long long;  // NOLINT(google-runtime-int): ABI type
struct CUmemPoolHandle_st;
using CUmemoryPool = CUmemPoolHandle_st*;
// Where memory lives (CUmemLocation): orion reads only whether it is the device's (memory of
// the host, which the virtual-memory API and pools can also make, is not GPU memory).
using CUmemLocationType = int;
constexpr CUmemLocationType CU_MEM_LOCATION_TYPE_DEVICE = 1;
struct CUmemLocation {
    CUmemLocationType type;
    int id;
};
// cuMemCreate's properties (CUmemAllocationProp): read for their location only.
struct CUmemAllocationProp_st {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void* win32HandleMetaData;
    unsigned char allocFlags[8];
};
using CUmemAllocationProp = CUmemAllocationProp_st;
// A pool's properties (CUmemPoolProps, 88 bytes in CUDA 11 to 13): read for their location only.
struct CUmemPoolProps {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void* win32SecurityAttributes;
    unsigned char rest[64];
};
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes");
// A graph memory-allocation node's parameters (CUDA_MEM_ALLOC_NODE_PARAMS, v1 and v2 alike).
struct CUDA_MEM_ALLOC_NODE_PARAMS {
    CUmemPoolProps poolProps;
    const void* accessDescs;
    std::size_t accessDescCount;
    std::size_t bytesize;
    CUdeviceptr dptr;
};
using CUmemPool_attribute = int;
constexpr CUmemPool_attribute CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;
struct CUarray_st;
using CUarray = CUarray_st*;
struct CUmipmappedArray_st;
using CUmipmappedArray = CUmipmappedArray_st*;
// cuda.h's array descriptors (CUarray_format is an int-sized enum); read for their size only.
struct CUDA_ARRAY_DESCRIPTOR {
    std::size_t Width;
    std::size_t Height;
    int Format;
    unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
    std::size_t Width;
    std::size_t Height;
    std::size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
};
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_KERNEL = 0;
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_GRAPH = 4;  // a child graph
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10;
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_MEM_FREE = 11;
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_BATCH_MEM_OP = 12;
constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_CONDITIONAL = 13;
// Instantiation flags orion reads (CUgraphInstantiate_flags).
constexpr unsigned long long CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH = 4;     // NOLINT
constexpr unsigned long long CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY = 8;  // NOLINT
// cuGraphInstantiateWithParams' parameters (CUDA_GRAPH_INSTANTIATE_PARAMS): orion reads `flags`.
struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
    unsigned long long flags;  // NOLINT(google-runtime-int): ABI type
    void* hUploadStream;
    void* hErrNode_out;
    int result_out;
};

// A kernel node's parameters (CUDA 12's CUDA_KERNEL_NODE_PARAMS_v2, what cuGraphKernelNodeGetParams
// fills when fetched for CUDA 12.0 or later). `func` may be a CUkernel, as for launches; `kern`,
// when set, is the library kernel itself.
struct CUDA_KERNEL_NODE_PARAMS_v2 {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void** kernelParams;
    void** extra;
    CUkernel kern;
    CUcontext ctx;
};

// One operation of a batch memory-operation node (CUstreamBatchMemOpParams, a 48-byte union whose
// first member is the operation). orion only writes the wait-value member: the same wait as
// cuStreamWaitValue32, as a node of a graph.
using CUstreamBatchMemOpType = int;
constexpr CUstreamBatchMemOpType CU_STREAM_MEM_OP_WAIT_VALUE_32 = 1;
union CUstreamBatchMemOpParams {
    CUstreamBatchMemOpType operation;
    struct CUstreamMemOpWaitValueParams_st {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags;
        CUdeviceptr alias;  // for the driver's internal use
    } waitValue;
    cuuint64_t pad[6];
};
static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "CUstreamBatchMemOpParams is 48 bytes");
static_assert(offsetof(CUstreamBatchMemOpParams, waitValue.address) == 8, "ABI layout");
static_assert(offsetof(CUstreamBatchMemOpParams, waitValue.flags) == 24, "ABI layout");

// A batch memory-operation node's parameters (CUDA_BATCH_MEM_OP_NODE_PARAMS, the v1 layout that
// cuGraphAddBatchMemOpNode takes).
struct CUDA_BATCH_MEM_OP_NODE_PARAMS {
    CUcontext ctx;
    unsigned int count;
    CUstreamBatchMemOpParams* paramArray;
    unsigned int flags;
};

// One device's launch of cuLaunchCooperativeKernelMultiDevice.
struct CUDA_LAUNCH_PARAMS {
    CUfunction function;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void** kernelParams;
};

// Passed through untouched by orion.
struct CUDA_GRAPH_INSTANTIATE_PARAMS_st;
using CUDA_GRAPH_INSTANTIATE_PARAMS = CUDA_GRAPH_INSTANTIATE_PARAMS_st;

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
using CUstreamCaptureMode = int;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

// Special stream handles.
inline CUstream cu_stream_legacy() { return reinterpret_cast<CUstream>(0x1); }
inline CUstream cu_stream_per_thread() { return reinterpret_cast<CUstream>(0x2); }

constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0;
constexpr cuuint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;

constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x01;
constexpr unsigned int CU_MEMHOSTREGISTER_DEVICEMAP = 0x02;
constexpr unsigned int CU_EVENT_DEFAULT = 0x0;
constexpr unsigned int CU_EVENT_BLOCKING_SYNC = 0x1;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned int CU_STREAM_DEFAULT = 0x0;
constexpr unsigned int CU_STREAM_WRITE_VALUE_DEFAULT = 0x0;
constexpr unsigned int CU_STREAM_WAIT_VALUE_AND = 0x2;  // until (*addr & value) != 0
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;

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
// Deprecated launch routes, still exported by the driver: counted and gated like the others. The
// legacy three take their block shape from an earlier cuFuncSetBlockShape, which orion does not
// see, so their kernels are unknown to the profile (gated conservatively).
CUresult cuLaunch(CUfunction f);
CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height);
CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream);
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                              unsigned int numDevices, unsigned int flags);
// Graph instantiation: orion hooks the two entry points with one ABI in every CUDA version (the
// plain `cuGraphInstantiate` name changed signature between CUDA 11 and 12, so a wrapper could
// call the wrong one), reads the graph's kernel nodes and remembers the executable's identity.
CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                     unsigned long long flags);  // NOLINT(google-runtime-int)
CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
// Executables changed in place (CUDA 12 ABI; cuda.h maps the base names to the `_v2` symbols).
struct CUgraphExecUpdateResultInfo_st;  // passed through untouched
using CUgraphExecUpdateResultInfo = CUgraphExecUpdateResultInfo_st;
struct CUgraphNodeParams_st;  // passed through untouched
using CUgraphNodeParams = CUgraphNodeParams_st;
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                              CUgraphExecUpdateResultInfo* resultInfo);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams);
CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                  CUgraphNodeParams* nodeParams);
// The other per-node setters of an executable: followed into a segmented BE graph's segments
// (graph_segments.h). Their parameters pass through untouched.
struct CUDA_MEMCPY3D_st;
struct CUDA_MEMSET_NODE_PARAMS_st;
struct CUDA_HOST_NODE_PARAMS_st;
struct CUDA_EXT_SEM_SIGNAL_NODE_PARAMS_st;
struct CUDA_EXT_SEM_WAIT_NODE_PARAMS_st;
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMCPY3D_st* copyParams, CUcontext ctx);
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMSET_NODE_PARAMS_st* memsetParams,
                                        CUcontext ctx);
CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      const CUDA_HOST_NODE_PARAMS_st* nodeParams);
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            CUgraph childGraph);
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            CUevent event);
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                          CUevent event);
CUresult cuGraphExecExternalSemaphoresSignalNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS_st* params);
CUresult cuGraphExecExternalSemaphoresWaitNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_EXT_SEM_WAIT_NODE_PARAMS_st* params);
CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams);
CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled);
// Unloading code: a function handle of the unloaded module may come back for another kernel, so
// orion forgets every kernel name it cached.
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuLibraryUnload(CUlibrary library);
CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags);
CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
// Memory: every allocation route is counted against the client's limit (memory_ledger.h). The
// `_v2` names are the exported symbols behind cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2);
// cuGetProcAddress hands them out under the base name.
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytesize);
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pPitch, std::size_t WidthInBytes,
                            std::size_t Height, unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                     const CUmemAllocationProp* prop,
                     unsigned long long flags);  // NOLINT(google-runtime-int)
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total);
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice dev);
// CUDA arrays (textures, surfaces), plain and mipmapped: device memory too (array_hooks.cpp).
CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray);
CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray);
CUresult cuArrayDestroy(CUarray hArray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                unsigned int numMipmapLevels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);
// Stream-ordered pools (memory_hooks.cpp): where a pool lives, how much freed memory it may keep
// (its release threshold), trimming and destroying it, and which pool cuMemAllocAsync uses.
CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, std::size_t minBytesToKeep);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev);
CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev);
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);
// The context's own device memory a program can grow (memory_ledger.h): the device-side malloc
// heap, the printf FIFO and the per-thread stack.
using CUlimit = int;
constexpr CUlimit CU_LIMIT_STACK_SIZE = 0x00;
constexpr CUlimit CU_LIMIT_PRINTF_FIFO_SIZE = 0x01;
constexpr CUlimit CU_LIMIT_MALLOC_HEAP_SIZE = 0x02;
CUresult cuCtxSetLimit(CUlimit limit, std::size_t value);

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
using StreamWaitValue32Fn = CUresult (*)(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags);
using MemHostRegisterFn = CUresult (*)(void* p, std::size_t bytesize, unsigned int Flags);
using MemHostGetDevicePointerFn = CUresult (*)(CUdeviceptr* pdptr, void* p, unsigned int Flags);
using EventCreateFn = CUresult (*)(CUevent* phEvent, unsigned int Flags);
using EventRecordFn = CUresult (*)(CUevent hEvent, CUstream hStream);
using StreamWaitEventFn = CUresult (*)(CUstream hStream, CUevent hEvent, unsigned int Flags);
using GraphGetNodesFn = CUresult (*)(CUgraph hGraph, CUgraphNode* nodes, std::size_t* numNodes);
using GraphNodeGetTypeFn = CUresult (*)(CUgraphNode hNode, CUgraphNodeType* type);
using GraphKernelNodeGetParamsFn = CUresult (*)(CUgraphNode hNode,
                                                CUDA_KERNEL_NODE_PARAMS_v2* nodeParams);
using EventQueryFn = CUresult (*)(CUevent hEvent);
using EventElapsedTimeFn = CUresult (*)(float* pMilliseconds, CUevent hStart, CUevent hEnd);
using EventDestroyFn = CUresult (*)(CUevent hEvent);
using EventSynchronizeFn = CUresult (*)(CUevent hEvent);
using CtxSetCurrentFn = CUresult (*)(CUcontext ctx);
using OccupancyMaxActiveBlocksPerMultiprocessorFn = CUresult (*)(int* numBlocks, CUfunction func,
                                                                 int blockSize,
                                                                 std::size_t dynamicSMemSize);
using KernelGetFunctionFn = CUresult (*)(CUfunction* pFunc, CUkernel kernel);
using ThreadExchangeStreamCaptureModeFn = CUresult (*)(CUstreamCaptureMode* mode);
// Rewriting a BE graph with gate waits (graph_gating.cpp), at the ABI versions orion asks for:
// cuGraphGetEdges and cuGraphAddDependencies as in CUDA 10.0 (no edge data; cuGetProcAddress at
// 12.0 hands these out), cuGraphAddBatchMemOpNode as in CUDA 11.7, cuGraphDestroyNode.
using GraphGetEdgesFn = CUresult (*)(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to,
                                     std::size_t* numEdges);
// CUDA 12.3's form, with each edge's data (read, never interpreted): the 10.0 form refuses a graph
// whose edges carry data (CUDA_ERROR_LOSSY_QUERY), as XLA's programmatic-launch edges do.
struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
};
using GraphGetEdgesV2Fn = CUresult (*)(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to,
                                       CUgraphEdgeData_st* edgeData, std::size_t* numEdges);
using GraphAddDependenciesFn = CUresult (*)(CUgraph hGraph, const CUgraphNode* from,
                                            const CUgraphNode* to, std::size_t numDependencies);
using GraphAddBatchMemOpNodeFn = CUresult (*)(CUgraphNode* phGraphNode, CUgraph hGraph,
                                              const CUgraphNode* dependencies,
                                              std::size_t numDependencies,
                                              const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams);
using GraphDestroyNodeFn = CUresult (*)(CUgraphNode hNode);
// Splitting a BE graph into segments (graph_segments.cpp): clones pruned to a segment each,
// instantiated and destroyed with the driver's own calls, never orion's wrappers.
using GraphCloneFn = CUresult (*)(CUgraph* phGraphClone, CUgraph originalGraph);
using GraphNodeFindInCloneFn = CUresult (*)(CUgraphNode* phNode, CUgraphNode hOriginalNode,
                                            CUgraph hClonedGraph);
using GraphDestroyFn = CUresult (*)(CUgraph hGraph);
using GraphInstantiateWithFlagsFn = CUresult (*)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags);  // NOLINT
using GraphExecDestroyFn = CUresult (*)(CUgraphExec hGraphExec);
// A graph's memory-allocation nodes, counted when the graph is instantiated (graph_memory.cpp).
using GraphMemAllocNodeGetParamsFn = CUresult (*)(CUgraphNode hNode,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS* params_out);

}  // namespace orion::cuda
