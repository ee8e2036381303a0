// A context whose only work waits at a closed stream wait (`cuStreamWaitValue32` on a word in
// registered host memory, as orion's GPU gate puts before BE work), for a while: run beside
// `spin`, it shows whether the driver still hands such a context timeslices. If it does, every
// gap in `spin`'s record is a slice the blocked context took although it could do nothing.
//
//   blocked DURATION_MS START_REALTIME_NS
//
// At START_REALTIME_NS it launches a tiny kernel, the closed wait and a tiny kernel behind it;
// after DURATION_MS it opens the wait and prints one JSON object: whether the kernel behind the
// wait had run before the wait was opened (it must not have).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

__global__ void mark(unsigned int* flag, unsigned int value) { *flag = value; }

long long realtime_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void pause_until(long long when_ns) {
    while (realtime_ns() < when_ns) {
        timespec pause{0, 100000};
        nanosleep(&pause, nullptr);
    }
}

void check(cudaError_t result, const char* what) {
    if (result != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(result));
        std::exit(1);
    }
}

void check_driver(CUresult result, const char* what) {
    if (result != CUDA_SUCCESS) {
        std::fprintf(stderr, "%s: driver error %d\n", what, static_cast<int>(result));
        std::exit(1);
    }
}

// The driver's entry points, from the library the runtime loaded (no link to libcuda needed).
template <typename Function>
Function driver_entry(const char* name) {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* symbol = library ? dlsym(library, name) : nullptr;
    if (symbol == nullptr) {
        std::fprintf(stderr, "no %s in libcuda.so.1\n", name);
        std::exit(1);
    }
    return reinterpret_cast<Function>(symbol);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: blocked DURATION_MS START_REALTIME_NS\n");
        return 2;
    }
    const long long duration_ns = std::strtoll(argv[1], nullptr, 10) * 1000000LL;
    const long long start_at = std::strtoll(argv[2], nullptr, 10);
    unsigned int* flag = nullptr;
    check(cudaMalloc(&flag, sizeof(unsigned int)), "cudaMalloc");
    check(cudaMemset(flag, 0, sizeof(unsigned int)), "cudaMemset");
    const auto host_register = driver_entry<decltype(&cuMemHostRegister)>("cuMemHostRegister_v2");
    const auto device_pointer =
        driver_entry<decltype(&cuMemHostGetDevicePointer)>("cuMemHostGetDevicePointer_v2");
    const auto wait_value = driver_entry<decltype(&cuStreamWaitValue32)>("cuStreamWaitValue32_v2");
    auto* gate = static_cast<volatile unsigned int*>(std::aligned_alloc(4096, 4096));
    *gate = 0;
    check_driver(host_register(const_cast<unsigned int*>(gate), 4096,
                                   CU_MEMHOSTREGISTER_DEVICEMAP),
                 "cuMemHostRegister");
    CUdeviceptr gate_on_gpu = 0;
    check_driver(device_pointer(&gate_on_gpu, const_cast<unsigned int*>(gate), 0),
                 "cuMemHostGetDevicePointer");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    mark<<<1, 1, 0, stream>>>(flag, 0);  // loads the module: not timed
    check(cudaStreamSynchronize(stream), "warm-up");
    pause_until(start_at);
    mark<<<1, 1, 0, stream>>>(flag, 1);
    check_driver(wait_value(reinterpret_cast<CUstream>(stream), gate_on_gpu, 1,
                                     CU_STREAM_WAIT_VALUE_GEQ),
                 "cuStreamWaitValue32");
    mark<<<1, 1, 0, stream>>>(flag, 2);
    pause_until(start_at + duration_ns);
    unsigned int before_open = 0;
    check(cudaMemcpy(&before_open, flag, sizeof(before_open), cudaMemcpyDeviceToHost), "copy");
    *gate = 1;
    check(cudaStreamSynchronize(stream), "open");
    unsigned int after_open = 0;
    check(cudaMemcpy(&after_open, flag, sizeof(after_open), cudaMemcpyDeviceToHost), "copy");
    std::printf("{\"flag_before_open\": %u, \"flag_after_open\": %u}\n", before_open, after_open);
    return 0;
}
