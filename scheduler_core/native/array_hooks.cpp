// CUDA arrays (textures and surfaces: cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate)
// are device memory like any allocation, so they count against the client's limit
// (memory_ledger.h): reserved before the real call, given back when destroyed. The driver does
// not say an array's size before it makes it, so an array counts as the bytes of its elements
// (width x height x depth x channels x element size, every mipmap level's); the driver's own
// padding is not counted. A format whose element size orion does not know counts 16 bytes per
// element, the largest of any format: counting too much refuses early, too little would let a
// client past its limit.
#include <algorithm>

#include "client_runtime.h"
#include "hooked_symbols.h"
#include "ledger_calls.h"

#define ORION_EXPORT extern "C" __attribute__((visibility("default")))

using orion::active_ledger;
using orion::MemoryLedger;
namespace hooks = orion::hooks;

namespace {

constexpr CUresult kNotFound = CUDA_ERROR_NOT_FOUND;
constexpr std::uint64_t kLargestElement = 16;

// Bytes of one channel of one element of CUarray_format `format` (cuda.h's values).
std::uint64_t element_bytes(int format) {
    switch (format) {
        case 0x01: case 0x08: return 1;  // UNSIGNED_INT8, SIGNED_INT8
        case 0x02: case 0x09: case 0x10: return 2;  // UNSIGNED_INT16, SIGNED_INT16, HALF
        case 0x03: case 0x0a: case 0x20: return 4;  // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        default: return kLargestElement;
    }
}

// The elements' bytes of an array `width` x `height` x `depth` (0: a dimension not used).
std::uint64_t array_bytes(std::size_t width, std::size_t height, std::size_t depth, int format,
                          unsigned int channels) {
    const std::uint64_t per_element = element_bytes(format) * std::max(channels, 1U);
    return static_cast<std::uint64_t>(std::max<std::size_t>(width, 1)) *
           std::max<std::size_t>(height, 1) * std::max<std::size_t>(depth, 1) * per_element;
}

// Every level of a mipmapped array: each halves every dimension in use, down to 1.
std::uint64_t mipmapped_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned int levels) {
    std::uint64_t total = 0;
    std::size_t width = desc.Width, height = desc.Height, depth = desc.Depth;
    for (unsigned int level = 0; level < std::max(levels, 1U); ++level) {
        total += array_bytes(width, height, depth, desc.Format, desc.NumChannels);
        width = std::max<std::size_t>(width / 2, 1);
        height = height == 0 ? 0 : std::max<std::size_t>(height / 2, 1);
        depth = depth == 0 ? 0 : std::max<std::size_t>(depth / 2, 1);
    }
    return total;
}

// Reserves `bytes`, creates with `create` (which fills *handle), records or gives back.
template <typename Handle, typename Create>
CUresult counted_array(Handle* handle, std::uint64_t bytes, Create create) {
    MemoryLedger* account = active_ledger();
    if (account == nullptr || handle == nullptr) return create();
    return orion::reserved_call(*account, bytes, create,
                                [&] { account->record_array(*handle, bytes); });
}

// A destroyed array's size goes back to the client (an array the ledger never saw: nothing).
template <typename Handle>
CUresult destroyed_array(Handle handle, CUresult result) {
    return orion::noted_on_success(result,
                                   [&](MemoryLedger& account) { account.forget_array(handle); });
}

}  // namespace

ORION_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
    auto real = hooks::real_cuArrayCreate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    if (desc == nullptr) return real(handle, desc);
    const std::uint64_t bytes =
        array_bytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels);
    return counted_array(handle, bytes, [&] { return real(handle, desc); });
}

ORION_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
    auto real = hooks::real_cuArray3DCreate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    if (desc == nullptr) return real(handle, desc);
    const std::uint64_t bytes =
        array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
    return counted_array(handle, bytes, [&] { return real(handle, desc); });
}

ORION_EXPORT CUresult cuArrayDestroy(CUarray array) {
    auto real = hooks::real_cuArrayDestroy(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return destroyed_array(array, real(array));
}

ORION_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                             const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                             unsigned int levels) {
    auto real = hooks::real_cuMipmappedArrayCreate(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    if (desc == nullptr) return real(handle, desc, levels);
    return counted_array(handle, mipmapped_bytes(*desc, levels),
                         [&] { return real(handle, desc, levels); });
}

ORION_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
    auto real = hooks::real_cuMipmappedArrayDestroy(hooks::kLegacy);
    if (real == nullptr) return kNotFound;
    return destroyed_array(array, real(array));
}
