// Sleeping on a 32-bit word of the run's shared memory, across processes (Linux futexes).
//
// Shared (not FUTEX_PRIVATE) futexes, because the waker and the sleeper are different processes
// mapping the same object. Used only off the launch path's common case: the gate keeper sleeps
// while HP is idle, and an HP launch wakes it only when it is sleeping.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace orion {

// Sleeps while `word` holds `expected`, at most `timeout_ns`; returns on a wake, a change, a
// signal or the timeout (the caller re-checks whatever it waits for).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::uint64_t timeout_ns) {
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
    timespec timeout{static_cast<time_t>(timeout_ns / 1000000000ULL),
                     static_cast<long>(timeout_ns % 1000000000ULL)};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &timeout,
            nullptr, 0);
}

// Wakes every process sleeping on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, 0x7fffffff, nullptr,
            nullptr, 0);
}

}  // namespace orion
