// How a thread waits for something the GPU will do: one policy for a held BE launch
// (ClientRuntime::wait_for_turn) and for the gate keeper (GateKeeper::run).
//
// Both wait for an in-flight launch to finish, and every launch carries its profiled expected
// end. So a waiter sleeps until shortly before the expected end, then looks finely around it
// (a BE kernel admitted or a gate opened microseconds late leaves the GPU idle), and once the
// prediction has clearly failed (an unprofiled or slowed kernel) it sleeps with exponential
// back-off: no core burns for long. The two differ only in how finely they look, which the
// settings say.
#pragma once

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cstdint>

namespace orion {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Sleeps with this thread's timer slack cut to 1 us (Linux defaults to 50 us), so a waiter wakes
// when asked to. Slack is per thread: the rest of the program is unaffected.
inline void precise_sleep(std::uint64_t ns) {
    thread_local bool slack_set = false;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = true;
    }
    timespec ts{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    nanosleep(&ts, nullptr);
}

struct WaitPacing {
    std::uint64_t lead_ns = 15'000;          // wake this long before an expected end
    std::uint64_t fine_window_ns = 200'000;  // look finely at most this long past it
    std::uint64_t max_predicted_sleep_ns = 1'000'000;
    std::uint64_t first_backoff_ns = 2'000;
    std::uint64_t max_backoff_ns = 50'000;
    // 0: a fine look is a short spin (a waiting launch: its thread has nothing else to do);
    // otherwise a sleep of this long (the keeper, a thread of the daemon, looks for every client).
    std::uint64_t fine_sleep_ns = 0;
    std::uint64_t spin_first_ns = 0;  // always look finely this long first
};

class WaitPacer {
public:
    WaitPacer(const WaitPacing& pacing, std::uint64_t start_ns)
        : pacing_(pacing), start_ns_(start_ns), backoff_ns_(pacing.first_backoff_ns) {}

    // Waits once, given the time now and the expected end of what is awaited (0: none known).
    void pause(std::uint64_t now_ns, std::uint64_t expected_ns) {
        const bool first_phase = now_ns - start_ns_ < pacing_.spin_first_ns;
        if (!first_phase && expected_ns > now_ns + pacing_.lead_ns) {
            precise_sleep(std::min(expected_ns - pacing_.lead_ns - now_ns,
                                   pacing_.max_predicted_sleep_ns));
            backoff_ns_ = pacing_.first_backoff_ns;
        } else if (first_phase ||
                   (expected_ns != 0 && now_ns < expected_ns + pacing_.fine_window_ns)) {
            fine_look();
        } else {
            precise_sleep(backoff_ns_);
            backoff_ns_ = std::min(backoff_ns_ * 2, pacing_.max_backoff_ns);
        }
    }

    // Past the always-fine first phase (cheap checks, such as reaping dead peers, may run).
    bool settled(std::uint64_t now_ns) const { return now_ns - start_ns_ >= pacing_.spin_first_ns; }

    // Something changed (the awaited work arrived or ended): back-off starts again.
    void restart(std::uint64_t now_ns) {
        start_ns_ = now_ns;
        backoff_ns_ = pacing_.first_backoff_ns;
    }

private:
    void fine_look() const {
        if (pacing_.fine_sleep_ns == 0) {
            for (int i = 0; i < 32; ++i) cpu_relax();
        } else {
            precise_sleep(pacing_.fine_sleep_ns);
        }
    }

    WaitPacing pacing_;
    std::uint64_t start_ns_;
    std::uint64_t backoff_ns_;
};

}  // namespace orion
