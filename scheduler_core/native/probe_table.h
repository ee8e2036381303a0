// The one probe loop of every lock-free table orion keeps: the shared kernel and graph tables a
// profile fills, and a client's name cache, graph map and stream budgets.
//
// Open addressing with linear probing over a power-of-two array of slots, each holding its key in
// an atomic (the key's zero value marks an empty slot). Slots are claimed with a compare-and-swap
// and never freed one by one (a table is emptied whole), so a reader that meets an empty slot
// knows the key is absent. No locks: any thread of any process may probe while another claims.
#pragma once

#include <atomic>
#include <cstdint>

namespace orion {

constexpr std::uint64_t kGoldenRatio64 = 0x9e3779b97f4a7c15ULL;

// Where a table keyed by a handle (a pointer the driver gave out) starts probing: handles are
// aligned, so their low bits say nothing; the multiply spreads the rest over the table.
inline std::uint64_t handle_start(const void* handle) {
    return (reinterpret_cast<std::uintptr_t>(handle) >> 4) * kGoldenRatio64;
}

// The slot holding `key`, probing at most `limit` slots of `table` (`size` a power of two) from
// `start`; nullptr when an empty slot or the limit is reached first. `key_of(slot)` is the slot's
// atomic key.
template <typename Slot, typename Key, typename KeyOf>
Slot* find_slot(Slot* table, std::uint32_t size, std::uint32_t limit, std::uint64_t start,
                Key key, KeyOf key_of) {
    for (std::uint32_t probe = 0; probe < limit; ++probe) {
        Slot& slot = table[(start + probe) & (size - 1)];
        const Key seen = key_of(slot).load(std::memory_order_acquire);
        if (seen == key) return &slot;
        if (seen == Key{}) return nullptr;
    }
    return nullptr;
}

// The slot holding `key`, claiming the first empty one on its probe path when none does (set
// `*claimed` then, if given); nullptr when `limit` slots are all taken by other keys. Two threads
// claiming one key get the same slot.
template <typename Slot, typename Key, typename KeyOf>
Slot* find_or_claim_slot(Slot* table, std::uint32_t size, std::uint32_t limit,
                         std::uint64_t start, Key key, KeyOf key_of, bool* claimed = nullptr) {
    for (std::uint32_t probe = 0; probe < limit; ++probe) {
        Slot& slot = table[(start + probe) & (size - 1)];
        std::atomic<Key>& word = key_of(slot);
        Key seen = word.load(std::memory_order_acquire);
        if (seen == key) return &slot;
        if (seen != Key{}) continue;
        if (word.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) {
            if (claimed != nullptr) *claimed = true;
            return &slot;
        }
        if (seen == key) return &slot;  // another thread claimed it for the same key
    }
    return nullptr;
}

}  // namespace orion
