// Every driver entry point orion hooks, listed once. The X-macros below generate the hook ids,
// the typed real-function accessors and the name table that dlsym/cuGetProcAddress interception
// consult, so the list cannot drift out of sync with itself.
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda_api.h"

// Entry points that also exist as a per-thread-default-stream variant `<name>_ptsz`.
#define ORION_HOOKS_WITH_PTSZ(X) \
    X(cuLaunchKernel)            \
    X(cuLaunchKernelEx)          \
    X(cuLaunchCooperativeKernel) \
    X(cuGraphLaunch)             \
    X(cuStreamSynchronize)       \
    X(cuStreamQuery)             \
    X(cuMemAllocAsync)           \
    X(cuMemAllocFromPoolAsync)   \
    X(cuMemFreeAsync)

// Entry points with a single variant.
#define ORION_HOOKS_PLAIN(X)     \
    X(cuStreamCreate)            \
    X(cuStreamCreateWithPriority) \
    X(cuGraphInstantiateWithFlags) \
    X(cuGraphInstantiateWithParams) \
    X(cuGraphExecDestroy)          \
    X(cuModuleUnload)              \
    X(cuLibraryUnload)             \
    X(cuLaunch)                    \
    X(cuLaunchGrid)                \
    X(cuLaunchGridAsync)           \
    X(cuLaunchCooperativeKernelMultiDevice) \
    X(cuMemAllocManaged)           \
    X(cuMemCreate)                 \
    X(cuMemRelease)                \
    X(cuArrayDestroy)              \
    X(cuMipmappedArrayCreate)      \
    X(cuMipmappedArrayDestroy)     \
    X(cuMemPoolCreate)             \
    X(cuMemPoolDestroy)            \
    X(cuMemPoolSetAttribute)       \
    X(cuMemPoolTrimTo)             \
    X(cuDeviceGetDefaultMemPool)   \
    X(cuDeviceGetMemPool)          \
    X(cuDeviceSetMemPool)          \
    X(cuCtxSetLimit)               \
    X(cuGraphExecNodeSetParams)    \
    X(cuGraphExecMemcpyNodeSetParams) \
    X(cuGraphExecMemsetNodeSetParams) \
    X(cuGraphExecHostNodeSetParams) \
    X(cuGraphExecChildGraphNodeSetParams) \
    X(cuGraphExecEventRecordNodeSetEvent) \
    X(cuGraphExecEventWaitNodeSetEvent) \
    X(cuGraphExecExternalSemaphoresSignalNodeSetParams) \
    X(cuGraphExecExternalSemaphoresWaitNodeSetParams) \
    X(cuGraphExecBatchMemOpNodeSetParams) \
    X(cuGraphNodeSetEnabled)

// Entry points exported under a versioned name (cuda.h maps `cuMemAlloc` to `cuMemAlloc_v2`):
// X(base name, exported symbol, CUDA version). cuGetProcAddress hands the exported function out
// under the base name to callers asking for that CUDA version or later; dlsym and direct linking
// use the exported symbol. The base name through dlsym, or asked for an older version, is an
// older ABI (32-bit sizes; CUDA 11's graph calls), which orion never intercepts.
#define ORION_HOOKS_VERSIONED(X)                                            \
    X(cuMemAlloc, cuMemAlloc_v2, 3020)                                      \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020)                            \
    X(cuMemFree, cuMemFree_v2, 3020)                                        \
    X(cuMemGetInfo, cuMemGetInfo_v2, 3020)                                  \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020)                          \
    X(cuArrayCreate, cuArrayCreate_v2, 3020)                                \
    X(cuArray3DCreate, cuArray3DCreate_v2, 3020)                            \
    X(cuGraphExecUpdate, cuGraphExecUpdate_v2, 12000)                       \
    X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2, 12000)

namespace orion::hooks {

enum class HookId : int {
#define ORION_HOOK_ENUM(name) name,
#define ORION_HOOK_ENUM_VERSIONED(name, exported, since) name,
    ORION_HOOKS_WITH_PTSZ(ORION_HOOK_ENUM) ORION_HOOKS_PLAIN(ORION_HOOK_ENUM)
        ORION_HOOKS_VERSIONED(ORION_HOOK_ENUM_VERSIONED)
#undef ORION_HOOK_ENUM
#undef ORION_HOOK_ENUM_VERSIONED
        kCount
};

// Variant 0: legacy default stream semantics; 1: per-thread default stream (`_ptsz`).
constexpr int kLegacy = 0;
constexpr int kPerThread = 1;

// The real driver function behind a hook, found lazily (from whichever route saw it first).
void* real_function(HookId id, int variant);

// The wrapper to hand out instead of `real`, or `real` itself when the symbol is not hooked or
// orion is not active in this process. Records `real` as the hook's target. `getproc_version` is
// the CUDA version a cuGetProcAddress caller asked for, 0 for dlsym.
void* intercept(const char* symbol, void* real, int variant_hint, int getproc_version);

// Typed accessors: real_cuLaunchKernel(variant) returns decltype(&cuLaunchKernel).
#define ORION_HOOK_ACCESSOR(name)                                        \
    inline decltype(&::name) real_##name(int variant) {                 \
        return reinterpret_cast<decltype(&::name)>(real_function(HookId::name, variant)); \
    }
ORION_HOOKS_WITH_PTSZ(ORION_HOOK_ACCESSOR)
ORION_HOOKS_PLAIN(ORION_HOOK_ACCESSOR)
#undef ORION_HOOK_ACCESSOR
#define ORION_HOOK_ACCESSOR_VERSIONED(name, exported, since)                  \
    inline decltype(&::exported) real_##name(int variant) {                  \
        return reinterpret_cast<decltype(&::exported)>(real_function(HookId::name, variant)); \
    }
ORION_HOOKS_VERSIONED(ORION_HOOK_ACCESSOR_VERSIONED)
#undef ORION_HOOK_ACCESSOR_VERSIONED

}  // namespace orion::hooks
