// Online profiles: what a client learns about the kernels and graphs its offline profile does not
// list, while it runs.
//
// On first sight of such a kernel the client claims an entry in its LearnedBlock (shared memory,
// so the controller can show it and save it as a profile) and describes it: name, launch shape,
// and its SM need from the driver's occupancy calculator (blocks of this function that fit on one
// SM, from its registers and shared memory, against the grid). Its duration comes from timed
// launches (launch_sampler.h): the median of the newest kLearnSamples, used for gating once
// kLearnMinSamples are in. A learned kernel's class stays unknown (only an offline profile's
// counters can tell compute from memory), so under `orion` nothing runs beside it; what learning
// buys is its duration (the BE queue bound, an HP launch's expected end) and its SM need.
// An offline entry always wins: a kernel the profile lists is never learned.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_api.h"
#include "shared_state.h"

namespace orion {

// One kernel launch or kernel node as seen: what describing it needs.
struct KernelSighting {
    std::uint64_t key = 0;
    CUfunction function = nullptr;
    unsigned int grid[3] = {1, 1, 1};
    unsigned int block[3] = {1, 1, 1};
    unsigned int shared_bytes = 0;
};

class KernelLearner {
public:
    // Works on `block` (this client's learned profile) for a GPU of `sm_count` SMs.
    void attach(LearnedBlock* block, std::uint32_t sm_count) {
        block_ = block;
        sm_count_ = sm_count;
    }
    bool attached() const { return block_ != nullptr; }

    // The entry of `key`, nullptr when it was never claimed (graphs are claimed when instantiated).
    LearnedEntry* find(std::uint64_t key) const;
    // The entry of the kernel seen, claimed and described on first sight; nullptr when the table
    // is full (the kernel then stays unknown).
    LearnedEntry* kernel(const KernelSighting& sighting);
    // The entry of graph `key` made of `nodes` (its kernel nodes), described on first sight: its
    // SM need is its widest node's. nullptr when the table or the node pool is full.
    LearnedEntry* graph(std::uint64_t key, const std::vector<KernelSighting>& nodes);

    // Whether the launch that brings `entry`'s count to `launches` should be timed: each of the
    // first 2 * kLearnSamples (some samples are refused: an HP launch beside BE work), then one in
    // kRefreshEvery, so the median follows a kernel whose duration drifts.
    static bool wants_sample(std::uint64_t launches) {
        return launches <= 2 * kLearnSamples || launches % kRefreshEvery == 0;
    }
    static constexpr std::uint64_t kRefreshEvery = 64;
    // An entry without a duration yet keeps being timed up to this many launches, and an HP
    // client's launches of it may ask BE to stand aside for a clean sample (a sampling hold,
    // client_runtime.h) as often: a bound on what learning one kernel may cost BE.
    static constexpr std::uint64_t kHoldLaunches = 64;
    static bool wants_sample(std::uint64_t launches, bool learned) {
        return wants_sample(launches) || (!learned && launches <= kHoldLaunches);
    }

    // Adds one measured duration (the sampler thread; one writer per entry).
    static void add_sample(LearnedEntry& entry, std::uint64_t duration_ns);
    // The learned duration, 0 until there are kLearnMinSamples samples.
    static std::uint64_t duration(const LearnedEntry& entry) {
        return entry.duration_ns.load(std::memory_order_acquire);
    }

    // SMs a grid of `blocks` needs when `per_sm` fit on one SM (0: unknown, then every SM).
    static std::uint32_t sms_needed(std::uint64_t blocks, std::uint32_t per_sm,
                                    std::uint32_t sm_count);

private:
    // Finds or claims the slot of `key`; `claimed` says whether this call claimed it.
    LearnedEntry* find_or_claim(std::uint64_t key, bool* claimed);
    void describe_kernel(LearnedEntry& entry, const KernelSighting& sighting);

    LearnedBlock* block_ = nullptr;
    std::uint32_t sm_count_ = 0;
};

}  // namespace orion
