#include "driver.h"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>

namespace orion::driver {
namespace {

// The ABI version orion's declarations follow; every function orion calls has kept its
// signature since CUDA 12.0. cuGetProcAddress only returns entry points that exist in the version
// asked for, so functions added later (cuFuncGetName and cuKernelGetName came with 12.3) are
// looked up again with the installed driver's own version.
constexpr int kCudaAbiVersion = 12000;

int installed_driver_version() {
    static const int version = [] {
        using DriverGetVersionFn = CUresult (*)(int*);
        void* handle = libcuda_handle();
        DlsymFn sym = real_dlsym();
        auto get = reinterpret_cast<DriverGetVersionFn>(
            handle != nullptr && sym != nullptr ? sym(handle, "cuDriverGetVersion") : nullptr);
        int found = 0;
        return get != nullptr && get(&found) == CUDA_SUCCESS ? found : 0;
    }();
    return version;
}

void* lookup_at(const char* symbol, bool per_thread, int version) {
    auto get = real_get_proc_address_v2();
    if (get == nullptr) return nullptr;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = 0;
    const cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                        : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    if (get(symbol, &fn, version, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS) {
        return nullptr;
    }
    return fn;
}

}  // namespace

DlsymFn real_dlsym() {
    static const DlsymFn fn = [] {
        // glibc >= 2.34 exports dlsym@GLIBC_2.34; older ones only dlsym@GLIBC_2.2.5.
        for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
            if (void* found = dlvsym(RTLD_NEXT, "dlsym", version)) {
                return reinterpret_cast<DlsymFn>(found);
            }
        }
        return static_cast<DlsymFn>(nullptr);
    }();
    return fn;
}

void* libcuda_handle() {
    static void* handle = [] {
        void* loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        return loaded != nullptr ? loaded : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    }();
    return handle;
}

decltype(&::cuGetProcAddress_v2) real_get_proc_address_v2() {
    static const auto fn = [] {
        void* handle = libcuda_handle();
        DlsymFn sym = real_dlsym();
        return reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(
            handle != nullptr && sym != nullptr ? sym(handle, "cuGetProcAddress_v2") : nullptr);
    }();
    return fn;
}

decltype(&::cuGetProcAddress) real_get_proc_address_v1() {
    static const auto fn = [] {
        void* handle = libcuda_handle();
        DlsymFn sym = real_dlsym();
        return reinterpret_cast<decltype(&::cuGetProcAddress)>(
            handle != nullptr && sym != nullptr ? sym(handle, "cuGetProcAddress") : nullptr);
    }();
    return fn;
}

void* lookup(const char* symbol, bool per_thread) {
    if (void* fn = lookup_at(symbol, per_thread, kCudaAbiVersion)) return fn;
    const int installed = installed_driver_version();
    return installed > kCudaAbiVersion ? lookup_at(symbol, per_thread, installed) : nullptr;
}

const Helpers& helpers() {
    static const Helpers resolved = [] {
        Helpers h;
        h.func_get_name = reinterpret_cast<cuda::FuncGetNameFn>(lookup("cuFuncGetName", false));
        h.kernel_get_name =
            reinterpret_cast<cuda::KernelGetNameFn>(lookup("cuKernelGetName", false));
        h.ctx_get_current =
            reinterpret_cast<cuda::CtxGetCurrentFn>(lookup("cuCtxGetCurrent", false));
        h.ctx_get_stream_priority_range = reinterpret_cast<cuda::CtxGetStreamPriorityRangeFn>(
            lookup("cuCtxGetStreamPriorityRange", false));
        h.stream_is_capturing =
            reinterpret_cast<cuda::StreamIsCapturingFn>(lookup("cuStreamIsCapturing", false));
        h.stream_write_value64 =
            reinterpret_cast<cuda::StreamWriteValue64Fn>(lookup("cuStreamWriteValue64", false));
        h.stream_wait_value32 =
            reinterpret_cast<cuda::StreamWaitValue32Fn>(lookup("cuStreamWaitValue32", false));
        h.mem_host_register =
            reinterpret_cast<cuda::MemHostRegisterFn>(lookup("cuMemHostRegister", false));
        h.mem_host_get_device_pointer = reinterpret_cast<cuda::MemHostGetDevicePointerFn>(
            lookup("cuMemHostGetDevicePointer", false));
        h.event_create = reinterpret_cast<cuda::EventCreateFn>(lookup("cuEventCreate", false));
        h.event_record = reinterpret_cast<cuda::EventRecordFn>(lookup("cuEventRecord", false));
        h.stream_wait_event =
            reinterpret_cast<cuda::StreamWaitEventFn>(lookup("cuStreamWaitEvent", false));
        h.graph_get_nodes =
            reinterpret_cast<cuda::GraphGetNodesFn>(lookup("cuGraphGetNodes", false));
        h.graph_node_get_type =
            reinterpret_cast<cuda::GraphNodeGetTypeFn>(lookup("cuGraphNodeGetType", false));
        // Asked for at the CUDA 12.0 ABI: the driver hands out the _v2 parameter layout.
        h.graph_kernel_node_get_params = reinterpret_cast<cuda::GraphKernelNodeGetParamsFn>(
            lookup("cuGraphKernelNodeGetParams", false));
        h.event_query = reinterpret_cast<cuda::EventQueryFn>(lookup("cuEventQuery", false));
        h.event_elapsed_time =
            reinterpret_cast<cuda::EventElapsedTimeFn>(lookup("cuEventElapsedTime", false));
        h.event_destroy = reinterpret_cast<cuda::EventDestroyFn>(lookup("cuEventDestroy", false));
        h.ctx_set_current =
            reinterpret_cast<cuda::CtxSetCurrentFn>(lookup("cuCtxSetCurrent", false));
        h.occupancy_max_active_blocks =
            reinterpret_cast<cuda::OccupancyMaxActiveBlocksPerMultiprocessorFn>(
                lookup("cuOccupancyMaxActiveBlocksPerMultiprocessor", false));
        h.kernel_get_function =
            reinterpret_cast<cuda::KernelGetFunctionFn>(lookup("cuKernelGetFunction", false));
        h.thread_exchange_stream_capture_mode =
            reinterpret_cast<cuda::ThreadExchangeStreamCaptureModeFn>(
                lookup("cuThreadExchangeStreamCaptureMode", false));
        // At the CUDA 12.0 ABI: the forms without edge data (graph_gating.cpp).
        h.graph_get_edges =
            reinterpret_cast<cuda::GraphGetEdgesFn>(lookup("cuGraphGetEdges", false));
        h.graph_add_dependencies = reinterpret_cast<cuda::GraphAddDependenciesFn>(
            lookup("cuGraphAddDependencies", false));
        h.graph_add_batch_mem_op_node = reinterpret_cast<cuda::GraphAddBatchMemOpNodeFn>(
            lookup("cuGraphAddBatchMemOpNode", false));
        h.graph_destroy_node =
            reinterpret_cast<cuda::GraphDestroyNodeFn>(lookup("cuGraphDestroyNode", false));
        return h;
    }();
    return resolved;
}

const char* kernel_name(CUfunction function) {
    const Helpers& h = helpers();
    const char* name = nullptr;
    if (h.func_get_name != nullptr && h.func_get_name(&name, function) == CUDA_SUCCESS &&
        name != nullptr) {
        return name;
    }
    name = nullptr;
    if (h.kernel_get_name != nullptr &&
        h.kernel_get_name(&name, reinterpret_cast<CUkernel>(function)) == CUDA_SUCCESS) {
        return name;
    }
    return nullptr;
}

unsigned int blocks_per_sm(CUfunction function, unsigned int block_threads,
                           unsigned int shared_bytes) {
    const Helpers& h = helpers();
    if (h.occupancy_max_active_blocks == nullptr || function == nullptr || block_threads == 0) {
        return 0;
    }
    int blocks = 0;
    if (h.occupancy_max_active_blocks(&blocks, function, static_cast<int>(block_threads),
                                      shared_bytes) == CUDA_SUCCESS &&
        blocks > 0) {
        return static_cast<unsigned int>(blocks);
    }
    // A CUkernel passed as a function: ask for its function in the current context.
    CUfunction resolved = nullptr;
    blocks = 0;
    if (h.kernel_get_function != nullptr &&
        h.kernel_get_function(&resolved, reinterpret_cast<CUkernel>(function)) == CUDA_SUCCESS &&
        resolved != nullptr &&
        h.occupancy_max_active_blocks(&blocks, resolved, static_cast<int>(block_threads),
                                      shared_bytes) == CUDA_SUCCESS &&
        blocks > 0) {
        return static_cast<unsigned int>(blocks);
    }
    return 0;
}

}  // namespace orion::driver
