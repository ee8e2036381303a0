// One thread spinning on the GPU's global timer for a while, recording every stretch it did not
// run (two consecutive timer reads further apart than a threshold): when two processes do this
// at once without MPS, each one's gaps are the other's timeslices plus the context switches.
//
//   spin DURATION_MS THRESHOLD_NS START_REALTIME_NS
//
// Starts its kernel at START_REALTIME_NS (CLOCK_REALTIME), so that two processes begin together
// once both have their contexts, and prints one JSON object: the kernel's first and last timer
// reads and its gaps as [before, after] pairs (global timer ns, one clock for every context).
#include <cuda_runtime.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr unsigned int kCapacity = 1 << 16;

__global__ void spin(unsigned long long duration_ns, unsigned long long threshold_ns,
                     unsigned long long* gaps, unsigned int* count, unsigned long long* bounds) {
    unsigned long long start = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long previous = start;
    unsigned long long now = start;
    unsigned int n = 0;
    while (now - start < duration_ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - previous > threshold_ns) {
            if (n < kCapacity) {
                gaps[2 * n] = previous;
                gaps[2 * n + 1] = now;
            }
            ++n;
        }
        previous = now;
    }
    *count = n;
    bounds[0] = start;
    bounds[1] = now;
}

long long realtime_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void check(cudaError_t result, const char* what) {
    if (result != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(result));
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: spin DURATION_MS THRESHOLD_NS START_REALTIME_NS\n");
        return 2;
    }
    const unsigned long long duration_ns = std::strtoull(argv[1], nullptr, 10) * 1000000ULL;
    const unsigned long long threshold_ns = std::strtoull(argv[2], nullptr, 10);
    const long long start_at = std::strtoll(argv[3], nullptr, 10);
    unsigned long long* gaps = nullptr;
    unsigned int* count = nullptr;
    unsigned long long* bounds = nullptr;
    check(cudaMalloc(&gaps, sizeof(unsigned long long) * 2 * kCapacity), "cudaMalloc");
    check(cudaMalloc(&count, sizeof(unsigned int)), "cudaMalloc");
    check(cudaMalloc(&bounds, sizeof(unsigned long long) * 2), "cudaMalloc");
    spin<<<1, 1>>>(1000, threshold_ns, gaps, count, bounds);  // loads the module: not timed
    check(cudaDeviceSynchronize(), "warm-up");
    while (realtime_ns() < start_at) {
        timespec pause{0, 100000};
        nanosleep(&pause, nullptr);
    }
    spin<<<1, 1>>>(duration_ns, threshold_ns, gaps, count, bounds);
    check(cudaDeviceSynchronize(), "spin");
    unsigned int n = 0;
    unsigned long long span[2] = {0, 0};
    check(cudaMemcpy(&n, count, sizeof(n), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(span, bounds, sizeof(span), cudaMemcpyDeviceToHost), "copy");
    const unsigned int kept = n < kCapacity ? n : kCapacity;
    std::vector<unsigned long long> host(2 * static_cast<size_t>(kept));
    if (kept != 0) {
        check(cudaMemcpy(host.data(), gaps, sizeof(unsigned long long) * host.size(),
                         cudaMemcpyDeviceToHost),
              "copy");
    }
    std::printf("{\"start_ns\": %llu, \"end_ns\": %llu, \"gap_count\": %u, \"gaps\": [", span[0],
                span[1], n);
    for (unsigned int i = 0; i < kept; ++i) {
        std::printf("%s[%llu, %llu]", i ? ", " : "", host[2 * i], host[2 * i + 1]);
    }
    std::printf("]}\n");
    return 0;
}
