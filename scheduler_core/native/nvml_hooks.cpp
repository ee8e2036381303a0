// NVML's view of the device's memory inside a limited client (pynvml, torch.cuda's NVML calls,
// any NVML user in the client's process): nvmlDeviceGetMemoryInfo and its _v2 answer as cuMemGetInfo does
// under the limit (memory_ledger.h): the limit as the total, the smaller of the device's free
// memory and the limit's unused part as free, the rest as used. Outside a limited run they pass
// through. NVML is reached by direct linking (this library's exports interpose) or by dlsym on
// libnvidia-ml's handle (hooks.cpp's dlsym hands these wrappers out for the two names).
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nvml_hooks.h"

#include "client_runtime.h"
#include "driver.h"

#define ORION_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {  // NVML's nvmlMemory_t
    unsigned long long total;  // NOLINT(google-runtime-int): ABI type
    unsigned long long free;   // NOLINT(google-runtime-int)
    unsigned long long used;   // NOLINT(google-runtime-int)
};
struct nvmlMemory_v2_t {  // NVML's nvmlMemory_v2_t
    unsigned int version;
    unsigned long long total;     // NOLINT(google-runtime-int)
    unsigned long long reserved;  // NOLINT(google-runtime-int)
    unsigned long long free;      // NOLINT(google-runtime-int)
    unsigned long long used;      // NOLINT(google-runtime-int)
};
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
}

namespace orion {
namespace {

constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlFunctionNotFound = 13;  // NVML_ERROR_FUNCTION_NOT_FOUND

std::atomic<void*> g_memory_info{nullptr};
std::atomic<void*> g_memory_info_v2{nullptr};

// The real NVML function: the one dlsym found, else libnvidia-ml's own, else the next object's.
void* real_nvml(std::atomic<void*>& cached, const char* symbol) {
    if (void* known = cached.load(std::memory_order_acquire)) return known;
    void* found = nullptr;
    if (void* library = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
        found = driver::real_dlsym()(library, symbol);
        dlclose(library);
    }
    if (found == nullptr) found = driver::real_dlsym()(RTLD_NEXT, symbol);
    if (found != nullptr) cached.store(found, std::memory_order_release);
    return found;
}

// The limit's view of `total` and `free` (bytes); false outside a limited run. An NVML call
// never joins a daemon by itself (only a driver call does): a process that only asks NVML (a
// monitor, nvidia-smi started by a client's shell) is no client, and sees the device.
bool limited_view(unsigned long long* total, unsigned long long* free) {  // NOLINT
    if (!ClientRuntime::created()) return false;
    ClientRuntime& runtime = ClientRuntime::instance();
    if (!runtime.active() || runtime.memory().limit() == 0) return false;
    std::size_t free_bytes = static_cast<std::size_t>(*free);
    std::size_t total_bytes = static_cast<std::size_t>(*total);
    runtime.memory().adjust_info(&free_bytes, &total_bytes);
    *total = total_bytes;
    *free = std::min<unsigned long long>(free_bytes, total_bytes);  // NOLINT
    return true;
}

// Either version of nvmlDeviceGetMemoryInfo (the real one found as `symbol`, kept in `cached`),
// its answer turned into the limit's view; the v2 struct's `reserved`, the driver's own share,
// is not the client's to see. One body for both, so the two versions cannot drift apart.
template <typename Memory>
nvmlReturn_t limited_memory_info(std::atomic<void*>& cached, const char* symbol,
                                 nvmlDevice_t device, Memory* memory) {
    using Fn = nvmlReturn_t (*)(nvmlDevice_t, Memory*);
    auto real = reinterpret_cast<Fn>(real_nvml(cached, symbol));
    if (real == nullptr) return kNvmlFunctionNotFound;
    const nvmlReturn_t result = real(device, memory);
    if (result == kNvmlSuccess && memory != nullptr && limited_view(&memory->total, &memory->free)) {
        if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>) memory->reserved = 0;
        memory->used = memory->total - memory->free;
    }
    return result;
}

}  // namespace

// For hooks.cpp's dlsym: the wrapper for an NVML symbol orion answers for (recording `real`),
// `real` itself for any other.
void* intercept_nvml(const char* symbol, void* real) {
    const bool v1 = std::strcmp(symbol, "nvmlDeviceGetMemoryInfo") == 0;
    const bool v2 = std::strcmp(symbol, "nvmlDeviceGetMemoryInfo_v2") == 0;
    if (!v1 && !v2) return real;
    void* wrapper = v1 ? reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo)
                       : reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo_v2);
    if (real == wrapper) return real;  // found in this library: the real one is found later
    void* expected = nullptr;
    (v1 ? g_memory_info : g_memory_info_v2)
        .compare_exchange_strong(expected, real, std::memory_order_acq_rel);
    return wrapper;
}

}  // namespace orion

ORION_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return orion::limited_memory_info(orion::g_memory_info, "nvmlDeviceGetMemoryInfo", device,
                                      memory);
}

ORION_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                     nvmlMemory_v2_t* memory) {
    return orion::limited_memory_info(orion::g_memory_info_v2, "nvmlDeviceGetMemoryInfo_v2",
                                      device, memory);
}
