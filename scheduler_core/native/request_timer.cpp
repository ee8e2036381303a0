#include "request_timer.h"

#include <algorithm>
#include <thread>

#include "clock.h"
#include "driver.h"
#include "futex.h"
#include "launch_sampler.h"
#include "tracking.h"

namespace orion {
namespace {

constexpr std::uint64_t kIdleWaitNs = 1'000'000'000;  // bounds a missed wake-up
// How long after its last call a request whose last launches were not marked waits for the
// program's wait to return, and how often it looks.
constexpr std::uint64_t kUnmarkedWaitNs = 20'000'000;
constexpr std::uint64_t kUnmarkedLookNs = 1'000'000;

}  // namespace

bool RequestTimer::start(std::uint64_t call_ns, bool be_idle, bool held) {
    // Whatever was timed before has had its last launch: the gap that starts this one passed.
    marking_.store(false, std::memory_order_release);
    const driver::Helpers& h = driver::helpers();
    if (stats_ == nullptr || h.event_create == nullptr || h.event_record == nullptr ||
        h.event_synchronize == nullptr || h.ctx_get_current == nullptr) {
        return false;
    }
    // Filled in while kStarting, so the thread (waiting for kOpen) reads a whole request.
    std::uint32_t idle = kIdle;
    if (!state_.compare_exchange_strong(idle, kStarting, std::memory_order_acq_rel)) return false;
    CUcontext context = nullptr;
    if (h.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr ||
        (context_ != nullptr && context != context_) ||
        event_failed_.load(std::memory_order_relaxed)) {
        state_.store(kIdle, std::memory_order_release);  // times the first context's requests only
        return false;
    }
    context_ = context;
    call_ns_ = call_ns;
    be_idle_ = be_idle;
    held_ = held;
    marks_.store(0, std::memory_order_relaxed);
    launches_.store(0, std::memory_order_relaxed);
    end_ns_.store(call_ns, std::memory_order_relaxed);
    marked_call_ns_.store(0, std::memory_order_relaxed);
    marking_.store(true, std::memory_order_release);
    state_.store(kOpen, std::memory_order_release);
    return true;  // the thread is woken by the first mark, after the launch
}

bool RequestTimer::set_up() {
    // After a launch, never between one's tracking and its call to the driver: the event (in
    // the context of the launches it follows; blocking sync, so the thread sleeps on it) and
    // the thread, once.
    std::call_once(set_up_once_, [this] {
        if (driver::helpers().event_create(
                &event_, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            event_ = nullptr;
            event_failed_.store(true, std::memory_order_relaxed);
            return;
        }
        std::thread([this] { loop(); }).detach();
    });
    return event_ != nullptr;
}

bool RequestTimer::continues(std::uint64_t call_ns) const {
    return marking_.load(std::memory_order_acquire) &&
           call_ns < end_ns_.load(std::memory_order_acquire) + gap_ns_;
}

void RequestTimer::mark(CUstream stream, std::uint64_t call_ns, bool launched) {
    if (!marking_.load(std::memory_order_acquire)) return;
    // Reset only by the next timed request's start, after the thread has read it.
    launches_.fetch_add(1, std::memory_order_relaxed);
    if (marks_.load(std::memory_order_relaxed) != 0 &&
        call_ns < marked_call_ns_.load(std::memory_order_relaxed) + kMarkSpacingNs) {
        return;  // its end: a later mark's, or the program's wait after it
    }
    if (!set_up()) {
        marking_.store(false, std::memory_order_release);  // no event: nothing is timed
        return;
    }
    if (!launched) {
        // Nothing ran to mark; the thread ends the request if nothing of it ever is.
        futex_wake_all(state_);
        return;
    }
    marked_call_ns_.store(call_ns, std::memory_order_relaxed);
    if (driver::helpers().event_record(event_, stream) != CUDA_SUCCESS) {
        marking_.store(false, std::memory_order_release);  // the request goes untimed
        return;
    }
    if (marks_.fetch_add(1, std::memory_order_acq_rel) == 0) {
        futex_wake_all(state_);  // the thread, idle until a request opened
        futex_wake_all(marks_);  // or waiting for its first mark
    }
}

void RequestTimer::loop() {
    // As the launch sampler's threads: orion's own calls, exempt from a program's capture.
    if (const auto exchange = driver::helpers().thread_exchange_stream_capture_mode) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        exchange(&mode);
    }
    bool context_set = false;
    for (;;) {
        if (const std::uint32_t state = state_.load(std::memory_order_acquire); state != kOpen) {
            futex_wait(state_, state, kIdleWaitNs);
            continue;
        }
        if (!context_set && driver::helpers().ctx_set_current != nullptr) {
            context_set = driver::helpers().ctx_set_current(context_) == CUDA_SUCCESS;
        }
        std::uint64_t end_ns = 0;
        const bool ended = follow(&end_ns);
        marking_.store(false, std::memory_order_release);
        if (ended && end_ns > call_ns_) {
            deliver(end_ns - call_ns_, launches_.load(std::memory_order_relaxed),
                    ran_alone(end_ns));
        }
        state_.store(kIdle, std::memory_order_release);
    }
}

bool RequestTimer::follow(std::uint64_t* end_ns) {
    const auto gap_left = [this, end_ns] {
        const std::uint64_t quiet_until =
            std::max({last_call_ns_->load(std::memory_order_relaxed), *end_ns,
                      last_wait_ns_->load(std::memory_order_relaxed)}) +
            gap_ns_;
        const std::uint64_t now = monotonic_ns();
        return quiet_until > now ? quiet_until - now : 0;
    };
    *end_ns = call_ns_;
    // Its first launch is marked just after the call that opened it.
    while (marks_.load(std::memory_order_acquire) == 0) {
        const std::uint64_t left = gap_left();
        if (left == 0 || !marking_.load(std::memory_order_acquire)) return false;
        futex_wait(marks_, 0, left);
    }
    for (;;) {
        const std::uint32_t seen = marks_.load(std::memory_order_acquire);
        if (driver::helpers().event_synchronize(event_) != CUDA_SUCCESS) return false;
        *end_ns = monotonic_ns();  // the end of the latest marked launch, as the program sees it
        end_ns_.store(*end_ns, std::memory_order_release);
        // A launch marked meanwhile: its end is later. Else wait for one until the gap passes
        // (or the next request starts); a launch marked after the wait began shows on the next
        // turn, as the wait ends at most one gap later.
        while (marks_.load(std::memory_order_acquire) == seen) {
            const std::uint64_t left = gap_left();
            const bool next_started = !marking_.load(std::memory_order_acquire);
            if (left != 0 && !next_started) {
                futex_wait(marks_, seen, left);
                continue;
            }
            const std::uint64_t last_call = last_call_ns_->load(std::memory_order_relaxed);
            const std::uint64_t waited = last_wait_ns_->load(std::memory_order_relaxed);
            if (waited >= last_call) {  // the program waited for its work after its last launch
                *end_ns = std::max(*end_ns, waited);
                return true;
            }
            // Its last launch unmarked and not waited for yet: its end is the program's wait,
            // looked for about every millisecond for a while (a program that never waits gets
            // the end of its last marked launch).
            if (marked_call_ns_.load(std::memory_order_relaxed) >= last_call || next_started ||
                monotonic_ns() >= last_call + kUnmarkedWaitNs) {
                return true;
            }
            futex_wait(marks_, seen, kUnmarkedLookNs);
        }
    }
}

bool RequestTimer::ran_alone(std::uint64_t end_ns) const {
    if (view_ == nullptr) return false;
    if (be_idle_ && be_last_launch_ns(*view_) + LaunchSampler::kAloneQuietNs <= call_ns_) {
        return true;
    }
    // Held from the first call: alone if the hold outlasted the request.
    return held_ && sampling_hold_in_force(view_->header(), end_ns);
}

std::uint64_t RequestTimer::reference_ns() const {
    // Only a full window: a median of the first two or three requests alone scatters by as much
    // as they do, and the tail alone counted against it read the HP's own scatter as wide.
    if (alone_count_.load(std::memory_order_relaxed) < kAloneRequests) return 0;
    std::uint64_t sorted[kAloneRequests];
    std::copy(alone_ns_, alone_ns_ + kAloneRequests, sorted);
    std::nth_element(sorted, sorted + kAloneRequests / 2, sorted + kAloneRequests);
    return sorted[kAloneRequests / 2];
}

void RequestTimer::deliver(std::uint64_t felt_ns, std::uint32_t launches, bool alone) {
    ClientStats& stats = *stats_;
    stats.requests_timed.fetch_add(1, std::memory_order_relaxed);
    launches = std::max<std::uint32_t>(launches, 1);
    // Against the requests alone before it: an alone request is not compared with itself.
    const std::uint64_t expected = reference_ns() * launches;
    if (alone) {
        alone_ns_[alone_next_] = felt_ns / launches;
        alone_next_ = (alone_next_ + 1) % kAloneRequests;
        const std::uint32_t count = alone_count_.load(std::memory_order_relaxed);
        if (count < kAloneRequests) alone_count_.store(count + 1, std::memory_order_relaxed);
    }
    if (expected == 0) return;
    stats.request.record(felt_ns, expected, alone);
}

}  // namespace orion
