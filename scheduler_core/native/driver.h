// Finding the real libc and CUDA driver functions, whatever route the application used.
#pragma once

#include "cuda_api.h"

namespace orion::driver {

using DlsymFn = void* (*)(void*, const char*);

// glibc's dlsym, fetched with dlvsym so that our own dlsym interposer is never re-entered.
DlsymFn real_dlsym();

// The driver library, loaded by the application already (RTLD_NOLOAD first).
void* libcuda_handle();

// The driver's own cuGetProcAddress (both ABI versions), never our wrappers.
decltype(&::cuGetProcAddress_v2) real_get_proc_address_v2();
decltype(&::cuGetProcAddress) real_get_proc_address_v1();

// Looks a driver entry point up through the real cuGetProcAddress_v2 (CUDA 12.0 ABI first, then
// the installed driver's version for newer functions), with the per-thread-default-stream flavour
// when `per_thread` is set. nullptr when absent.
void* lookup(const char* symbol, bool per_thread);

// Driver functions orion calls for itself, each resolved once.
struct Helpers {
    cuda::FuncGetNameFn func_get_name = nullptr;
    cuda::KernelGetNameFn kernel_get_name = nullptr;
    cuda::CtxGetCurrentFn ctx_get_current = nullptr;
    cuda::CtxGetStreamPriorityRangeFn ctx_get_stream_priority_range = nullptr;
    cuda::StreamIsCapturingFn stream_is_capturing = nullptr;
    cuda::StreamWriteValue64Fn stream_write_value64 = nullptr;
    cuda::StreamWaitValue32Fn stream_wait_value32 = nullptr;
    cuda::MemHostRegisterFn mem_host_register = nullptr;
    cuda::MemHostGetDevicePointerFn mem_host_get_device_pointer = nullptr;
    cuda::EventCreateFn event_create = nullptr;
    cuda::EventRecordFn event_record = nullptr;
    cuda::StreamWaitEventFn stream_wait_event = nullptr;
    cuda::GraphGetNodesFn graph_get_nodes = nullptr;
    cuda::GraphNodeGetTypeFn graph_node_get_type = nullptr;
    cuda::GraphKernelNodeGetParamsFn graph_kernel_node_get_params = nullptr;
    cuda::EventQueryFn event_query = nullptr;
    cuda::EventElapsedTimeFn event_elapsed_time = nullptr;
    cuda::EventDestroyFn event_destroy = nullptr;
    cuda::EventSynchronizeFn event_synchronize = nullptr;
    cuda::CtxSetCurrentFn ctx_set_current = nullptr;
    cuda::OccupancyMaxActiveBlocksPerMultiprocessorFn occupancy_max_active_blocks = nullptr;
    cuda::KernelGetFunctionFn kernel_get_function = nullptr;
    cuda::ThreadExchangeStreamCaptureModeFn thread_exchange_stream_capture_mode = nullptr;
    cuda::GraphGetEdgesFn graph_get_edges = nullptr;
    cuda::GraphGetEdgesV2Fn graph_get_edges_v2 = nullptr;  // CUDA 12.3+: edges with data
    cuda::GraphAddDependenciesFn graph_add_dependencies = nullptr;
    cuda::GraphAddBatchMemOpNodeFn graph_add_batch_mem_op_node = nullptr;
    cuda::GraphDestroyNodeFn graph_destroy_node = nullptr;
    cuda::GraphCloneFn graph_clone = nullptr;
    cuda::GraphNodeFindInCloneFn graph_node_find_in_clone = nullptr;
    cuda::GraphDestroyFn graph_destroy = nullptr;
    cuda::GraphInstantiateWithFlagsFn graph_instantiate = nullptr;
    cuda::GraphExecDestroyFn graph_exec_destroy = nullptr;
    cuda::GraphMemAllocNodeGetParamsFn graph_mem_alloc_node_get_params = nullptr;
};
const Helpers& helpers();

// The kernel's (mangled) name, nullptr when the driver cannot tell. A launch's handle is either a
// CUfunction (cuModuleGetFunction: CuPy, Triton) or a CUkernel passed in its place (what the CUDA
// runtime hands out since 12.0 for kernels linked into a library: PyTorch, cuBLAS, cuDNN);
// cuFuncGetName only knows the first, cuKernelGetName the second.
const char* kernel_name(CUfunction function);

// How many blocks of `function` fit on one SM at once (the driver's occupancy calculator, from
// the function's registers and static shared memory, the block size and the dynamic shared
// memory); 0 when the driver cannot say. Handles both kinds of launch handle, as kernel_name.
unsigned int blocks_per_sm(CUfunction function, unsigned int block_threads, unsigned int shared_bytes);

}  // namespace orion::driver
