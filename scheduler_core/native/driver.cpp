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

// The real driver's exported `symbol`, through the real dlsym (nullptr without a driver).
template <typename Fn>
Fn libcuda_symbol(const char* symbol) {
    void* handle = libcuda_handle();
    DlsymFn sym = real_dlsym();
    return reinterpret_cast<Fn>(handle != nullptr && sym != nullptr ? sym(handle, symbol)
                                                                    : nullptr);
}

// `fn` set to the driver's `symbol` as a legacy-stream caller gets it (nullptr where it has none).
template <typename Fn>
void resolve(Fn& fn, const char* symbol) {
    fn = reinterpret_cast<Fn>(lookup(symbol, false));
}

int installed_driver_version() {
    static const int version = [] {
        auto get = libcuda_symbol<CUresult (*)(int*)>("cuDriverGetVersion");
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
    static const auto fn = libcuda_symbol<decltype(&::cuGetProcAddress_v2)>("cuGetProcAddress_v2");
    return fn;
}

decltype(&::cuGetProcAddress) real_get_proc_address_v1() {
    static const auto fn = libcuda_symbol<decltype(&::cuGetProcAddress)>("cuGetProcAddress");
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
        resolve(h.func_get_name, "cuFuncGetName");
        resolve(h.kernel_get_name, "cuKernelGetName");
        resolve(h.ctx_get_current, "cuCtxGetCurrent");
        resolve(h.ctx_get_stream_priority_range, "cuCtxGetStreamPriorityRange");
        resolve(h.stream_is_capturing, "cuStreamIsCapturing");
        resolve(h.stream_write_value64, "cuStreamWriteValue64");
        resolve(h.stream_wait_value32, "cuStreamWaitValue32");
        resolve(h.mem_host_register, "cuMemHostRegister");
        resolve(h.mem_host_get_device_pointer, "cuMemHostGetDevicePointer");
        resolve(h.event_create, "cuEventCreate");
        resolve(h.event_record, "cuEventRecord");
        resolve(h.stream_wait_event, "cuStreamWaitEvent");
        resolve(h.graph_get_nodes, "cuGraphGetNodes");
        resolve(h.graph_node_get_type, "cuGraphNodeGetType");
        // Asked for at the CUDA 12.0 ABI: the driver hands out the _v2 parameter layout.
        resolve(h.graph_kernel_node_get_params, "cuGraphKernelNodeGetParams");
        resolve(h.event_query, "cuEventQuery");
        resolve(h.event_elapsed_time, "cuEventElapsedTime");
        resolve(h.event_destroy, "cuEventDestroy");
        resolve(h.event_synchronize, "cuEventSynchronize");
        resolve(h.ctx_set_current, "cuCtxSetCurrent");
        resolve(h.occupancy_max_active_blocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
        resolve(h.kernel_get_function, "cuKernelGetFunction");
        resolve(h.thread_exchange_stream_capture_mode, "cuThreadExchangeStreamCaptureMode");
        // At the CUDA 12.0 ABI: the forms without edge data (graph_gating.cpp).
        resolve(h.graph_get_edges, "cuGraphGetEdges");
        h.graph_get_edges_v2 =
            libcuda_symbol<cuda::GraphGetEdgesV2Fn>("cuGraphGetEdges_v2");  // exported as is
        resolve(h.graph_add_dependencies, "cuGraphAddDependencies");
        resolve(h.graph_add_batch_mem_op_node, "cuGraphAddBatchMemOpNode");
        resolve(h.graph_destroy_node, "cuGraphDestroyNode");
        // Segments of BE graphs (graph_segments.cpp): the driver's own calls, not the hooks.
        resolve(h.graph_clone, "cuGraphClone");
        resolve(h.graph_node_find_in_clone, "cuGraphNodeFindInClone");
        resolve(h.graph_destroy, "cuGraphDestroy");
        resolve(h.graph_instantiate, "cuGraphInstantiateWithFlags");
        resolve(h.graph_exec_destroy, "cuGraphExecDestroy");
        resolve(h.graph_mem_alloc_node_get_params, "cuGraphMemAllocNodeGetParams");
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
