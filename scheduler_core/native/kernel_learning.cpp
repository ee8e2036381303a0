#include "kernel_learning.h"

#include <algorithm>
#include <cstring>

#include "driver.h"
#include "probe_table.h"

namespace orion {

std::uint32_t KernelLearner::sms_needed(std::uint64_t blocks, std::uint32_t per_sm,
                                        std::uint32_t sm_count) {
    if (per_sm == 0) return sm_count;
    const std::uint64_t sms = (blocks + per_sm - 1) / per_sm;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(std::max<std::uint64_t>(sms, 1),
                                                              sm_count));
}

LearnedEntry* KernelLearner::find(std::uint64_t key) const {
    LearnedEntry* entry =
        find_slot(block_->entries, kLearnedSlots, kLearnedSlots, key, key, entry_key);
    return entry != nullptr && entry->described.load(std::memory_order_acquire) != 0 ? entry
                                                                                    : nullptr;
}

LearnedEntry* KernelLearner::find_or_claim(std::uint64_t key, bool* claimed) {
    // Keys are hashes already: they are their own start (as in the profile tables).
    return find_or_claim_slot(block_->entries, kLearnedSlots, kLearnedSlots, key, key, entry_key,
                              claimed);
}

void KernelLearner::describe_kernel(LearnedEntry& entry, const KernelSighting& sighting) {
    entry.graph = 0;
    std::copy(sighting.grid, sighting.grid + 3, entry.grid);
    std::copy(sighting.block, sighting.block + 3, entry.block);
    entry.shared_bytes = sighting.shared_bytes;
    const std::uint64_t threads =
        std::uint64_t{sighting.block[0]} * sighting.block[1] * sighting.block[2];
    entry.blocks_per_sm = driver::blocks_per_sm(sighting.function,
                                                static_cast<unsigned int>(threads),
                                                sighting.shared_bytes);
    const std::uint64_t blocks =
        std::uint64_t{sighting.grid[0]} * sighting.grid[1] * sighting.grid[2];
    entry.sm_needed = sms_needed(blocks, entry.blocks_per_sm, sm_count_);
    const char* name = driver::kernel_name(sighting.function);
    const std::size_t length = name != nullptr ? std::strlen(name) : 0;
    const std::uint32_t offset =
        length == 0 ? 0
                    : block_->names_used.fetch_add(static_cast<std::uint32_t>(length),
                                                   std::memory_order_relaxed);
    if (length != 0 && offset + length <= kLearnedNameBytes) {
        std::memcpy(block_->names + offset, name, length);
        entry.name_offset = offset;
        entry.name_length = static_cast<std::uint32_t>(length);
    }  // else: nameless (the pool is full); it gates as learned, but cannot be saved
}

LearnedEntry* KernelLearner::kernel(const KernelSighting& sighting) {
    bool claimed = false;
    LearnedEntry* entry = find_or_claim(sighting.key, &claimed);
    if (entry == nullptr || !claimed) return entry;
    describe_kernel(*entry, sighting);
    entry->described.store(1, std::memory_order_release);
    return entry;
}

LearnedEntry* KernelLearner::graph(std::uint64_t key, const std::vector<KernelSighting>& nodes) {
    bool claimed = false;
    LearnedEntry* entry = find_or_claim(key, &claimed);
    if (entry == nullptr || !claimed) return entry;
    entry->graph = 1;
    const auto count = static_cast<std::uint32_t>(nodes.size());
    const std::uint32_t first = block_->nodes_used.fetch_add(count, std::memory_order_relaxed);
    std::uint32_t widest = 0;
    const bool fits = first + count <= kLearnedNodes;
    for (std::uint32_t i = 0; i < count; ++i) {
        LearnedEntry* node = kernel(nodes[i]);
        if (node == nullptr) {
            widest = sm_count_;  // a node not described: assume it needs every SM
            continue;
        }
        widest = std::max(widest, node->sm_needed);
        if (fits) block_->nodes[first + i] = static_cast<std::uint32_t>(node - block_->entries);
    }
    entry->node_first = fits ? first : 0;
    entry->node_count = fits ? count : 0;  // 0: gated as learned, but its nodes cannot be saved
    entry->sm_needed = widest;
    entry->described.store(1, std::memory_order_release);
    return entry;
}

void KernelLearner::add_sample(LearnedEntry& entry, std::uint64_t duration_ns) {
    const std::uint32_t index = entry.sample_count.load(std::memory_order_relaxed);
    const auto clamped =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(duration_ns, UINT32_MAX));
    entry.samples[index % kLearnSamples].store(clamped, std::memory_order_relaxed);
    entry.sample_count.store(index + 1, std::memory_order_release);
    const std::uint32_t kept = std::min(index + 1, kLearnSamples);
    if (kept < kLearnMinSamples) return;
    std::uint32_t values[kLearnSamples];
    for (std::uint32_t i = 0; i < kept; ++i) {
        values[i] = entry.samples[i].load(std::memory_order_relaxed);
    }
    std::nth_element(values, values + kept / 2, values + kept);
    entry.duration_ns.store(std::max<std::uint64_t>(values[kept / 2], 1), std::memory_order_release);
}

}  // namespace orion
