// Small helpers shared by the files that implement ClientRuntime (client_runtime.h): its log
// line, its reading of boolean environment variables and of a kernel node's launch. Internal to
// the preload library.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_api.h"
#include "shared_state.h"

namespace orion {

// A launch's slot in its client's in-flight ring and completion words.
constexpr std::uint64_t kRingMask = kInflightSlots - 1;

// One line on stderr, prefixed "orion: ", written with one call so that the messages of
// concurrent processes do not interleave mid-line.
inline void log_message(const char* text) {
    std::string line = std::string("orion: ") + text + "\n";
    [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
}

// The function a kernel node runs: its CUfunction, or the CUkernel a node may name instead,
// which the driver takes wherever a CUfunction goes (driver.h).
inline CUfunction node_function(const CUDA_KERNEL_NODE_PARAMS_v2& params) {
    return params.func != nullptr ? params.func : reinterpret_cast<CUfunction>(params.kern);
}

// A kernel node's function, grid, block and dynamic shared memory, copied into `out` (a
// LaunchShape that gates a one-kernel segment, or a KernelSighting to learn from): one reading
// of the node for both. No lock and no allocation: the launch path calls it.
template <typename Shape>
inline void copy_node_shape(const CUDA_KERNEL_NODE_PARAMS_v2& params, Shape* out) {
    out->function = node_function(params);
    out->grid[0] = params.gridDimX;
    out->grid[1] = params.gridDimY;
    out->grid[2] = params.gridDimZ;
    out->block[0] = params.blockDimX;
    out->block[1] = params.blockDimY;
    out->block[2] = params.blockDimZ;
    out->shared_bytes = params.sharedMemBytes;
}

// Set, non-empty and not "0".
inline bool env_flag(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace orion
