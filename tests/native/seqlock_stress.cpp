// Stress test of the in-flight ring's seqlock (shared_state.h): one writer laps a small ring as
// fast as it can while readers read launches from it. Every launch's payload is derived from its
// sequence number, so a read that claims to be consistent but mixes two launches is caught.
// Prints "torn N checked M" and exits 1 when any torn read was accepted.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "shared_state.h"

namespace {

constexpr std::uint64_t kSlots = 8;  // a tiny ring: the writer laps it constantly

orion::InflightLaunch launch_for(std::uint64_t seq) {
    orion::InflightLaunch launch;
    launch.key = seq * 3;
    launch.launch_ns = seq * 5;
    launch.expected_end_ns = seq * 7;
    launch.duration_ns = seq * 11;
    launch.sm_needed = static_cast<std::uint32_t>(seq * 13);
    launch.kernel_class = static_cast<std::uint8_t>(seq % 3);
    launch.known = seq % 2 == 0;
    launch.gpu_written = seq % 5 == 0;
    return launch;
}

bool same(const orion::InflightLaunch& a, const orion::InflightLaunch& b) {
    return a.key == b.key && a.launch_ns == b.launch_ns && a.expected_end_ns == b.expected_end_ns &&
           a.duration_ns == b.duration_ns && a.sm_needed == b.sm_needed &&
           a.kernel_class == b.kernel_class && a.known == b.known &&
           a.gpu_written == b.gpu_written;
}

}  // namespace

int main(int argc, char** argv) {
    const std::uint64_t writes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000000;
    std::vector<orion::InflightEntry> ring(kSlots);
    for (auto& entry : ring) entry.seq.store(0);
    std::atomic<std::uint64_t> latest{0};
    std::atomic<bool> done{false};
    std::atomic<std::uint64_t> torn{0};
    std::atomic<std::uint64_t> checked{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r) {
        readers.emplace_back([&] {
            while (!done.load(std::memory_order_relaxed)) {
                const std::uint64_t newest = latest.load(std::memory_order_acquire);
                for (std::uint64_t seq = newest > kSlots ? newest - kSlots + 1 : 1; seq <= newest;
                     ++seq) {
                    orion::InflightLaunch read;
                    if (orion::read_inflight(ring[seq % kSlots], seq, &read) != seq) continue;
                    checked.fetch_add(1, std::memory_order_relaxed);
                    if (!same(read, launch_for(seq))) torn.fetch_add(1, std::memory_order_relaxed);
                }
            }
        });
    }
    for (std::uint64_t seq = 1; seq <= writes; ++seq) {
        orion::write_inflight(ring[seq % kSlots], seq, launch_for(seq));
        latest.store(seq, std::memory_order_release);
    }
    done.store(true);
    for (auto& reader : readers) reader.join();
    std::printf("torn %llu checked %llu\n", static_cast<unsigned long long>(torn.load()),
                static_cast<unsigned long long>(checked.load()));
    return torn.load() == 0 && checked.load() > 0 ? 0 : 1;
}
