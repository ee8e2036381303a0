// Timing chosen launches on the GPU, for online profiles (kernel_learning.h) and for the
// interference `orion status` shows: how much slower a client's work ran than alone.
//
// A sampled launch gets a pair of timing events, one recorded on its stream just before it and
// one just after; the GPU timestamps each when it reaches it, so their difference is the launch's
// time on the GPU (for a launch that found the GPU idle, plus the few microseconds its launch call
// took after the first event). Nothing waits for them on the launch path: a thread of the
// sampler's own reads finished pairs about every millisecond and sleeps on a futex while none is
// pending, so a client that samples nothing never wakes it. Only sampled launches pay (two event
// records, a few microseconds); the others pay one load and branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda_api.h"
#include "shared_state.h"

namespace orion {

// What a sample is for, delivered when its events are read.
struct SampleUse {
    LearnedEntry* entry = nullptr;  // learning: the entry the duration is added to
    bool learn = false;             // false: not a duration alone (an HP launch beside BE work)
    std::uint64_t expected_ns = 0;  // interference: what it took alone (profiled or learned); 0: none
};

class LaunchSampler {
public:
    LaunchSampler() = default;
    LaunchSampler(const LaunchSampler&) = delete;
    LaunchSampler& operator=(const LaunchSampler&) = delete;

    // Delivers into `stats` (the client's shared statistics).
    void attach(ClientStats* stats) { stats_ = stats; }

    // Just before a launch on `stream`: records the first event of a free pair. Returns the pair,
    // or -1 when none is free or the driver refused (the launch then goes untimed).
    int begin(CUstream stream);
    // Just after it: records the second event and queues the pair for reading, or gives the pair
    // back when the launch failed.
    void end(int pair, CUstream stream, bool launched, const SampleUse& use);

private:
    static constexpr int kPairs = 32;  // samples in flight at once; bits of free_mask_
    enum : std::uint32_t { kFree = 0, kRecording = 1, kPending = 2 };
    struct Pair {
        std::atomic<std::uint32_t> state{kFree};
        CUevent start = nullptr;
        CUevent end = nullptr;
        CUcontext context = nullptr;  // the events' context
        SampleUse use;
    };

    void release(int pair);
    void start_reader();
    void read_loop();
    // Reads pair `index` if the GPU has reached its second event; true once it is done with it.
    bool read(Pair& pair, CUcontext* current);
    void deliver(const SampleUse& use, std::uint64_t duration_ns);

    ClientStats* stats_ = nullptr;
    Pair pairs_[kPairs];
    std::atomic<std::uint32_t> free_mask_{0xffffffffU};
    std::atomic<std::uint32_t> pending_{0};  // pairs queued for reading; the reader's futex word
    std::once_flag reader_once_;
    static_assert(kPairs == 32, "free_mask_ holds a bit per pair");
};

}  // namespace orion
