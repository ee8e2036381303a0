// Kernel identity: a 64-bit hash of the kernel's (mangled) name and its grid and block shape.
//
// The same function is used by the preload library on every launch and, through the `_native`
// module, by the Python side when it loads a profile, so the two can never disagree. FNV-1a is
// cheap, needs no tables, and its quality is ample for a few thousand keys per client.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace orion {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

inline std::uint64_t hash_name(const char* name) {
    std::uint64_t hash = kFnvOffset;
    for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) {
        hash = (hash ^ *p) * kFnvPrime;
    }
    return hash;
}

inline std::uint64_t kernel_key(std::uint64_t name_hash, std::uint32_t grid_x, std::uint32_t grid_y,
                                std::uint32_t grid_z, std::uint32_t block_x, std::uint32_t block_y,
                                std::uint32_t block_z) {
    std::uint64_t hash = name_hash;
    for (std::uint32_t dim : {grid_x, grid_y, grid_z, block_x, block_y, block_z}) {
        for (int byte = 0; byte < 4; ++byte) {
            hash = (hash ^ ((dim >> (8 * byte)) & 0xffU)) * kFnvPrime;
        }
    }
    return hash == 0 ? 1 : hash;  // 0 marks an empty table slot
}

}  // namespace orion
