// Launch cost of an empty kernel: the critical-path overhead orion's hook adds to every launch.
//
//   empty_launch LAUNCHES ROUNDS [own|legacy]
// prints one line per round: "round <i> call_ns <per launch, enqueue loop only> total_ns <per
// launch, until the GPU finished> thread_cpu_ns <the launching thread's CPU time per launch>
// process_cpu_ns <every thread's, the hook's helpers included> thread_switches <the launching
// thread's context switches, voluntary + involuntary, per 1,000 launches> process_switches
// <every thread's>": CPU time and switches tell a slower launch path from helper threads that
// take the launching CPU. Launches go through the CUDA runtime (<<<>>>), i.e. through
// libcudart's cuGetProcAddress-resolved driver entry points, as PyTorch's do: on a stream the
// program created (`own`, the default) or on the legacy default stream (`legacy`), where PyTorch
// launches unless a program picks a stream, and where orion moves an HP client's launches to its
// private high-priority stream.
#include <cuda_runtime.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void empty_kernel() {}

struct Usage {
    double cpu_ns;
    double switches;
};

static Usage usage(int who) {
    rusage now{};
    getrusage(who, &now);
    const auto ns = [](const timeval& t) { return t.tv_sec * 1e9 + t.tv_usec * 1e3; };
    return {ns(now.ru_utime) + ns(now.ru_stime),
            static_cast<double>(now.ru_nvcsw + now.ru_nivcsw)};
}

static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
        std::exit(1);
    }
}

int main(int argc, char** argv) {
    const long launches = argc > 1 ? std::atol(argv[1]) : 100000;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const bool legacy = argc > 3 && std::strcmp(argv[3], "legacy") == 0;
    cudaStream_t stream = nullptr;  // the legacy default stream (nvcc's default)
    if (!legacy) check(cudaStreamCreate(&stream), "cudaStreamCreate");
    for (int i = 0; i < 2000; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    check(cudaStreamSynchronize(stream), "warm-up");
    using clock = std::chrono::steady_clock;
    for (int round = 0; round < rounds; ++round) {
        const Usage thread_before = usage(RUSAGE_THREAD);
        const Usage process_before = usage(RUSAGE_SELF);
        const auto start = clock::now();
        for (long i = 0; i < launches; ++i) empty_kernel<<<1, 32, 0, stream>>>();
        const auto enqueued = clock::now();
        check(cudaStreamSynchronize(stream), "synchronize");
        const auto finished = clock::now();
        const Usage thread_after = usage(RUSAGE_THREAD);
        const Usage process_after = usage(RUSAGE_SELF);
        check(cudaGetLastError(), "launch");
        const double call_ns =
            std::chrono::duration<double, std::nano>(enqueued - start).count() / launches;
        const double total_ns =
            std::chrono::duration<double, std::nano>(finished - start).count() / launches;
        std::printf(
            "round %d call_ns %.1f total_ns %.1f thread_cpu_ns %.1f process_cpu_ns %.1f "
            "thread_switches %.2f process_switches %.2f\n",
            round, call_ns, total_ns, (thread_after.cpu_ns - thread_before.cpu_ns) / launches,
            (process_after.cpu_ns - process_before.cpu_ns) / launches,
            (thread_after.switches - thread_before.switches) * 1000.0 / launches,
            (process_after.switches - process_before.switches) * 1000.0 / launches);
    }
    return 0;
}
