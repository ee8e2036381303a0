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
    // FNV-1a over the four little-endian bytes of each dimension. A zero byte only multiplies by
    // the prime, so a dimension's zero high bytes are applied as one multiplication by the
    // prime's power (the same value mod 2^64): one multiplication for a dimension below 256,
    // not four, on every launch.
    constexpr std::uint64_t kPrimePower[5] = {1, kFnvPrime, kFnvPrime * kFnvPrime,
                                              kFnvPrime * kFnvPrime * kFnvPrime,
                                              kFnvPrime * kFnvPrime * kFnvPrime * kFnvPrime};
    std::uint64_t hash = name_hash;
    for (std::uint32_t dim : {grid_x, grid_y, grid_z, block_x, block_y, block_z}) {
        const int bytes = dim > 0xffffffU ? 4 : dim > 0xffffU ? 3 : dim > 0xffU ? 2 : 1;
        for (int byte = 0; byte < bytes - 1; ++byte) {
            hash = (hash ^ ((dim >> (8 * byte)) & 0xffU)) * kFnvPrime;
        }
        hash = (hash ^ ((dim >> (8 * (bytes - 1))) & 0xffU)) * kPrimePower[5 - bytes];
    }
    return hash == 0 ? 1 : hash;  // 0 marks an empty table slot
}

// A 64-bit mixer (the splitmix64 finaliser): spreads every input bit over every output bit, so a
// sum of mixed keys behaves like a hash of the set.
inline std::uint64_t mix64(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// Graph identity: computed from the kernel keys of a CUDA graph's kernel nodes (kernel_key above),
// independent of their order, because the driver does not promise the order in which it lists a
// graph's nodes. The profile side computes the same from the kernels ncu saw in the graph.
class GraphKeyBuilder {
public:
    void add(std::uint64_t kernel_key) {
        sum_ += mix64(kernel_key);
        ++count_;
    }
    std::uint32_t count() const { return count_; }
    std::uint64_t key() const {
        const std::uint64_t key = mix64(sum_ ^ (std::uint64_t{count_} * 0x9e3779b97f4a7c15ULL));
        return key == 0 ? 1 : key;
    }

private:
    std::uint64_t sum_ = 0;
    std::uint32_t count_ = 0;
};

}  // namespace orion
