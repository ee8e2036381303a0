// The memory entry points: every allocation route reserves its size against the client's limit
// before the real call (memory_ledger.h), every free gives it back, and the two queries of the
// device's memory answer with the limit as the total. Outside a run everything passes through.
#include "client_runtime.h"
#include "driver.h"
#include "hooked_symbols.h"
#include "ledger_calls.h"

#define ORION_EXPORT extern "C" __attribute__((visibility("default")))

// The per-thread-default-stream variants share their base function's type.
extern "C" decltype(::cuMemAllocAsync) cuMemAllocAsync_ptsz;
extern "C" decltype(::cuMemAllocFromPoolAsync) cuMemAllocFromPoolAsync_ptsz;
extern "C" decltype(::cuMemFreeAsync) cuMemFreeAsync_ptsz;

using orion::active_ledger;
using orion::MemoryLedger;
namespace hooks = orion::hooks;

namespace {

constexpr CUresult kNotFound = CUDA_ERROR_NOT_FOUND;

// Reserves `bytes`, allocates with `allocate` (which fills *pointer), records or gives back.
template <typename Allocate>
CUresult counted_allocation(CUdeviceptr* pointer, std::size_t bytes, Allocate allocate) {
    MemoryLedger* account = active_ledger();
    if (account == nullptr || pointer == nullptr) return allocate();
    return orion::reserved_call(*account, bytes, allocate,
                                [&] { account->record_pointer(*pointer, bytes); });
}

// Whether `stream` is being captured: an allocation there becomes a graph memory-allocation
// node, counted when the graph is instantiated (graph_memory.h), not now.
bool captured(CUstream stream, int variant) {
    const auto is_capturing = orion::driver::helpers().stream_is_capturing;
    if (is_capturing == nullptr) return false;
    if (stream == nullptr && variant == hooks::kPerThread) stream = cu_stream_per_thread();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is_capturing(stream, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// A stream-ordered allocation from `pool` (nullptr: the device's current pool): reserved from
// what the pool keeps first (memory_ledger.h); a pool on the host is not counted.
template <typename Allocate>
CUresult counted_pool_allocation(CUdeviceptr* pointer, std::size_t bytes, CUmemoryPool pool,
                                 CUstream stream, int variant, Allocate allocate) {
    MemoryLedger* account = active_ledger();
    if (account == nullptr || pointer == nullptr || captured(stream, variant)) return allocate();
    if (pool == nullptr) pool = account->current_pool();
    if (!account->pool_on_device(pool)) return allocate();
    std::uint64_t from_kept = 0;
    if (!account->reserve_from_pool(pool, bytes, &from_kept)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = allocate();
    if (result == CUDA_SUCCESS) {
        account->record_pool_pointer(*pointer, pool, bytes);
    } else {
        account->unreserve_from_pool(pool, bytes, from_kept);
    }
    return result;
}

CUresult alloc_async(int variant, CUdeviceptr* pointer, std::size_t bytes, CUstream stream) {
    auto real = hooks::real_cuMemAllocAsync(variant);
    if (real == nullptr) return kNotFound;
    return counted_pool_allocation(pointer, bytes, nullptr, stream, variant,
                                   [&] { return real(pointer, bytes, stream); });
}

CUresult alloc_from_pool(int variant, CUdeviceptr* pointer, std::size_t bytes, CUmemoryPool pool,
                         CUstream stream) {
    auto real = hooks::real_cuMemAllocFromPoolAsync(variant);
    if (real == nullptr) return kNotFound;
    // cuMemAllocFromPoolAsync names its pool: a null one is the driver's to refuse.
    return counted_pool_allocation(pointer, bytes, pool, stream, variant,
                                   [&] { return real(pointer, bytes, pool, stream); });
}

CUresult free_async(int variant, CUdeviceptr pointer, CUstream stream) {
    auto real = hooks::real_cuMemFreeAsync(variant);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(pointer, stream), [&](MemoryLedger& account) {
        account.forget_pointer(pointer);
    });
}

}  // namespace

ORION_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* pointer, std::size_t bytes) {
    auto real = hooks::real_cuMemAlloc(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return counted_allocation(pointer, bytes, [&] { return real(pointer, bytes); });
}

ORION_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* pointer, std::size_t bytes,
                                        unsigned int flags) {
    auto real = hooks::real_cuMemAllocManaged(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return counted_allocation(pointer, bytes, [&] { return real(pointer, bytes, flags); });
}

// The pitch (so the size) is known only after the call: the row bytes are reserved first, the
// padding once it is known; if the padding does not fit, the allocation is freed and refused.
ORION_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* pointer, std::size_t* pitch,
                                         std::size_t width, std::size_t height,
                                         unsigned int element_bytes) {
    auto real = hooks::real_cuMemAllocPitch(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    MemoryLedger* account = active_ledger();
    if (account == nullptr || pointer == nullptr || pitch == nullptr) {
        return real(pointer, pitch, width, height, element_bytes);
    }
    const std::size_t rows = width * height;
    if (!account->reserve(rows)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = real(pointer, pitch, width, height, element_bytes);
    if (result != CUDA_SUCCESS) {
        account->unreserve(rows);
        return result;
    }
    const std::size_t actual = *pitch * height;
    if (actual > rows && !account->reserve(actual - rows)) {
        if (auto release = hooks::real_cuMemFree(hooks::kLegacy)) release(*pointer);
        account->unreserve(rows);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    account->record_pointer(*pointer, actual > rows ? actual : rows);
    return result;
}

ORION_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* pointer, std::size_t bytes, CUstream stream) {
    return alloc_async(hooks::kLegacy, pointer, bytes, stream);
}

ORION_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* pointer, std::size_t bytes,
                                           CUstream stream) {
    return alloc_async(hooks::kPerThread, pointer, bytes, stream);
}

ORION_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* pointer, std::size_t bytes,
                                              CUmemoryPool pool, CUstream stream) {
    return alloc_from_pool(hooks::kLegacy, pointer, bytes, pool, stream);
}

ORION_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* pointer, std::size_t bytes,
                                                   CUmemoryPool pool, CUstream stream) {
    return alloc_from_pool(hooks::kPerThread, pointer, bytes, pool, stream);
}

ORION_EXPORT CUresult cuMemFree_v2(CUdeviceptr pointer) {
    auto real = hooks::real_cuMemFree(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(pointer), [&](MemoryLedger& account) {
        account.forget_pointer(pointer);
    });
}

ORION_EXPORT CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream stream) {
    return free_async(hooks::kLegacy, pointer, stream);
}

ORION_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream stream) {
    return free_async(hooks::kPerThread, pointer, stream);
}

// The virtual-memory API: physical memory is made by cuMemCreate (mapping it takes none). Memory
// it makes on the host (a location other than a device) is not the GPU's: not counted.
ORION_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                                  const CUmemAllocationProp* prop,
                                  unsigned long long flags) {  // NOLINT(google-runtime-int)
    auto real = hooks::real_cuMemCreate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    MemoryLedger* account = active_ledger();
    const bool on_host = prop != nullptr && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE;
    if (account == nullptr || handle == nullptr || on_host) return real(handle, bytes, prop, flags);
    return orion::reserved_call(*account, bytes, [&] { return real(handle, bytes, prop, flags); },
                                [&] { account->record_handle(*handle, bytes); });
}

ORION_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    auto real = hooks::real_cuMemRelease(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(handle), [&](MemoryLedger& account) {
        account.forget_handle(handle);
    });
}

ORION_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
    auto real = hooks::real_cuMemGetInfo(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(free_bytes, total_bytes), [&](MemoryLedger& account) {
        account.adjust_info(free_bytes, total_bytes);
    });
}

ORION_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
    auto real = hooks::real_cuDeviceTotalMem(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(bytes, device), [&](MemoryLedger& account) {
        account.adjust_total(bytes);
    });
}

// Stream-ordered pools: where each lives, how much freed memory it may keep, and which one
// cuMemAllocAsync uses (memory_ledger.h). The calls themselves go through unchanged.
ORION_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
    auto real = hooks::real_cuMemPoolCreate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    const CUresult result = real(pool, props);
    MemoryLedger* account = active_ledger();
    if (result == CUDA_SUCCESS && account != nullptr && pool != nullptr && props != nullptr) {
        account->note_pool(*pool, props->location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    }
    return result;
}

ORION_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    auto real = hooks::real_cuMemPoolDestroy(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(pool), [&](MemoryLedger& account) {
        account.forget_pool(pool);
    });
}

ORION_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                            void* value) {
    auto real = hooks::real_cuMemPoolSetAttribute(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    const CUresult result = real(pool, attribute, value);
    MemoryLedger* account = active_ledger();
    if (result == CUDA_SUCCESS && account != nullptr && value != nullptr &&
        attribute == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        account->set_pool_threshold(pool, *static_cast<const cuuint64_t*>(value));
    }
    return result;
}

ORION_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, std::size_t keep_bytes) {
    auto real = hooks::real_cuMemPoolTrimTo(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(pool, keep_bytes), [&](MemoryLedger& account) {
        account.trim_pool(pool, keep_bytes);
    });
}

ORION_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
    auto real = hooks::real_cuDeviceGetDefaultMemPool(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    const CUresult result = real(pool, device);
    if (result == CUDA_SUCCESS && pool != nullptr) {
        if (MemoryLedger* account = active_ledger()) account->note_default_pool(*pool);
    }
    return result;
}

ORION_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
    auto real = hooks::real_cuDeviceGetMemPool(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    const CUresult result = real(pool, device);
    MemoryLedger* account = active_ledger();
    // The current pool, while the client never set one, is the default pool.
    if (result == CUDA_SUCCESS && pool != nullptr && account != nullptr &&
        account->current_pool() == nullptr) {
        account->note_default_pool(*pool);
    }
    return result;
}

ORION_EXPORT CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool) {
    auto real = hooks::real_cuDeviceSetMemPool(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return orion::noted_on_success(real(device, pool), [&](MemoryLedger& account) {
        account.set_current_pool(pool);
    });
}

// The context's own memory a program grows (memory_ledger.h): refused past the limit before the
// driver sees it, as the driver refuses a limit it cannot hold (CUDA_ERROR_OUT_OF_MEMORY).
ORION_EXPORT CUresult cuCtxSetLimit(CUlimit limit, std::size_t value) {
    auto real = hooks::real_cuCtxSetLimit(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    MemoryLedger* account = active_ledger();
    if (account == nullptr) return real(limit, value);
    if (!account->set_context_limit(limit, value)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = real(limit, value);
    if (result != CUDA_SUCCESS) account->undo_context_limit(limit);
    return result;
}
