// A test program that reaches the driver the ways CUDA libraries do:
//   getproc      dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") + cuGetProcAddress_v2 (libcudart)
//   getproc_ptsz the same with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
//   getproc_v1   the old cuGetProcAddress ABI
//   getproc_self cuGetProcAddress_v2 asked for "cuGetProcAddress" itself, then used
//   dlsym        dlsym(handle, "cuLaunchKernel") (Triton, static runtimes)
//   dlsym_ptsz   dlsym(handle, "cuLaunchKernel_ptsz")
//   direct       a call through the program's own link to libcuda.so.1
// It reads a small command language from argv: "func NAME US" makes a module function and
// "library_kernel NAME US" a CUkernel-style handle (named only by cuKernelGetName), each running
// US microseconds; "launch NAME GRID BLOCK STREAM", "repeat N ... end", "sync STREAM" and the
// rest are read in run() below. "threads N ... end" runs its body in N threads at once; there the
// stream "own" is a stream each thread creates for itself (a named stream is shared by them all).
#include <dlfcn.h>

#include "fake_abi.h"
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
using LaunchFn = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, void*, void**, void**);
using CoopFn = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void*, void**);
using GraphFn = CUresult (*)(void*, void*);
using StreamCreateFn = CUresult (*)(void**, unsigned);
using StreamCreatePrioFn = CUresult (*)(void**, unsigned, int);
using SyncFn = CUresult (*)(void*);
using GetProcV2 = CUresult (*)(const char*, void**, int, std::uint64_t, int*);
using GetProcV1 = CUresult (*)(const char*, void**, int, std::uint64_t);
using MakeFn = void* (*)(const char*, std::uint64_t);
using GraphCreateFn = void* (*)();
using GraphAddFn = void (*)(void*, void*, unsigned, unsigned);
using GraphAddOtherFn = void (*)(void*, int);
using InstantiateFlagsFn = CUresult (*)(void**, void*, unsigned long long);
using InstantiateParamsFn = CUresult (*)(void**, void*, void*);
using ExecDestroyFn = CUresult (*)(void*);
using UnloadFn = CUresult (*)(void*);
using ExecUpdateFn = CUresult (*)(void*, void*, void*);
using NodeOfFn = void* (*)(void*, unsigned);
using ExecSetKernelFn = CUresult (*)(void*, void*, const KernelNodeParams*);
using ExecSetNodeFn = CUresult (*)(void*, void*, void*);
using LegacyLaunchFn = CUresult (*)(void*);
using LegacyGridFn = CUresult (*)(void*, int, int);
using LegacyGridAsyncFn = CUresult (*)(void*, int, int, void*);
struct LaunchParams {  // CUDA_LAUNCH_PARAMS
    void* function;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void* hStream;
    void** kernelParams;
};
using MultiDeviceFn = CUresult (*)(LaunchParams*, unsigned, unsigned);
using RenameFn = void (*)(void*, const char*);

// The direct route: these resolve through the program's link to libcuda.so.1.
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        void*, void**, void**);
CUresult cuLaunchKernelEx(const CUlaunchConfig*, void*, void**, void**);
CUresult cuLaunchCooperativeKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, void*, void**);
CUresult cuGraphLaunch(void*, void*);
CUresult cuGraphInstantiateWithFlags(void**, void*, unsigned long long);
CUresult cuGraphExecDestroy(void*);
CUresult cuStreamCreate(void**, unsigned);
CUresult cuStreamCreateWithPriority(void**, unsigned, int);
CUresult cuStreamSynchronize(void*);
CUresult cuMemAlloc_v2(unsigned long long*, size_t);
CUresult cuMemFree_v2(unsigned long long);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuDeviceTotalMem_v2(size_t*, int);
using MemAllocFn = CUresult (*)(unsigned long long*, size_t);
using MemAllocManagedFn = CUresult (*)(unsigned long long*, size_t, unsigned);
using MemAllocPitchFn = CUresult (*)(unsigned long long*, size_t*, size_t, size_t, unsigned);
using MemAllocAsyncFn = CUresult (*)(unsigned long long*, size_t, void*);
using MemAllocPoolFn = CUresult (*)(unsigned long long*, size_t, void*, void*);
using MemFreeFn = CUresult (*)(unsigned long long);
using MemFreeAsyncFn = CUresult (*)(unsigned long long, void*);
using MemCreateFn = CUresult (*)(unsigned long long*, size_t, const void*, unsigned long long);
using MemInfoFn = CUresult (*)(size_t*, size_t*);
using TotalMemFn = CUresult (*)(size_t*, int);
// cuda.h's CUDA_ARRAY_DESCRIPTOR and CUDA_ARRAY3D_DESCRIPTOR.
struct ArrayDescriptor {
    size_t width, height;
    int format;
    unsigned channels;
};
struct Array3DDescriptor {
    size_t width, height, depth;
    int format;
    unsigned channels, flags;
};
using ArrayCreateFn = CUresult (*)(unsigned long long*, const ArrayDescriptor*);
using Array3DCreateFn = CUresult (*)(unsigned long long*, const Array3DDescriptor*);
using MipmappedCreateFn = CUresult (*)(unsigned long long*, const Array3DDescriptor*, unsigned);
using VmmCreateFn = CUresult (*)(unsigned long long*, size_t, const MemAllocationProp*,
                                 unsigned long long);
using PoolCreateFn = CUresult (*)(void**, const MemPoolProps*);
using PoolFn = CUresult (*)(void*);
using PoolSetFn = CUresult (*)(void*, int, void*);
using PoolTrimFn = CUresult (*)(void*, size_t);
using DevicePoolFn = CUresult (*)(void**, int);
using DeviceSetPoolFn = CUresult (*)(int, void*);
using PoolAllocFn = CUresult (*)(unsigned long long*, size_t, void*, void*);
using GraphAllocFn = void (*)(void*, std::uint64_t, int);
}

namespace {

void* g_handle = nullptr;
std::string g_route = "getproc";
bool g_launch_failures_allowed = false;  // "launch_failures_ok": a failed launch says so, goes on
std::map<std::string, void*> g_functions;
std::map<std::string, void*> g_streams;
std::map<std::string, void*> g_graphs;  // graphs being built, by name
std::map<std::string, void*> g_execs;   // their executables, by the graph's name
thread_local void* t_own_stream = nullptr;  // stream "own": this thread's, made on first use
thread_local bool t_in_threads = false;     // running the body of a "threads" block

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "launcher: %s\n", why);
    std::exit(2);
}

void* resolve(const char* symbol) {
    if (g_route == "direct") {
        if (!std::strcmp(symbol, "cuLaunchKernel")) return reinterpret_cast<void*>(&cuLaunchKernel);
        if (!std::strcmp(symbol, "cuLaunchKernelEx")) return reinterpret_cast<void*>(&cuLaunchKernelEx);
        if (!std::strcmp(symbol, "cuLaunchCooperativeKernel")) {
            return reinterpret_cast<void*>(&cuLaunchCooperativeKernel);
        }
        if (!std::strcmp(symbol, "cuGraphLaunch")) return reinterpret_cast<void*>(&cuGraphLaunch);
        if (!std::strcmp(symbol, "cuGraphInstantiateWithFlags")) {
            return reinterpret_cast<void*>(&cuGraphInstantiateWithFlags);
        }
        if (!std::strcmp(symbol, "cuGraphExecDestroy")) {
            return reinterpret_cast<void*>(&cuGraphExecDestroy);
        }
        if (!std::strcmp(symbol, "cuStreamCreate")) return reinterpret_cast<void*>(&cuStreamCreate);
        if (!std::strcmp(symbol, "cuStreamCreateWithPriority")) {
            return reinterpret_cast<void*>(&cuStreamCreateWithPriority);
        }
        if (!std::strcmp(symbol, "cuStreamSynchronize")) {
            return reinterpret_cast<void*>(&cuStreamSynchronize);
        }
        usage("no direct route for that symbol");
    }
    if (g_route == "dlsym" || g_route == "dlsym_ptsz") {
        std::string name = symbol;
        const bool has_ptsz = name.rfind("cuLaunch", 0) == 0 || name == "cuGraphLaunch" ||
                              name == "cuStreamSynchronize";
        if (g_route == "dlsym_ptsz" && has_ptsz) name += "_ptsz";
        return dlsym(g_handle, name.c_str());
    }
    void* fn = nullptr;
    int status = 0;
    if (g_route == "getproc_v1") {
        auto get = reinterpret_cast<GetProcV1>(dlsym(g_handle, "cuGetProcAddress"));
        if (get == nullptr || get(symbol, &fn, 11080, 1) != 0) usage("cuGetProcAddress failed");
        return fn;
    }
    auto get = reinterpret_cast<GetProcV2>(dlsym(g_handle, "cuGetProcAddress_v2"));
    if (get == nullptr) usage("no cuGetProcAddress_v2");
    if (g_route == "getproc_self") {
        void* self = nullptr;
        if (get("cuGetProcAddress", &self, 13000, 0, &status) != 0) usage("self lookup failed");
        get = reinterpret_cast<GetProcV2>(self);
    }
    const std::uint64_t flags = g_route == "getproc_ptsz" ? 2 : 1;
    if (get(symbol, &fn, 13000, flags, &status) != 0 || status != 0) usage("lookup failed");
    return fn;
}

// A memory entry point as the route finds it: the base name through cuGetProcAddress, the
// exported `_v2` symbol through dlsym and direct linking (cuda.h's macros do the same).
void* resolve_memory(const std::string& base) {
    static const std::map<std::string, std::string> kVersioned = {
        {"cuMemAlloc", "cuMemAlloc_v2"},   {"cuMemAllocPitch", "cuMemAllocPitch_v2"},
        {"cuMemFree", "cuMemFree_v2"},     {"cuMemGetInfo", "cuMemGetInfo_v2"},
        {"cuDeviceTotalMem", "cuDeviceTotalMem_v2"}, {"cuArrayCreate", "cuArrayCreate_v2"},
        {"cuArray3DCreate", "cuArray3DCreate_v2"}};
    const auto versioned = kVersioned.find(base);
    if (g_route == "direct") {
        if (base == "cuMemAlloc") return reinterpret_cast<void*>(&cuMemAlloc_v2);
        if (base == "cuMemFree") return reinterpret_cast<void*>(&cuMemFree_v2);
        if (base == "cuMemGetInfo") return reinterpret_cast<void*>(&cuMemGetInfo_v2);
        if (base == "cuDeviceTotalMem") return reinterpret_cast<void*>(&cuDeviceTotalMem_v2);
        usage("no direct route for that memory symbol");
    }
    if (g_route == "dlsym" || g_route == "dlsym_ptsz") {
        std::string name = versioned != kVersioned.end() ? versioned->second : base;
        const bool has_ptsz = base == "cuMemAllocAsync" || base == "cuMemAllocFromPoolAsync" ||
                              base == "cuMemFreeAsync";
        if (g_route == "dlsym_ptsz" && has_ptsz) name += "_ptsz";
        return dlsym(g_handle, name.c_str());
    }
    return resolve(base.c_str());
}

std::map<std::string, void*> g_pools;  // by name; "default": the device's default pool
void* g_alloc_stream = nullptr;        // the stream of stream-ordered allocations and frees

void* pool_named(const std::string& name) {
    if (name == "default") {
        void* pool = nullptr;
        reinterpret_cast<DevicePoolFn>(resolve_memory("cuDeviceGetDefaultMemPool"))(&pool, 0);
        return pool;
    }
    const auto found = g_pools.find(name);
    if (found == g_pools.end()) usage("unknown pool");
    return found->second;
}

// Live allocations by kind, freed by "free_all" with the matching call.
std::vector<unsigned long long> g_plain;    // cuMemAlloc, managed, pitched: cuMemFree
std::vector<unsigned long long> g_ordered;  // stream-ordered: cuMemFreeAsync
std::vector<unsigned long long> g_handles;  // cuMemCreate: cuMemRelease
std::vector<unsigned long long> g_arrays;   // cuArrayCreate, cuArray3DCreate: cuArrayDestroy
std::vector<unsigned long long> g_mipmaps;  // cuMipmappedArrayCreate: cuMipmappedArrayDestroy

void print_rc(const std::string& what, CUresult rc) {
    std::printf("%s rc=%d\n", what.c_str(), rc);
    std::fflush(stdout);
}

void allocate(const std::string& kind, size_t bytes) {
    unsigned long long out = 0;
    CUresult rc = 1;
    std::vector<unsigned long long>* keep = &g_plain;
    if (kind == "mem") {
        rc = reinterpret_cast<MemAllocFn>(resolve_memory("cuMemAlloc"))(&out, bytes);
    } else if (kind == "managed") {
        rc = reinterpret_cast<MemAllocManagedFn>(resolve_memory("cuMemAllocManaged"))(&out, bytes, 1);
    } else if (kind == "pitch") {  // `bytes` wide, 2 rows
        size_t pitch = 0;
        rc = reinterpret_cast<MemAllocPitchFn>(resolve_memory("cuMemAllocPitch"))(&out, &pitch,
                                                                                 bytes, 2, 4);
    } else if (kind == "async") {
        rc = reinterpret_cast<MemAllocAsyncFn>(resolve_memory("cuMemAllocAsync"))(
            &out, bytes, g_alloc_stream);
        keep = &g_ordered;
    } else if (kind == "vmm_host") {  // cuMemCreate of memory located on the host
        MemAllocationProp prop{};
        prop.type = 1;
        prop.location.type = 2;
        rc = reinterpret_cast<VmmCreateFn>(resolve_memory("cuMemCreate"))(&out, bytes, &prop, 0);
        keep = &g_handles;
    } else if (kind == "pool") {
        rc = reinterpret_cast<MemAllocPoolFn>(resolve_memory("cuMemAllocFromPoolAsync"))(
            &out, bytes, nullptr, nullptr);
        keep = &g_ordered;
    } else if (kind == "vmm") {
        rc = reinterpret_cast<MemCreateFn>(resolve_memory("cuMemCreate"))(&out, bytes, nullptr, 0);
        keep = &g_handles;
    } else if (kind == "array") {  // `bytes` one-byte elements in a row
        const ArrayDescriptor desc{bytes, 0, 0x01, 1};
        rc = reinterpret_cast<ArrayCreateFn>(resolve_memory("cuArrayCreate"))(&out, &desc);
        keep = &g_arrays;
    } else if (kind == "array3d") {  // 4-channel floats, 16 bytes each, 1 x 1 deep: `bytes`
        const Array3DDescriptor desc{bytes / 16, 1, 1, 0x20, 4, 0};
        rc = reinterpret_cast<Array3DCreateFn>(resolve_memory("cuArray3DCreate"))(&out, &desc);
        keep = &g_arrays;
    } else if (kind == "mipmap") {  // two levels of a row: `bytes` + `bytes` / 2
        const Array3DDescriptor desc{bytes, 0, 0, 0x01, 1, 0};
        rc = reinterpret_cast<MipmappedCreateFn>(resolve_memory("cuMipmappedArrayCreate"))(
            &out, &desc, 2);
        keep = &g_mipmaps;
    } else {
        usage("unknown allocation kind");
    }
    if (rc == 0) keep->push_back(out);
    print_rc("alloc " + kind, rc);
}

void free_all() {
    for (unsigned long long p : g_plain) reinterpret_cast<MemFreeFn>(resolve_memory("cuMemFree"))(p);
    for (unsigned long long p : g_ordered) {
        reinterpret_cast<MemFreeAsyncFn>(resolve_memory("cuMemFreeAsync"))(p, g_alloc_stream);
    }
    for (unsigned long long h : g_handles) {
        reinterpret_cast<MemFreeFn>(resolve_memory("cuMemRelease"))(h);
    }
    for (unsigned long long a : g_arrays) {
        reinterpret_cast<MemFreeFn>(resolve_memory("cuArrayDestroy"))(a);
    }
    for (unsigned long long m : g_mipmaps) {
        reinterpret_cast<MemFreeFn>(resolve_memory("cuMipmappedArrayDestroy"))(m);
    }
    g_plain.clear();
    g_ordered.clear();
    g_handles.clear();
    g_arrays.clear();
    g_mipmaps.clear();
}

void* stream_arg(const std::string& token) {
    if (token == "0") return nullptr;
    if (token == "legacy") return reinterpret_cast<void*>(0x1);
    if (token == "ptds") return reinterpret_cast<void*>(0x2);
    if (token == "own") {
        if (t_own_stream == nullptr &&
            reinterpret_cast<StreamCreateFn>(resolve("cuStreamCreate"))(&t_own_stream, 0) != 0) {
            usage("stream create failed");
        }
        return t_own_stream;
    }
    auto it = g_streams.find(token);
    if (it == g_streams.end()) usage("unknown stream");
    return it->second;
}

void sleep_us(long us) {
    timespec ts{us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void print_origin(const char* symbol) {
    Dl_info info{};
    void* fn = resolve(symbol);
    const char* where = (fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr)
                            ? info.dli_fname
                            : "?";
    std::printf("origin %s %s\n", symbol, where);
    std::fflush(stdout);
}

size_t run(const std::vector<std::string>& t, size_t pos, bool in_block);

// "threads N BODY end": BODY in N threads, released together once all exist so that their
// launches overlap; returns the index after "end".
size_t run_threads(const std::vector<std::string>& t, size_t pos, long n) {
    if (n < 1) usage("'threads' needs at least one thread");
    std::mutex mutex;
    std::condition_variable released;
    bool go = false;
    std::vector<size_t> after(n, 0);
    std::vector<std::thread> threads;
    for (long i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
            {
                std::unique_lock<std::mutex> lock(mutex);
                released.wait(lock, [&] { return go; });
            }
            t_in_threads = true;
            after[i] = run(t, pos, true);
        });
    }
    {
        std::lock_guard<std::mutex> lock(mutex);
        go = true;
    }
    released.notify_all();
    for (std::thread& thread : threads) thread.join();
    return after[0];
}

// Runs tokens[pos..] until "end" (for repeat and threads bodies) or the end; returns the index
// after it.
size_t run(const std::vector<std::string>& t, size_t pos, bool in_block) {
    auto need = [&](size_t n) {
        if (pos + n >= t.size() + 1 || pos + n > t.size()) usage("missing argument");
    };
    while (pos < t.size()) {
        const std::string& cmd = t[pos];
        if (cmd == "end") {
            if (!in_block) usage("'end' without 'repeat' or 'threads'");
            return pos + 1;
        }
        // The threads of a "threads" block share the tables of names: they only read them.
        static const std::set<std::string> kThreadSafe = {"launch", "launch_ex", "launch_coop",
                                                          "sync",   "sleep",     "repeat", "say"};
        if (t_in_threads && kThreadSafe.count(cmd) == 0) {
            usage(("'" + cmd + "' cannot run in a 'threads' block").c_str());
        }
        if (cmd == "route") {
            need(2);
            g_route = t[pos + 1];
            pos += 2;
        } else if (cmd == "launch_failures_ok") {
            g_launch_failures_allowed = true;
            pos += 1;
        } else if (cmd == "func" || cmd == "library_kernel") {
            need(3);
            auto make = reinterpret_cast<MakeFn>(dlsym(
                g_handle, cmd == "func" ? "fake_make_function" : "fake_make_library_kernel"));
            g_functions[t[pos + 1]] =
                make(t[pos + 1].c_str(), std::strtoull(t[pos + 2].c_str(), nullptr, 10) * 1000);
            pos += 3;
        } else if (cmd == "launch" || cmd == "launch_ex" || cmd == "launch_coop") {
            need(5);
            void* f = g_functions.at(t[pos + 1]);
            const unsigned grid = std::strtoul(t[pos + 2].c_str(), nullptr, 10);
            const unsigned block = std::strtoul(t[pos + 3].c_str(), nullptr, 10);
            void* stream = stream_arg(t[pos + 4]);
            CUresult r;
            if (cmd == "launch") {
                r = reinterpret_cast<LaunchFn>(resolve("cuLaunchKernel"))(
                    f, grid, 1, 1, block, 1, 1, 0, stream, nullptr, nullptr);
            } else if (cmd == "launch_ex") {
                CUlaunchConfig config{grid, 1, 1, block, 1, 1, 0, stream, nullptr, 0};
                r = reinterpret_cast<LaunchExFn>(resolve("cuLaunchKernelEx"))(&config, f, nullptr,
                                                                              nullptr);
            } else {
                r = reinterpret_cast<CoopFn>(resolve("cuLaunchCooperativeKernel"))(
                    f, grid, 1, 1, block, 1, 1, 0, stream, nullptr);
            }
            if (r != 0 && !g_launch_failures_allowed) usage("launch failed");
            if (r != 0) std::printf("launch failed %d\n", static_cast<int>(r));
            pos += 5;
        } else if (cmd == "graph") {
            need(2);
            if (reinterpret_cast<GraphFn>(resolve("cuGraphLaunch"))(
                    reinterpret_cast<void*>(0x99), stream_arg(t[pos + 1])) != 0) {
                usage("graph launch failed");
            }
            pos += 2;
        } else if (cmd == "graph_new") {  // graph_new G
            need(2);
            g_graphs[t[pos + 1]] =
                reinterpret_cast<GraphCreateFn>(dlsym(g_handle, "fake_graph_create"))();
            pos += 2;
        } else if (cmd == "graph_node") {  // graph_node G FUNC GRID BLOCK
            need(5);
            reinterpret_cast<GraphAddFn>(dlsym(g_handle, "fake_graph_add_kernel"))(
                g_graphs.at(t[pos + 1]), g_functions.at(t[pos + 2]),
                std::strtoul(t[pos + 3].c_str(), nullptr, 10),
                std::strtoul(t[pos + 4].c_str(), nullptr, 10));
            pos += 5;
        } else if (cmd == "graph_other") {  // graph_other G TYPE: 5 empty, 10 memory allocation
            need(3);
            reinterpret_cast<GraphAddOtherFn>(dlsym(g_handle, "fake_graph_add_other"))(
                g_graphs.at(t[pos + 1]), std::atoi(t[pos + 2].c_str()));
            pos += 3;
        } else if (cmd == "graph_inst") {  // graph_inst G flags|params
            need(3);
            void* exec = nullptr;
            CUresult r;
            if (t[pos + 2] == "params") {
                r = reinterpret_cast<InstantiateParamsFn>(resolve("cuGraphInstantiateWithParams"))(
                    &exec, g_graphs.at(t[pos + 1]), nullptr);
            } else {
                r = reinterpret_cast<InstantiateFlagsFn>(resolve("cuGraphInstantiateWithFlags"))(
                    &exec, g_graphs.at(t[pos + 1]), 0);
            }
            if (r != 0) usage("graph instantiation failed");
            g_execs[t[pos + 1]] = exec;
            pos += 3;
        } else if (cmd == "graph_run") {  // graph_run G STREAM
            need(3);
            if (reinterpret_cast<GraphFn>(resolve("cuGraphLaunch"))(
                    g_execs.at(t[pos + 1]), stream_arg(t[pos + 2])) != 0) {
                usage("graph launch failed");
            }
            pos += 3;
        } else if (cmd == "graph_update") {  // graph_update G FROM: G's executable now runs FROM
            need(3);
            const char* symbol = g_route.rfind("dlsym", 0) == 0 ? "cuGraphExecUpdate_v2"
                                                                : "cuGraphExecUpdate";
            void* fn = g_route.rfind("dlsym", 0) == 0 ? dlsym(g_handle, symbol) : resolve(symbol);
            if (reinterpret_cast<ExecUpdateFn>(fn)(g_execs.at(t[pos + 1]), g_graphs.at(t[pos + 2]),
                                                   nullptr) != 0) {
                usage("graph update failed");
            }
            pos += 3;
        } else if (cmd == "graph_set") {  // graph_set EXEC G NODE FUNC GRID BLOCK: node NODE of G
            need(7);
            void* node = reinterpret_cast<NodeOfFn>(dlsym(g_handle, "fake_graph_node"))(
                g_graphs.at(t[pos + 2]), std::strtoul(t[pos + 3].c_str(), nullptr, 10));
            KernelNodeParams params{};
            params.func = g_functions.at(t[pos + 4]);
            params.gridDimX = std::strtoul(t[pos + 5].c_str(), nullptr, 10);
            params.blockDimX = std::strtoul(t[pos + 6].c_str(), nullptr, 10);
            params.gridDimY = params.gridDimZ = params.blockDimY = params.blockDimZ = 1;
            const char* symbol = g_route.rfind("dlsym", 0) == 0 ? "cuGraphExecKernelNodeSetParams_v2"
                                                                : "cuGraphExecKernelNodeSetParams";
            void* fn = g_route.rfind("dlsym", 0) == 0 ? dlsym(g_handle, symbol) : resolve(symbol);
            if (reinterpret_cast<ExecSetKernelFn>(fn)(g_execs.at(t[pos + 1]), node, &params) != 0) {
                usage("graph node update failed");
            }
            pos += 7;
        } else if (cmd == "graph_set_generic") {  // graph_set_generic EXEC G NODE
            need(4);
            void* node = reinterpret_cast<NodeOfFn>(dlsym(g_handle, "fake_graph_node"))(
                g_graphs.at(t[pos + 2]), std::strtoul(t[pos + 3].c_str(), nullptr, 10));
            if (reinterpret_cast<ExecSetNodeFn>(resolve("cuGraphExecNodeSetParams"))(
                    g_execs.at(t[pos + 1]), node, nullptr) != 0) {
                usage("generic node update failed");
            }
            pos += 4;
        } else if (cmd == "graph_enable") {  // graph_enable EXEC G NODE 0|1 (cuGraphNodeSetEnabled)
            need(5);
            void* node = reinterpret_cast<NodeOfFn>(dlsym(g_handle, "fake_graph_node"))(
                g_graphs.at(t[pos + 2]), std::strtoul(t[pos + 3].c_str(), nullptr, 10));
            using EnableFn = CUresult (*)(void*, void*, unsigned int);
            if (reinterpret_cast<EnableFn>(resolve("cuGraphNodeSetEnabled"))(
                    g_execs.at(t[pos + 1]), node, std::strtoul(t[pos + 4].c_str(), nullptr, 10)) !=
                0) {
                usage("node enable failed");
            }
            pos += 5;
        } else if (cmd == "graph_destroy") {  // graph_destroy G
            need(2);
            if (reinterpret_cast<ExecDestroyFn>(resolve("cuGraphExecDestroy"))(
                    g_execs.at(t[pos + 1])) != 0) {
                usage("graph destroy failed");
            }
            g_execs.erase(t[pos + 1]);
            pos += 2;
        } else if (cmd == "launch_legacy") {  // launch_legacy FUNC (cuLaunch)
            need(2);
            if (reinterpret_cast<LegacyLaunchFn>(resolve("cuLaunch"))(g_functions.at(t[pos + 1])) !=
                0) {
                usage("launch failed");
            }
            pos += 2;
        } else if (cmd == "launch_grid") {  // launch_grid FUNC GRID [STREAM: async]
            need(3);
            void* f = g_functions.at(t[pos + 1]);
            const int grid = std::atoi(t[pos + 2].c_str());
            CUresult r;
            if (pos + 3 < t.size() && t[pos + 3] == "async") {
                r = reinterpret_cast<LegacyGridAsyncFn>(resolve("cuLaunchGridAsync"))(f, grid, 1,
                                                                                    nullptr);
                pos += 1;
            } else {
                r = reinterpret_cast<LegacyGridFn>(resolve("cuLaunchGrid"))(f, grid, 1);
            }
            if (r != 0) usage("launch failed");
            pos += 3;
        } else if (cmd == "launch_multi") {  // launch_multi FUNC GRID BLOCK (two devices)
            need(4);
            const unsigned grid = std::strtoul(t[pos + 2].c_str(), nullptr, 10);
            const unsigned block = std::strtoul(t[pos + 3].c_str(), nullptr, 10);
            LaunchParams list[2];
            for (LaunchParams& p : list) {
                p = LaunchParams{g_functions.at(t[pos + 1]), grid, 1, 1, block, 1, 1, 0, nullptr,
                                 nullptr};
            }
            if (reinterpret_cast<MultiDeviceFn>(resolve("cuLaunchCooperativeKernelMultiDevice"))(
                    list, 2, 0) != 0) {
                usage("launch failed");
            }
            pos += 4;
        } else if (cmd == "rename") {  // rename FUNC NEWNAME (the handle is reused)
            need(3);
            reinterpret_cast<RenameFn>(dlsym(g_handle, "fake_rename_function"))(
                g_functions.at(t[pos + 1]), t[pos + 2].c_str());
            pos += 3;
        } else if (cmd == "unload") {  // unload module|library
            need(2);
            const char* symbol = t[pos + 1] == "library" ? "cuLibraryUnload" : "cuModuleUnload";
            if (reinterpret_cast<UnloadFn>(resolve(symbol))(reinterpret_cast<void*>(0x77)) != 0) {
                usage("unload failed");
            }
            pos += 2;
        } else if (cmd == "stream") {
            need(3);
            void* s = nullptr;
            const std::string& kind = t[pos + 2];
            const unsigned flags = kind == "capture"       ? 0x40
                                   : kind == "broken"      ? 0x80
                                   : kind == "nonblocking" ? 0x1
                                                           : 0;
            if (reinterpret_cast<StreamCreateFn>(resolve("cuStreamCreate"))(&s, flags) != 0) {
                usage("stream create failed");
            }
            g_streams[t[pos + 1]] = s;
            pos += 3;
        } else if (cmd == "stream_prio") {
            need(3);
            void* s = nullptr;
            const int prio = std::atoi(t[pos + 2].c_str());
            if (reinterpret_cast<StreamCreatePrioFn>(resolve("cuStreamCreateWithPriority"))(
                    &s, 0, prio) != 0) {
                usage("stream create failed");
            }
            g_streams[t[pos + 1]] = s;
            pos += 3;
        } else if (cmd == "sync") {
            need(2);
            reinterpret_cast<SyncFn>(resolve("cuStreamSynchronize"))(stream_arg(t[pos + 1]));
            pos += 2;
        } else if (cmd == "sleep") {
            need(2);
            sleep_us(std::atol(t[pos + 1].c_str()));
            pos += 2;
        } else if (cmd == "repeat") {
            need(2);
            const long n = std::atol(t[pos + 1].c_str());
            size_t after = pos + 2;
            for (long i = 0; i < n; ++i) after = run(t, pos + 2, true);
            pos = after;
        } else if (cmd == "threads") {
            need(2);
            pos = run_threads(t, pos + 2, std::atol(t[pos + 1].c_str()));
        } else if (cmd == "origin") {
            need(2);
            print_origin(t[pos + 1].c_str());
            pos += 2;
        } else if (cmd == "say") {
            need(2);
            std::printf("%s\n", t[pos + 1].c_str());
            std::fflush(stdout);
            pos += 2;
        } else if (cmd == "alloc") {  // alloc KIND BYTES (mem, managed, pitch, async, pool, vmm)
            need(3);
            allocate(t[pos + 1], std::strtoull(t[pos + 2].c_str(), nullptr, 10));
            pos += 3;
        } else if (cmd == "alloc_stream") {  // alloc_stream STREAM: of later async allocations
            need(2);
            g_alloc_stream = stream_arg(t[pos + 1]);
            pos += 2;
        } else if (cmd == "pool_new") {  // pool_new NAME device|host
            need(3);
            MemPoolProps props{};
            props.allocType = 1;
            props.location.type = t[pos + 2] == "host" ? 2 : 1;
            void* pool = nullptr;
            print_rc("pool_new", reinterpret_cast<PoolCreateFn>(
                                     resolve_memory("cuMemPoolCreate"))(&pool, &props));
            g_pools[t[pos + 1]] = pool;
            pos += 3;
        } else if (cmd == "pool_threshold") {  // pool_threshold NAME BYTES: its release threshold
            need(3);
            std::uint64_t bytes = std::strtoull(t[pos + 2].c_str(), nullptr, 10);
            reinterpret_cast<PoolSetFn>(resolve_memory("cuMemPoolSetAttribute"))(
                pool_named(t[pos + 1]), 4, &bytes);
            pos += 3;
        } else if (cmd == "pool_trim") {  // pool_trim NAME BYTES
            need(3);
            reinterpret_cast<PoolTrimFn>(resolve_memory("cuMemPoolTrimTo"))(
                pool_named(t[pos + 1]), std::strtoull(t[pos + 2].c_str(), nullptr, 10));
            pos += 3;
        } else if (cmd == "pool_destroy") {  // pool_destroy NAME
            need(2);
            reinterpret_cast<PoolFn>(resolve_memory("cuMemPoolDestroy"))(pool_named(t[pos + 1]));
            g_pools.erase(t[pos + 1]);
            pos += 2;
        } else if (cmd == "pool_current") {  // pool_current NAME: cuMemAllocAsync's pool
            need(2);
            reinterpret_cast<DeviceSetPoolFn>(resolve_memory("cuDeviceSetMemPool"))(
                0, pool_named(t[pos + 1]));
            pos += 2;
        } else if (cmd == "alloc_from") {  // alloc_from POOL BYTES (cuMemAllocFromPoolAsync)
            need(3);
            unsigned long long out = 0;
            const CUresult rc = reinterpret_cast<PoolAllocFn>(
                resolve_memory("cuMemAllocFromPoolAsync"))(
                &out, std::strtoull(t[pos + 2].c_str(), nullptr, 10), pool_named(t[pos + 1]),
                g_alloc_stream);
            if (rc == 0) g_ordered.push_back(out);
            print_rc("alloc from", rc);
            pos += 3;
        } else if (cmd == "ctx_limit") {  // ctx_limit stack|printf|heap BYTES (cuCtxSetLimit)
            need(3);
            const std::string& which = t[pos + 1];
            const int limit = which == "stack" ? 0 : which == "printf" ? 1 : 2;
            using SetLimitFn = CUresult (*)(int, size_t);
            print_rc("ctx_limit " + which, reinterpret_cast<SetLimitFn>(resolve_memory(
                                               "cuCtxSetLimit"))(
                                               limit, std::strtoull(t[pos + 2].c_str(), nullptr, 10)));
            pos += 3;
        } else if (cmd == "prealloc") {  // prealloc PERCENT: of what cuMemGetInfo says is free
            need(2);
            size_t free_bytes = 0, total = 0;
            reinterpret_cast<MemInfoFn>(resolve_memory("cuMemGetInfo"))(&free_bytes, &total);
            const size_t bytes = free_bytes * std::strtoull(t[pos + 1].c_str(), nullptr, 10) / 100;
            allocate("mem", bytes);
            pos += 2;
        } else if (cmd == "graph_alloc") {  // graph_alloc G BYTES [host]: an allocation node
            need(3);
            const bool host = pos + 3 < t.size() && t[pos + 3] == "host";
            reinterpret_cast<GraphAllocFn>(dlsym(g_handle, "fake_graph_add_alloc"))(
                g_graphs.at(t[pos + 1]), std::strtoull(t[pos + 2].c_str(), nullptr, 10),
                host ? 1 : 0);
            pos += host ? 4 : 3;
        } else if (cmd == "graph_try") {  // graph_try G: instantiate, printing the result
            need(2);
            void* exec = nullptr;
            const CUresult r = reinterpret_cast<InstantiateFlagsFn>(
                resolve("cuGraphInstantiateWithFlags"))(&exec, g_graphs.at(t[pos + 1]), 0);
            if (r == 0) g_execs[t[pos + 1]] = exec;
            print_rc("graph_inst", r);
            pos += 2;
        } else if (cmd == "free_all") {
            free_all();
            pos += 1;
        } else if (cmd == "meminfo") {
            size_t free_bytes = 0, total = 0;
            reinterpret_cast<MemInfoFn>(resolve_memory("cuMemGetInfo"))(&free_bytes, &total);
            size_t device_total = 0;
            reinterpret_cast<TotalMemFn>(resolve_memory("cuDeviceTotalMem"))(&device_total, 0);
            std::printf("meminfo free=%zu total=%zu device_total=%zu\n", free_bytes, total,
                        device_total);
            std::fflush(stdout);
            pos += 1;
        } else if (cmd == "nvml") {  // NVML's memory query, both versions, found with dlsym
            unsigned long long v1[3] = {};
            unsigned long long v2[5] = {};  // the version word, padded, then four figures
            v2[0] = 2;
            using NvmlFn = int (*)(void*, void*);
            reinterpret_cast<NvmlFn>(dlsym(g_handle, "nvmlDeviceGetMemoryInfo"))(nullptr, v1);
            reinterpret_cast<NvmlFn>(dlsym(g_handle, "nvmlDeviceGetMemoryInfo_v2"))(nullptr, v2);
            std::printf("nvml total=%llu free=%llu used=%llu v2 total=%llu free=%llu used=%llu\n",
                        v1[0], v1[1], v1[2], v2[1], v2[3], v2[4]);
            std::fflush(stdout);
            pos += 1;
        } else if (cmd == "await") {  // await PATH: until the test makes the file
            need(2);
            while (access(t[pos + 1].c_str(), F_OK) != 0) sleep_us(1000);
            pos += 2;
        } else if (cmd == "spawn") {  // spawn N TOKENS...: a child launcher runs the N tokens
            need(2);
            const std::size_t count = std::strtoul(t[pos + 1].c_str(), nullptr, 10);
            need(2 + count);
            std::vector<std::string> script(t.begin() + pos + 2, t.begin() + pos + 2 + count);
            std::fflush(stdout);
            const pid_t child = fork();
            if (child == 0) {
                std::vector<char*> argv{const_cast<char*>("launcher")};
                for (std::string& token : script) argv.push_back(token.data());
                argv.push_back(nullptr);
                execv("/proc/self/exe", argv.data());
                _exit(127);
            }
            int status = 0;
            waitpid(child, &status, 0);
            std::printf("child rc=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
            std::fflush(stdout);
            pos += 2 + count;
        } else if (cmd == "hold") {  // hold: until killed, or until what started it is gone
            // A client that keeps its slot while the test looks at it, for as long as the test
            // takes (no sleep is long enough on every machine); an orphan (its parent killed,
            // the test's shell or spawning launcher) goes on with the script instead of lingering.
            const pid_t parent = getppid();
            while (getppid() == parent) sleep_us(10000);
            pos += 1;
        } else if (cmd == "kill_self") {
            raise(SIGKILL);
            pos += 1;
        } else {
            usage(("unknown command " + cmd).c_str());
        }
    }
    if (in_block) usage("'repeat' or 'threads' without 'end'");
    return pos;
}

}  // namespace

int main(int argc, char** argv) {
    g_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_handle == nullptr) usage(dlerror());
    std::vector<std::string> tokens(argv + 1, argv + argc);
    run(tokens, 0, false);
    return 0;
}
