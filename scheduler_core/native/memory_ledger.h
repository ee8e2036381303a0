// Per-client GPU memory accounting and limits (jobs.json `memory_limit`).
//
// Every allocation route of the driver (cuMemAlloc, pitched, managed, stream-ordered and from a
// pool, the virtual-memory API's cuMemCreate that PyTorch's expandable segments use, and CUDA
// arrays, plain, 3D and mipmapped, counted by the size of their elements) reserves
// its size in the client's slot of the run's shared memory before the real call; one that would
// take the client's use past its limit fails with CUDA_ERROR_OUT_OF_MEMORY without reaching the
// driver, so PyTorch and CuPy raise their usual out-of-memory errors. Frees give the size back
// (the ledger remembers each allocation's size: the driver's free calls do not say it). The limit
// lives in shared memory, so the controller can change it while the run is live; lowering it
// below the current use fails new allocations and never frees anything.
//
// Allocation is not the launch path: a mutex around the size maps is affordable here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "cuda_api.h"
#include "shared_state.h"

namespace orion {

class MemoryLedger {
public:
    void attach(ClientSlot* slot) { slot_ = slot; }
    bool active() const { return slot_ != nullptr; }

    // Takes `bytes` from the client's allowance; false (nothing taken) when the limit forbids it.
    bool reserve(std::uint64_t bytes);
    // Gives back `bytes` taken by reserve() whose allocation did not happen.
    void unreserve(std::uint64_t bytes);

    // An allocation reserved and made: remembered so that its free gives the size back.
    void record_pointer(CUdeviceptr pointer, std::uint64_t bytes);
    void record_handle(CUmemGenericAllocationHandle handle, std::uint64_t bytes);
    // CUDA arrays (plain and mipmapped), by their handle.
    void record_array(const void* array, std::uint64_t bytes);
    // A successful free: the remembered size goes back (unknown pointers: nothing).
    void forget_pointer(CUdeviceptr pointer);
    void forget_handle(CUmemGenericAllocationHandle handle);
    void forget_array(const void* array);

    // The limit in force (0: none).
    std::uint64_t limit() const;
    std::uint64_t used() const;

    // cuMemGetInfo / cuDeviceTotalMem as the client should see them under its limit.
    void adjust_info(std::size_t* free_bytes, std::size_t* total_bytes) const;
    void adjust_total(std::size_t* total_bytes) const;

private:
    ClientSlot* slot_ = nullptr;
    std::mutex mutex_;
    std::unordered_map<CUdeviceptr, std::uint64_t> pointers_;
    std::unordered_map<CUmemGenericAllocationHandle, std::uint64_t> handles_;
    std::unordered_map<const void*, std::uint64_t> arrays_;
};

}  // namespace orion
