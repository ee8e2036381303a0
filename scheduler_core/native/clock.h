#pragma once

#include <time.h>

#include <cstdint>

namespace orion {

// CLOCK_MONOTONIC is one clock for every process on the machine, so launch times recorded by
// different clients (and by the Python controller) are directly comparable.
inline std::uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace orion
