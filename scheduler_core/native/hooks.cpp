// The interception layer: every route by which a launch can reach the driver leads here.
//
// 1. Direct linking: this library exports the hooked driver symbols, so LD_PRELOAD interposes them.
// 2. dlsym: libcudart, cuBLAS, cuDNN and Triton find the driver with dlsym on their own
//    dlopen("libcuda.so.1") handle; our dlsym hands back wrappers for hooked symbols.
// 3. cuGetProcAddress(_v2): CUDA 12/13 runtimes fetch every entry point through it; our version
//    calls the driver's and swaps hooked entry points for wrappers, per-thread variants included.
// Each wrapper calls the real function exactly once, so every launch is seen exactly once.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "client_runtime.h"
#include "driver.h"
#include "graph_memory.h"
#include "hooked_symbols.h"
#include "nvml_hooks.h"

#define ORION_EXPORT extern "C" __attribute__((visibility("default")))

// The per-thread-default-stream variants share their base function's type.
#define ORION_DECLARE_PTSZ(name) extern "C" decltype(::name) name##_ptsz;
ORION_HOOKS_WITH_PTSZ(ORION_DECLARE_PTSZ)
#undef ORION_DECLARE_PTSZ

namespace orion::hooks {
namespace {

constexpr int kHookCount = static_cast<int>(HookId::kCount);

struct HookSymbol {
    const char* name;
    HookId id;
    int variant;
    void* wrapper;
    bool getproc_only = false;  // a base name whose dlsym symbol is an older ABI
    int since = 0;              // getproc_only: the first CUDA version with this ABI
};

#define ORION_ENTRY_PTSZ(name)                                                      \
    {#name, HookId::name, kLegacy, reinterpret_cast<void*>(&::name)},               \
        {#name "_ptsz", HookId::name, kPerThread, reinterpret_cast<void*>(&::name##_ptsz)},
#define ORION_ENTRY_PLAIN(name) {#name, HookId::name, kLegacy, reinterpret_cast<void*>(&::name)},
// The base name first: base_name() hands it to the driver's cuGetProcAddress.
#define ORION_ENTRY_VERSIONED(name, exported, since)                                   \
    {#name, HookId::name, kLegacy, reinterpret_cast<void*>(&::exported), true, since}, \
        {#exported, HookId::name, kLegacy, reinterpret_cast<void*>(&::exported), false, 0},
const HookSymbol kHookSymbols[] = {ORION_HOOKS_WITH_PTSZ(ORION_ENTRY_PTSZ)
                                       ORION_HOOKS_PLAIN(ORION_ENTRY_PLAIN)
                                           ORION_HOOKS_VERSIONED(ORION_ENTRY_VERSIONED)};
#undef ORION_ENTRY_PTSZ
#undef ORION_ENTRY_PLAIN
#undef ORION_ENTRY_VERSIONED

std::atomic<void*> g_real[kHookCount][2];

bool has_per_thread_variant(HookId id) {
    for (const HookSymbol& symbol : kHookSymbols) {
        if (symbol.id == id && symbol.variant == kPerThread) return true;
    }
    return false;
}

const char* base_name(HookId id) {
    for (const HookSymbol& symbol : kHookSymbols) {
        if (symbol.id == id && symbol.variant == kLegacy) return symbol.name;
    }
    return nullptr;
}

void* wrapper_for(HookId id, int variant) {
    for (const HookSymbol& symbol : kHookSymbols) {
        if (symbol.id == id && symbol.variant == variant) return symbol.wrapper;
    }
    return nullptr;
}

bool is_own_function(void* address) {
    if (address == reinterpret_cast<void*>(&::cuGetProcAddress) ||
        address == reinterpret_cast<void*>(&::cuGetProcAddress_v2)) {
        return true;
    }
    for (const HookSymbol& symbol : kHookSymbols) {
        if (symbol.wrapper == address) return true;
    }
    return false;
}

void* intercept_get_proc_address(void* real) {
    if (!ClientRuntime::instance().active()) return real;
    if (real == reinterpret_cast<void*>(driver::real_get_proc_address_v2())) {
        return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
    }
    if (real == reinterpret_cast<void*>(driver::real_get_proc_address_v1())) {
        return reinterpret_cast<void*>(&::cuGetProcAddress);
    }
    return real;
}

// RTLD_NEXT means "after the object that called dlsym". Our forwarding call would make it "after
// orion", so emulate it: search the objects loaded after the caller, in load order.
void* next_symbol(const char* symbol, const void* caller) {
    const driver::DlsymFn real = driver::real_dlsym();
    Dl_info caller_info{};
    link_map* caller_map = nullptr;
    if (dladdr1(caller, &caller_info, reinterpret_cast<void**>(&caller_map), RTLD_DL_LINKMAP) ==
            0 ||
        caller_map == nullptr) {
        return real(RTLD_NEXT, symbol);
    }
    Dl_info own_info{};
    if (dladdr(reinterpret_cast<void*>(&next_symbol), &own_info) != 0 &&
        own_info.dli_fbase == caller_info.dli_fbase) {
        return real(RTLD_NEXT, symbol);
    }
    for (link_map* map = caller_map->l_next; map != nullptr; map = map->l_next) {
        if (map->l_name == nullptr || map->l_name[0] == '\0') continue;
        void* handle = dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (handle == nullptr) continue;
        void* found = real(handle, symbol);
        dlclose(handle);
        Dl_info found_info{};
        if (found != nullptr && dladdr(found, &found_info) != 0 && found_info.dli_fname != nullptr &&
            std::strcmp(found_info.dli_fname, map->l_name) == 0) {
            return found;
        }
    }
    return nullptr;
}

}  // namespace

void* real_function(HookId id, int variant) {
    if (variant != kLegacy && !has_per_thread_variant(id)) variant = kLegacy;
    void* fn = g_real[static_cast<int>(id)][variant].load(std::memory_order_acquire);
    if (fn != nullptr) return fn;
    fn = driver::lookup(base_name(id), variant == kPerThread);
    if (fn != nullptr && !is_own_function(fn)) {
        void* expected = nullptr;
        g_real[static_cast<int>(id)][variant].compare_exchange_strong(expected, fn,
                                                                      std::memory_order_acq_rel);
        return g_real[static_cast<int>(id)][variant].load(std::memory_order_acquire);
    }
    return nullptr;
}

void* intercept(const char* symbol, void* real, int variant_hint, int getproc_version) {
    if (real == nullptr || is_own_function(real)) return real;
    if (std::strcmp(symbol, "cuGetProcAddress") == 0 ||
        std::strcmp(symbol, "cuGetProcAddress_v2") == 0) {
        return intercept_get_proc_address(real);
    }
    for (const HookSymbol& entry : kHookSymbols) {
        if (std::strcmp(entry.name, symbol) != 0) continue;
        if (entry.getproc_only && getproc_version < entry.since) return real;
        int variant = entry.variant;
        if (variant == kLegacy && variant_hint == kPerThread && has_per_thread_variant(entry.id)) {
            variant = kPerThread;
        }
        void* expected = nullptr;
        g_real[static_cast<int>(entry.id)][variant].compare_exchange_strong(
            expected, real, std::memory_order_acq_rel);
        return ClientRuntime::instance().active() ? wrapper_for(entry.id, variant) : real;
    }
    return real;
}

}  // namespace orion::hooks

using orion::ClientRuntime;
using orion::LaunchShape;
using orion::LaunchTicket;
namespace hooks = orion::hooks;

namespace {

constexpr CUresult kNotFound = CUDA_ERROR_NOT_FOUND;

CUresult launch_kernel(int variant, CUfunction f, unsigned int gx, unsigned int gy,
                       unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                       unsigned int shared, CUstream stream, void** params, void** extra) {
    auto real = hooks::real_cuLaunchKernel(variant);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
    LaunchShape shape{f, {gx, gy, gz}, {bx, by, bz}};
    shape.shared_bytes = shared;
    const LaunchTicket ticket = runtime.before_launch(shape, stream, variant);
    const CUresult result = real(f, gx, gy, gz, bx, by, bz, shared, ticket.stream, params, extra);
    runtime.after_launch(ticket, result);
    return result;
}

CUresult launch_kernel_ex(int variant, const CUlaunchConfig* config, CUfunction f, void** params,
                          void** extra) {
    auto real = hooks::real_cuLaunchKernelEx(variant);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active() || config == nullptr) return real(config, f, params, extra);
    LaunchShape shape{f,
                      {config->gridDimX, config->gridDimY, config->gridDimZ},
                      {config->blockDimX, config->blockDimY, config->blockDimZ}};
    shape.shared_bytes = config->sharedMemBytes;
    const LaunchTicket ticket = runtime.before_launch(shape, config->hStream, variant);
    CUresult result;
    if (ticket.stream == config->hStream) {
        result = real(config, f, params, extra);
    } else {
        CUlaunchConfig moved = *config;  // attributes are shared, only the stream differs
        moved.hStream = ticket.stream;
        result = real(&moved, f, params, extra);
    }
    runtime.after_launch(ticket, result);
    return result;
}

CUresult launch_cooperative(int variant, CUfunction f, unsigned int gx, unsigned int gy,
                            unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                            unsigned int shared, CUstream stream, void** params) {
    auto real = hooks::real_cuLaunchCooperativeKernel(variant);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(f, gx, gy, gz, bx, by, bz, shared, stream, params);
    LaunchShape shape{f, {gx, gy, gz}, {bx, by, bz}};
    shape.shared_bytes = shared;
    const LaunchTicket ticket = runtime.before_launch(shape, stream, variant);
    const CUresult result = real(f, gx, gy, gz, bx, by, bz, shared, ticket.stream, params);
    runtime.after_launch(ticket, result);
    return result;
}

CUresult graph_launch(int variant, CUgraphExec graph, CUstream stream) {
    auto real = hooks::real_cuGraphLaunch(variant);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(graph, stream);
    // A split BE graph runs as its segments, each through the gate (graph_segments.h).
    if (const orion::SegmentedGraph* segments = runtime.graph_segments(graph, stream, variant)) {
        return runtime.launch_segments(*segments, stream, variant, real);
    }
    LaunchShape shape;
    shape.graph = graph;
    const LaunchTicket ticket = runtime.before_launch(shape, stream, variant);
    const CUresult result = real(graph, ticket.stream);
    runtime.after_launch(ticket, result);
    return result;
}

bool is_legacy(CUstream stream, int variant) {
    return stream == cu_stream_legacy() || (stream == nullptr && variant == hooks::kLegacy);
}

// Work moved off the legacy stream must still be covered when the program waits on that stream
// or asks whether it is done: `real` (cuStreamSynchronize, cuStreamQuery) is asked of the stream
// the work moved to as well.
template <typename Real>
CUresult also_on_moved_work(Real real, int variant, CUstream stream) {
    if (real == nullptr) return kNotFound;
    CUresult result = real(stream);
    CUstream moved = ClientRuntime::instance().redirect_stream();
    if (result == CUDA_SUCCESS && moved != nullptr && is_legacy(stream, variant)) {
        result = real(moved);
    }
    return result;
}

CUresult stream_synchronize(int variant, CUstream stream) {
    const CUresult result =
        also_on_moved_work(hooks::real_cuStreamSynchronize(variant), variant, stream);
    if (result == CUDA_SUCCESS) ClientRuntime::instance().waited();
    return result;
}

CUresult stream_query(int variant, CUstream stream) {
    const CUresult result =
        also_on_moved_work(hooks::real_cuStreamQuery(variant), variant, stream);
    if (result == CUDA_SUCCESS) ClientRuntime::instance().waited();
    return result;
}

}  // namespace

ORION_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shared, CUstream stream,
                                     void** params, void** extra) {
    return launch_kernel(hooks::kLegacy, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

ORION_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                          unsigned int gz, unsigned int bx, unsigned int by,
                                          unsigned int bz, unsigned int shared, CUstream stream,
                                          void** params, void** extra) {
    return launch_kernel(hooks::kPerThread, f, gx, gy, gz, bx, by, bz, shared, stream, params,
                         extra);
}

ORION_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
    return launch_kernel_ex(hooks::kLegacy, config, f, params, extra);
}

ORION_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                            void** params, void** extra) {
    return launch_kernel_ex(hooks::kPerThread, config, f, params, extra);
}

ORION_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int shared,
                                                CUstream stream, void** params) {
    return launch_cooperative(hooks::kLegacy, f, gx, gy, gz, bx, by, bz, shared, stream, params);
}

ORION_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx,
                                                     unsigned int gy, unsigned int gz,
                                                     unsigned int bx, unsigned int by,
                                                     unsigned int bz, unsigned int shared,
                                                     CUstream stream, void** params) {
    return launch_cooperative(hooks::kPerThread, f, gx, gy, gz, bx, by, bz, shared, stream,
                              params);
}

ORION_EXPORT CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream) {
    return graph_launch(hooks::kLegacy, graph, stream);
}

ORION_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream) {
    return graph_launch(hooks::kPerThread, graph, stream);
}

ORION_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
    return stream_synchronize(hooks::kLegacy, stream);
}

ORION_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) {
    return stream_synchronize(hooks::kPerThread, stream);
}

ORION_EXPORT CUresult cuStreamQuery(CUstream stream) { return stream_query(hooks::kLegacy, stream); }

ORION_EXPORT CUresult cuStreamQuery_ptsz(CUstream stream) {
    return stream_query(hooks::kPerThread, stream);
}

ORION_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
    ClientRuntime& runtime = ClientRuntime::instance();
    if (runtime.sets_priorities()) {
        auto with_priority = hooks::real_cuStreamCreateWithPriority(hooks::kLegacy);
        if (with_priority != nullptr) {
            runtime.count_prioritised_stream();
            return with_priority(stream, flags, runtime.stream_priority(0));
        }
    }
    auto real = hooks::real_cuStreamCreate(hooks::kLegacy);
    return real != nullptr ? real(stream, flags) : kNotFound;
}

ORION_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags,
                                                 int priority) {
    auto real = hooks::real_cuStreamCreateWithPriority(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (runtime.sets_priorities()) {
        runtime.count_prioritised_stream();
        priority = runtime.stream_priority(priority);
    }
    return real(stream, flags, priority);
}

// Graph instantiation: the call goes through (for a client gated on the GPU, with gate wait nodes
// inside the graph: graph_gating.cpp); on success the runtime reads the graph's kernel nodes, so
// that a later cuGraphLaunch of the executable finds its profile entry.
namespace {

// The instantiation's flags, however they were passed.
unsigned long long flags_of(unsigned long long flags) { return flags; }  // NOLINT
unsigned long long flags_of(const CUDA_GRAPH_INSTANTIATE_PARAMS* params) {  // NOLINT
    return params != nullptr ? params->flags : 0;
}

template <typename Real, typename Options>
CUresult instantiate(Real real, CUgraphExec* exec, CUgraph graph, Options options) {
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(exec, graph, options);
    orion::GraphMemory memory(graph);  // its allocation nodes against the memory limit (graph_memory.h)
    if (!memory.reserved()) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = runtime.instantiate_graph(exec, graph, flags_of(options),
                                                      [&] { return real(exec, graph, options); });
    memory.settle(result, exec);
    return result;
}

}  // namespace

ORION_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                  unsigned long long flags) {  // NOLINT
    return instantiate(hooks::real_cuGraphInstantiateWithFlags(hooks::kLegacy), exec, graph,
                       flags);
}

ORION_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
    return instantiate(hooks::real_cuGraphInstantiateWithParams(hooks::kLegacy), exec, graph,
                       params);
}

ORION_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
    auto real = hooks::real_cuGraphExecDestroy(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (runtime.active()) {
        runtime.graph_destroyed(exec);
        runtime.forget_gated_graph(exec);
        runtime.forget_segments(exec);
    }
    const CUresult result = real(exec);
    if (result == CUDA_SUCCESS) orion::forget_graph_memory(exec);
    return result;
}

// Executables changed in place: an update from another graph is identified again from that
// graph's kernel nodes; a kernel node given new parameters changes the identity by that node.
ORION_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph,
                                           CUgraphExecUpdateResultInfo* info) {
    auto real = hooks::real_cuGraphExecUpdate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(exec, graph, info);
    // A gated executable is updated from the graph with its waits (graph_gating.cpp).
    return runtime.update_graph(exec, graph, [&] { return real(exec, graph, info); });
}

namespace {

// A per-node setter of an executable: the program's executable first, as it asked; then, for a
// split BE graph, the same change on the segment holding the node (graph_segments.h).
// `kernel`: a kernel node's new parameters (its identity changes by that node), nullptr for
// parameters orion does not read; `identity`: whether the change may touch a kernel node.
template <typename Real, typename... Args>
CUresult set_exec_node(Real real, bool identity, const CUDA_KERNEL_NODE_PARAMS_v2* kernel,
                       CUgraphExec exec, CUgraphNode node, Args... args) {
    if (real == nullptr) return kNotFound;
    const CUresult result = real(exec, node, args...);
    ClientRuntime& runtime = ClientRuntime::instance();
    if (result != CUDA_SUCCESS || !runtime.active()) return result;
    if (identity) runtime.graph_node_changed(exec, node, kernel);
    runtime.follow_node_change(exec, node, kernel, [&](CUgraphExec segment, CUgraphNode mine) {
        return real(segment, mine, args...);
    });
    return result;
}

}  // namespace

ORION_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                        const CUDA_KERNEL_NODE_PARAMS_v2* params) {
    return set_exec_node(hooks::real_cuGraphExecKernelNodeSetParams(hooks::kLegacy), true,
                         params, exec, node, params);
}

// The generic setter (CUDA 12.2+): its parameters are a union orion does not read, so a changed
// executable is no longer identified (gated as an unknown graph until the GPU says it is done).
ORION_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               CUgraphNodeParams* params) {
    return set_exec_node(hooks::real_cuGraphExecNodeSetParams(hooks::kLegacy), true, nullptr,
                         exec, node, params);
}

// The typed setters of the other node kinds: no kernel changes, so the identity stays.
ORION_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                     const CUDA_MEMCPY3D_st* copy, CUcontext ctx) {
    return set_exec_node(hooks::real_cuGraphExecMemcpyNodeSetParams(hooks::kLegacy), false,
                         nullptr, exec, node, copy, ctx);
}

ORION_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                     const CUDA_MEMSET_NODE_PARAMS_st* memset,
                                                     CUcontext ctx) {
    return set_exec_node(hooks::real_cuGraphExecMemsetNodeSetParams(hooks::kLegacy), false,
                         nullptr, exec, node, memset, ctx);
}

ORION_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_HOST_NODE_PARAMS_st* params) {
    return set_exec_node(hooks::real_cuGraphExecHostNodeSetParams(hooks::kLegacy), false,
                         nullptr, exec, node, params);
}

// A child graph's kernels are not part of the identity (read from the top graph's kernel nodes);
// its segment's work becomes unknown.
ORION_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                         CUgraph child) {
    return set_exec_node(hooks::real_cuGraphExecChildGraphNodeSetParams(hooks::kLegacy), false,
                         nullptr, exec, node, child);
}

ORION_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                         CUevent event) {
    return set_exec_node(hooks::real_cuGraphExecEventRecordNodeSetEvent(hooks::kLegacy), false,
                         nullptr, exec, node, event);
}

ORION_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                       CUevent event) {
    return set_exec_node(hooks::real_cuGraphExecEventWaitNodeSetEvent(hooks::kLegacy), false,
                         nullptr, exec, node, event);
}

ORION_EXPORT CUresult cuGraphExecExternalSemaphoresSignalNodeSetParams(
    CUgraphExec exec, CUgraphNode node, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS_st* params) {
    return set_exec_node(
        hooks::real_cuGraphExecExternalSemaphoresSignalNodeSetParams(hooks::kLegacy), false,
        nullptr, exec, node, params);
}

ORION_EXPORT CUresult cuGraphExecExternalSemaphoresWaitNodeSetParams(
    CUgraphExec exec, CUgraphNode node, const CUDA_EXT_SEM_WAIT_NODE_PARAMS_st* params) {
    return set_exec_node(hooks::real_cuGraphExecExternalSemaphoresWaitNodeSetParams(hooks::kLegacy),
                         false, nullptr, exec, node, params);
}

ORION_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(
    CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
    return set_exec_node(hooks::real_cuGraphExecBatchMemOpNodeSetParams(hooks::kLegacy), false,
                         nullptr, exec, node, params);
}

// A kernel node switched off or on: the graph's kernels, as orion reads them, stay the same.
ORION_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node,
                                            unsigned int enabled) {
    return set_exec_node(hooks::real_cuGraphNodeSetEnabled(hooks::kLegacy), false, nullptr, exec,
                         node, enabled);
}

ORION_EXPORT CUresult cuLaunch(CUfunction f) {
    auto real = hooks::real_cuLaunch(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(f);
    LaunchShape shape{f, {1, 1, 1}, {0, 0, 0}};  // block shape unknown: never matches a profile
    shape.stream_fixed = true;
    const LaunchTicket ticket = runtime.before_launch(shape, cu_stream_legacy(), hooks::kLegacy);
    const CUresult result = real(f);
    runtime.after_launch(ticket, result);
    return result;
}

ORION_EXPORT CUresult cuLaunchGrid(CUfunction f, int width, int height) {
    auto real = hooks::real_cuLaunchGrid(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(f, width, height);
    LaunchShape shape{f,
                      {static_cast<unsigned int>(width), static_cast<unsigned int>(height), 1},
                      {0, 0, 0}};
    shape.stream_fixed = true;
    const LaunchTicket ticket = runtime.before_launch(shape, cu_stream_legacy(), hooks::kLegacy);
    const CUresult result = real(f, width, height);
    runtime.after_launch(ticket, result);
    return result;
}

ORION_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int width, int height, CUstream stream) {
    auto real = hooks::real_cuLaunchGridAsync(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active()) return real(f, width, height, stream);
    const LaunchShape shape{
        f, {static_cast<unsigned int>(width), static_cast<unsigned int>(height), 1}, {0, 0, 0}};
    const LaunchTicket ticket = runtime.before_launch(shape, stream, hooks::kLegacy);
    const CUresult result = real(f, width, height, ticket.stream);
    runtime.after_launch(ticket, result);
    return result;
}

// One cooperative launch per device: each is gated (in list order) and tracked on its own stream.
ORION_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list,
                                                           unsigned int devices,
                                                           unsigned int flags) {
    auto real = hooks::real_cuLaunchCooperativeKernelMultiDevice(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active() || list == nullptr || devices == 0) return real(list, devices, flags);
    // A deprecated, rare route: a copy of the list (streams may be moved) is affordable here.
    std::vector<CUDA_LAUNCH_PARAMS> moved(list, list + devices);
    std::vector<LaunchTicket> tickets;
    tickets.reserve(devices);
    for (CUDA_LAUNCH_PARAMS& entry : moved) {
        const LaunchShape shape{entry.function,
                                {entry.gridDimX, entry.gridDimY, entry.gridDimZ},
                                {entry.blockDimX, entry.blockDimY, entry.blockDimZ}};
        tickets.push_back(runtime.before_launch(shape, entry.hStream, hooks::kLegacy));
        entry.hStream = tickets.back().stream;
    }
    const CUresult result = real(moved.data(), devices, flags);
    for (const LaunchTicket& ticket : tickets) runtime.after_launch(ticket, result);
    return result;
}

namespace {

// Unloads through `real`; on success the cached kernel names are forgotten (handles get reused).
template <typename Real, typename Handle>
CUresult unload(Real real, Handle handle) {
    if (real == nullptr) return kNotFound;
    const CUresult result = real(handle);
    ClientRuntime& runtime = ClientRuntime::instance();
    if (result == CUDA_SUCCESS && runtime.active()) runtime.forget_kernel_names();
    return result;
}

}  // namespace

ORION_EXPORT CUresult cuModuleUnload(CUmodule module) {
    return unload(hooks::real_cuModuleUnload(hooks::kLegacy), module);
}

ORION_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
    return unload(hooks::real_cuLibraryUnload(hooks::kLegacy), library);
}

ORION_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
    auto real = orion::driver::real_get_proc_address_v2();
    if (real == nullptr) return kNotFound;
    const CUresult result = real(symbol, pfn, cuda_version, flags, status);
    if (result == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
        const int variant =
            (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? hooks::kPerThread
                                                                    : hooks::kLegacy;
        *pfn = hooks::intercept(symbol, *pfn, variant, cuda_version);
    }
    return result;
}

ORION_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                       cuuint64_t flags) {
    auto real = orion::driver::real_get_proc_address_v1();
    if (real == nullptr) return kNotFound;
    const CUresult result = real(symbol, pfn, cuda_version, flags);
    if (result == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
        const int variant =
            (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? hooks::kPerThread
                                                                    : hooks::kLegacy;
        *pfn = hooks::intercept(symbol, *pfn, variant, cuda_version);
    }
    return result;
}

ORION_EXPORT void* dlsym(void* handle, const char* symbol) {
    const orion::driver::DlsymFn real = orion::driver::real_dlsym();
    if (real == nullptr) return nullptr;
    // glibc declares `symbol` nonnull; hide that from the optimiser so a NULL from a buggy caller
    // is forwarded instead of dereferenced here.
    asm("" : "+r"(symbol));
    void* result = handle == RTLD_NEXT
                       ? hooks::next_symbol(symbol, __builtin_return_address(0))
                       : real(handle, symbol);
    if (result != nullptr && symbol != nullptr && std::strncmp(symbol, "nvml", 4) == 0) {
        return orion::intercept_nvml(symbol, result);  // nvml_hooks.h: the memory query
    }
    if (result == nullptr || symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u') {
        return result;
    }
    return hooks::intercept(symbol, result, hooks::kLegacy, 0);
}

namespace {

// A strict client (a benchmark run's) attaches at load time, before main, so a misconfigured run
// fails before the program starts. Any other (`orion run`) attaches when it first reaches the
// driver: a shell or launcher that wraps the real program never uses CUDA, so it must not take
// the slot its child will need.
__attribute__((constructor)) void orion_preload_init() {
    if (ClientRuntime::attaches_at_load()) ClientRuntime::instance();
}

__attribute__((destructor)) void orion_preload_fini() {
    if (ClientRuntime::created()) ClientRuntime::instance().detach();
}

}  // namespace
