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
//
// An HP launch may also be timed as the user feels it: from its launch call to the end of its
// work, the time it waited for the GPU (a BE context to drain and switch out, a BE graph to
// finish) included, which the pair's own events cannot see (the first is stamped only when the
// HP's work reaches the GPU). One such launch at a time: a thread of its own blocks on the
// second event (created with blocking sync, so it sleeps rather than spins) and reads the clock
// as it returns; the client's overhead alone (launching, noticing the end) is measured the same
// way on launches that ran alone, and is what "alone" adds to a launch's duration. Alone means
// no BE work unfinished at the call and no BE launch from kAloneQuietNs before the call to the
// end: a launch that found BE idle at its call but waited behind BE work launched after it, or
// for a BE context that had just run to switch out, is not alone, and counting its wait as
// overhead would teach the sampler that the harm is the client's own (on an H200 the felt
// slowdown read 0.57-0.80 while the HP's p99 was 1.5-2.5x of alone).
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
    std::uint64_t call_ns = 0;      // felt: the launch call (monotonic ns); 0: not timed so
    bool alone = false;             // felt: no BE work was unfinished at the call
    bool felt_counted = false;      // felt: counted in felt_* (chosen one in kInterferenceEvery)
    bool request_start = false;     // felt: a request's first launch, counted in start_felt_*
    bool gpu_time_counted = true;   // counted in sampled_* (false: timed for start_felt_* only)
};

class LaunchSampler {
public:
    LaunchSampler() = default;
    LaunchSampler(const LaunchSampler&) = delete;
    LaunchSampler& operator=(const LaunchSampler&) = delete;

    // Delivers into `stats` (the client's shared statistics); `view` is the run the client is
    // in, read to tell whether a launch timed as felt ran alone to its end.
    void attach(ClientStats* stats, const RunView* view) {
        stats_ = stats;
        view_ = view;
    }

    // Just before a launch on `stream`: records the first event of a free pair. Returns the pair,
    // or -1 when none is free or the driver refused (the launch then goes untimed).
    int begin(CUstream stream);
    // Just after it: records the second event and queues the pair for reading, or gives the pair
    // back when the launch failed.
    void end(int pair, CUstream stream, bool launched, const SampleUse& use);
    // Whether the launch about to end(), called at `call_ns`, may be timed as felt (set
    // SampleUse::call_ns): one at a time, and, where `spaced`, kFeltSpacingNs or more after the
    // last felt launch claimed. A claim is given back by end() (or by unclaim_felt() if the
    // launch is not timed).
    bool claim_felt(std::uint64_t call_ns, bool spaced) {
        if (spaced && call_ns < last_felt_call_ns_.load(std::memory_order_relaxed) + kFeltSpacingNs) {
            return false;
        }
        if (felt_busy_.exchange(true, std::memory_order_acq_rel)) return false;
        last_felt_call_ns_.store(call_ns, std::memory_order_relaxed);
        return true;
    }
    void unclaim_felt() { felt_busy_.store(false, std::memory_order_release); }
    // The least time between felt launches chosen by count (a request's first is timed apart):
    // each wakes the felt thread from a blocking event wait, and on an H200 the hook's helper
    // threads, woken so thousands of times a second by a back-to-back launch loop, took 0.5 us
    // of CPU per launch from the launching thread's CPU, or slowed its launches by as much from
    // a CPU of their own (benchmarks/results/nvidia-h200/launch-overhead-cpus).
    static constexpr std::uint64_t kFeltSpacingNs = 1'000'000;

    // How long before a felt launch's call (or a timed request's first, request_timer.h) BE
    // must have launched nothing for it to count as alone: two of the driver's timeslices
    // (2.09 ms on an H100), so that a BE context still resident, or a BE kernel running past its
    // estimated end, is not taken for the HP's own.
    static constexpr std::uint64_t kAloneQuietNs = 5'000'000;

private:
    static constexpr int kPairs = 32;  // samples in flight at once; bits of free_mask_
    enum : std::uint32_t { kFree = 0, kRecording = 1, kPending = 2, kFelt = 3 };
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
    // The felt-latency thread: waits for a pair handed to it, blocks on its second event.
    void felt_loop();
    void time_felt(Pair& pair, CUcontext* current);

    ClientStats* stats_ = nullptr;
    Pair pairs_[kPairs];
    std::atomic<std::uint32_t> free_mask_{0xffffffffU};
    std::atomic<std::uint32_t> pending_{0};  // pairs queued for reading; the reader's futex word
    std::once_flag reader_once_;
    std::atomic<bool> felt_busy_{false};
    std::atomic<std::uint64_t> last_felt_call_ns_{0};
    std::atomic<std::uint32_t> felt_posted_{0};  // futex word: bumped when a pair is handed over
    std::atomic<int> felt_pair_{-1};
    std::once_flag felt_once_;
    const RunView* view_ = nullptr;
    // Felt alone minus duration, averaged with its sign (the felt thread's only): what the
    // client's own launching and noticing the end add to a launch that had the GPU to itself.
    std::int64_t overhead_ns_ = 0;
    bool overhead_known_ = false;
    static_assert(kPairs == 32, "free_mask_ holds a bit per pair");
};

}  // namespace orion
