#include "launch_sampler.h"

#include <time.h>

#include <algorithm>
#include <thread>

#include "clock.h"
#include "driver.h"
#include "futex.h"
#include "kernel_learning.h"
#include "tracking.h"

namespace orion {
namespace {

constexpr timespec kReadPeriod{0, 1'000'000};         // while samples are pending
constexpr std::uint64_t kIdleWaitNs = 1'000'000'000;  // bounds a missed wake-up

}  // namespace

int LaunchSampler::begin(CUstream stream) {
    const driver::Helpers& h = driver::helpers();
    if (h.event_create == nullptr || h.event_record == nullptr || h.event_query == nullptr ||
        h.event_elapsed_time == nullptr || h.ctx_get_current == nullptr) {
        return -1;
    }
    std::uint32_t mask = free_mask_.load(std::memory_order_acquire);
    int index = -1;
    while (mask != 0) {
        const int bit = __builtin_ctz(mask);
        if (free_mask_.compare_exchange_weak(mask, mask & ~(1U << bit), std::memory_order_acq_rel)) {
            index = bit;
            break;
        }
    }
    if (index < 0) return -1;
    Pair& pair = pairs_[index];
    CUcontext context = nullptr;
    if (h.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr) {
        release(index);
        return -1;
    }
    if (pair.start == nullptr) {
        // First use of this pair: its events live in the context of the launches it times.
        // The second blocks a waiter rather than spinning it (the felt-latency thread waits on it).
        if (h.event_create(&pair.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
            h.event_create(&pair.end, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) {
            pair.start = pair.end = nullptr;
            release(index);
            return -1;
        }
        pair.context = context;
    } else if (pair.context != context) {
        release(index);  // a program with several contexts: times the first one's launches only
        return -1;
    }
    pair.state.store(kRecording, std::memory_order_relaxed);
    if (h.event_record(pair.start, stream) != CUDA_SUCCESS) {
        release(index);
        return -1;
    }
    return index;
}

void LaunchSampler::end(int index, CUstream stream, bool launched, const SampleUse& use) {
    if (index < 0) {
        if (use.call_ns != 0) unclaim_felt();
        return;
    }
    Pair& pair = pairs_[index];
    if (!launched || driver::helpers().event_record(pair.end, stream) != CUDA_SUCCESS) {
        if (use.call_ns != 0) unclaim_felt();
        release(index);
        return;
    }
    pair.use = use;
    if (use.call_ns != 0 && driver::helpers().event_synchronize != nullptr) {
        pair.state.store(kFelt, std::memory_order_release);
        felt_pair_.store(index, std::memory_order_release);
        std::call_once(felt_once_, [this] { std::thread([this] { felt_loop(); }).detach(); });
        felt_posted_.fetch_add(1, std::memory_order_acq_rel);
        futex_wake_all(felt_posted_);
        return;
    }
    if (use.call_ns != 0) {
        unclaim_felt();
        pair.use.call_ns = 0;
    }
    pair.state.store(kPending, std::memory_order_release);
    std::call_once(reader_once_, [this] { start_reader(); });
    if (pending_.fetch_add(1, std::memory_order_acq_rel) == 0) futex_wake_all(pending_);
}

void LaunchSampler::release(int index) {
    pairs_[index].state.store(kFree, std::memory_order_relaxed);
    free_mask_.fetch_or(1U << index, std::memory_order_acq_rel);
}

void LaunchSampler::start_reader() {
    std::thread([this] { read_loop(); }).detach();
}

void LaunchSampler::read_loop() {
    // Reading an event is one of the calls CUDA forbids while any thread of the process captures
    // a graph in the global mode (PyTorch's default): it would invalidate the program's capture.
    // This thread's calls are orion's own and never part of a capture: relaxed mode exempts them.
    if (const auto exchange = driver::helpers().thread_exchange_stream_capture_mode) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        exchange(&mode);
    }
    CUcontext current = nullptr;  // the context made current on this thread
    for (;;) {
        const std::uint32_t pending = pending_.load(std::memory_order_acquire);
        if (pending == 0) {
            futex_wait(pending_, 0, kIdleWaitNs);
            continue;
        }
        for (int i = 0; i < kPairs; ++i) {
            Pair& pair = pairs_[i];
            if (pair.state.load(std::memory_order_acquire) != kPending) continue;
            if (read(pair, &current)) {
                release(i);
                pending_.fetch_sub(1, std::memory_order_acq_rel);
            }
        }
        nanosleep(&kReadPeriod, nullptr);
    }
}

bool LaunchSampler::read(Pair& pair, CUcontext* current) {
    const driver::Helpers& h = driver::helpers();
    if (pair.context != *current && h.ctx_set_current != nullptr &&
        h.ctx_set_current(pair.context) == CUDA_SUCCESS) {
        *current = pair.context;
    }
    const CUresult state = h.event_query(pair.end);
    if (state == CUDA_ERROR_NOT_READY) return false;
    float milliseconds = 0;
    if (state == CUDA_SUCCESS &&
        h.event_elapsed_time(&milliseconds, pair.start, pair.end) == CUDA_SUCCESS &&
        milliseconds >= 0) {
        deliver(pair.use, static_cast<std::uint64_t>(static_cast<double>(milliseconds) * 1e6));
    }
    return true;  // read, or unreadable (an error): either way done with
}

void LaunchSampler::felt_loop() {
    if (const auto exchange = driver::helpers().thread_exchange_stream_capture_mode) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;  // as the reader (above)
        exchange(&mode);
    }
    CUcontext current = nullptr;
    std::uint32_t seen = 0;
    for (;;) {
        const std::uint32_t posted = felt_posted_.load(std::memory_order_acquire);
        if (posted == seen) {
            futex_wait(felt_posted_, posted, kIdleWaitNs);
            continue;
        }
        seen = posted;
        const int index = felt_pair_.exchange(-1, std::memory_order_acq_rel);
        if (index < 0) continue;
        time_felt(pairs_[index], &current);
        release(index);
        unclaim_felt();
    }
}

void LaunchSampler::time_felt(Pair& pair, CUcontext* current) {
    const driver::Helpers& h = driver::helpers();
    if (pair.context != *current && h.ctx_set_current != nullptr &&
        h.ctx_set_current(pair.context) == CUDA_SUCCESS) {
        *current = pair.context;
    }
    if (h.event_synchronize(pair.end) != CUDA_SUCCESS) return;
    const std::uint64_t now = monotonic_ns();  // the end of the work, as the program sees it
    float milliseconds = 0;
    if (h.event_elapsed_time(&milliseconds, pair.start, pair.end) != CUDA_SUCCESS ||
        milliseconds < 0) {
        return;
    }
    const auto duration = static_cast<std::uint64_t>(static_cast<double>(milliseconds) * 1e6);
    const SampleUse& use = pair.use;
    deliver(use, duration);
    if (stats_ == nullptr || use.expected_ns == 0 || now <= use.call_ns) return;
    const std::uint64_t felt = now - use.call_ns;
    const bool alone =
        use.alone && view_ != nullptr && be_last_launch_ns(*view_) + kAloneQuietNs <= use.call_ns;
    if (alone) {
        // What "alone" adds to a launch's duration here: an average over about eight, of
        // launches faster than their learned duration too (an average of the slower ones only
        // would grow past the true overhead and hide a slowdown as large).
        const std::int64_t overhead =
            static_cast<std::int64_t>(felt) - static_cast<std::int64_t>(use.expected_ns);
        overhead_ns_ = overhead_known_ ? overhead_ns_ - overhead_ns_ / 8 + overhead / 8 : overhead;
        overhead_known_ = true;
    }
    const std::uint64_t expected = use.expected_ns + static_cast<std::uint64_t>(
                                                         std::max<std::int64_t>(overhead_ns_, 0));
    if (use.felt_counted) stats_->felt.record(felt, expected, alone);
    if (use.request_start) stats_->start_felt.record(felt, expected, alone);
}

void LaunchSampler::deliver(const SampleUse& use, std::uint64_t duration_ns) {
    if (use.entry != nullptr && use.learn) KernelLearner::add_sample(*use.entry, duration_ns);
    if (stats_ == nullptr || !use.gpu_time_counted) return;
    stats_->sampled_launches.fetch_add(1, std::memory_order_relaxed);
    if (use.expected_ns != 0) {
        stats_->sampled_ns.fetch_add(duration_ns, std::memory_order_relaxed);
        stats_->sampled_expected_ns.fetch_add(use.expected_ns, std::memory_order_relaxed);
    }
}

}  // namespace orion
