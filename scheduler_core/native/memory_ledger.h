// Per-client GPU memory accounting and limits (jobs.json `memory_limit`).
//
// Every allocation route of the driver (cuMemAlloc, pitched, managed, stream-ordered and from a
// pool, the virtual-memory API's cuMemCreate that PyTorch's expandable segments use, and CUDA
// arrays, plain, 3D and mipmapped, counted by the size of their elements) reserves
// its size in the client's slot of the run's shared memory before the real call; one that would
// take the client's use past its limit fails with CUDA_ERROR_OUT_OF_MEMORY without reaching the
// driver, so PyTorch and CuPy raise their usual out-of-memory errors. Frees give the size back
// (the ledger remembers each allocation's size: the driver's free calls do not say it). The limit
// lives in the run's sealed decisions (shared_state.h, RunDecisions), so the controller can change
// it while the run is live and the client cannot; lowering it below the current use fails new
// allocations and never frees anything. A BE client's child counts against its parent's limit
// (ClientDecision::memory_account): in the parent's use as well as its own.
//
// Memory the driver keeps for the client beyond its live allocations counts too:
// - a stream-ordered pool keeps freed memory up to its release threshold (cuMemPoolSetAttribute
//   CU_MEMPOOL_ATTR_RELEASE_THRESHOLD; 0, the default, keeps nothing past the next
//   synchronisation): a pool allocation's size stays counted after its free as long as the pool
//   may keep it (its reserved memory at most max(threshold, its live allocations)), is drawn on
//   by the pool's next allocations, and goes back when the threshold drops, cuMemPoolTrimTo
//   trims it or the pool is destroyed;
// - graph memory-allocation nodes count from the graph's instantiation until its executable is
//   destroyed (graph_memory.h); allocations made while a stream is captured are not counted when
//   captured, since they become such nodes.
// - what a program grows of its context with cuCtxSetLimit: the device-side malloc heap and the
//   printf FIFO by their size, the stack as its bytes per thread for every thread the GPU can
//   hold at once (SMs x 2048, the most any GPU keeps resident per SM: an upper bound), each
//   beyond the driver's default (8 MiB, 1 MiB, 1 KiB), which is part of the context itself.
// - the process's CUDA context as the driver first makes it (the context, its default heap,
//   printf FIFO and stack: about 0.6 GiB on an H100), RunDecisions::context_bytes as the
//   controller measured it for the GPU: counted once per process when it attaches (count_context),
//   since every process has a context of its own (a BE client's child too, in the account it
//   shares), over the limit if need be (the process exists already; the daemon refuses a limit
//   below it at join), and gone with the process like its allocations.
// Memory of the host (cuMemCreate or a pool located on the host) is not the GPU's: not counted.
// Loaded modules' code and globals are not counted (their size is the program's, unknown here).
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
    // Client `index` of the run `view`: its slot is where it reports its use, its decision
    // (read-only for the client) says its limit, or whose limit and use it shares
    // (ClientDecision::memory_account). `sm_count`: the GPU's SMs, for what a stack size takes
    // (cuCtxSetLimit).
    void attach(const RunView& view, std::uint32_t index, std::uint32_t sm_count = 0) {
        view_ = view;
        slot_ = &view.client(index);
        decision_ = &view.decision(index);
        sm_count_ = sm_count;
    }
    bool active() const { return slot_ != nullptr; }

    // The process's CUDA context (RunDecisions::context_bytes), counted once when it attaches:
    // held already, so no limit refuses it. Not the launch path (attach happens once).
    void count_context(std::uint64_t bytes);

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

    // Stream-ordered pools: `pool` is a handle the client has, nullptr the device's current pool
    // as cuMemAllocAsync uses it. A pool is the device's unless made on the host.
    void note_pool(CUmemoryPool pool, bool on_device);
    void note_default_pool(CUmemoryPool pool);  // the handle of the device's default pool
    void set_current_pool(CUmemoryPool pool);   // cuDeviceSetMemPool
    CUmemoryPool current_pool();
    bool pool_on_device(CUmemoryPool pool);
    void set_pool_threshold(CUmemoryPool pool, std::uint64_t bytes);
    void trim_pool(CUmemoryPool pool, std::uint64_t keep_bytes);
    void forget_pool(CUmemoryPool pool);
    // Takes `bytes` for an allocation from `pool`, what it keeps of freed memory first (how much
    // in `*from_kept`); false (nothing taken) when the limit forbids the rest.
    bool reserve_from_pool(CUmemoryPool pool, std::uint64_t bytes, std::uint64_t* from_kept);
    // An allocation reserved from `pool` that did not happen: what came from what the pool
    // keeps goes back there, the rest to the client's allowance.
    void unreserve_from_pool(CUmemoryPool pool, std::uint64_t bytes, std::uint64_t from_kept);
    void record_pool_pointer(CUdeviceptr pointer, CUmemoryPool pool, std::uint64_t bytes);
    // The memory the pool keeps of freed allocations, still counted (for tests and status).
    std::uint64_t kept_by_pools();

    // cuCtxSetLimit(`limit`, `value`) about to be made: reserves what it adds beyond what that
    // limit counts now (or gives back what it drops). False (nothing changed) when the memory
    // limit forbids it; then the call must not be made. `undo` after a call the driver refused.
    bool set_context_limit(CUlimit limit, std::size_t value);
    void undo_context_limit(CUlimit limit);

    // A graph executable's memory-allocation nodes (graph_memory.h).
    void record_graph(const void* exec, std::uint64_t bytes);
    void forget_graph(const void* exec);

    // A client that rejoined a new daemon (client_runtime.cpp): takes over what `old` (the
    // ledger of the run it left) remembers, and counts all of it in this slot, over the limit
    // if need be (it is held already; new allocations are refused until the client is under).
    void adopt(MemoryLedger& old);

    // The process is ending: what it holds goes with it, from its own use and from the use of
    // the client whose limit it shares.
    void drop_all();

    // The limit in force (0: none), and the use counted against it: the client's own, or, for a
    // client that shares another's limit, the use of all that share it.
    std::uint64_t limit() const;
    std::uint64_t used() const;

    // cuMemGetInfo / cuDeviceTotalMem as the client should see them under its limit.
    void adjust_info(std::size_t* free_bytes, std::size_t* total_bytes) const;
    void adjust_total(std::size_t* total_bytes) const;

private:
    struct Pool {
        bool on_device = true;
        std::uint64_t threshold = 0;  // release threshold: reserved memory it may keep
        std::uint64_t live = 0;       // its allocations not yet freed
        std::uint64_t kept = 0;       // freed, still counted: at most threshold - live
    };
    struct PoolPointer {
        CUmemoryPool pool;
        std::uint64_t bytes;
    };
    // The pool as the maps know it: the default pool's own handle is the same pool as nullptr
    // while it is the current one. Called with mutex_ held.
    CUmemoryPool pool_key(CUmemoryPool pool) const;
    // Gives back what `pool` keeps beyond what its threshold lets it keep. mutex_ held.
    void cap_kept(Pool* pool, std::uint64_t threshold);
    // Where the limit and the use it counts against are (ClientDecision::memory_account).
    struct Account {
        ClientMemory* memory;
        const ClientDecision* decision;
    };
    Account account() const;
    // Counts `bytes` held already (no limit asked), in this slot and the account it shares.
    void charge(std::uint64_t bytes);
    // Gives back the size `sizes` remembers for `key` and forgets it: the one way a freed
    // allocation, array or graph returns its bytes (mutex_ not held; taken here, released
    // before the shared counters are touched).
    template <typename Key>
    void give_back(std::unordered_map<Key, std::uint64_t>& sizes, Key key);

    RunView view_;
    ClientSlot* slot_ = nullptr;
    const ClientDecision* decision_ = nullptr;
    std::mutex mutex_;
    std::unordered_map<CUdeviceptr, std::uint64_t> pointers_;
    std::unordered_map<CUmemGenericAllocationHandle, std::uint64_t> handles_;
    std::unordered_map<const void*, std::uint64_t> arrays_;
    std::unordered_map<CUmemoryPool, Pool> pools_;
    std::unordered_map<CUdeviceptr, PoolPointer> pool_pointers_;
    std::unordered_map<const void*, std::uint64_t> graphs_;
    CUmemoryPool default_pool_ = nullptr;  // the default pool's handle, once the client saw it
    CUmemoryPool current_pool_ = nullptr;  // cuDeviceSetMemPool's; nullptr: the default
    std::uint32_t sm_count_ = 0;
    // What each cuCtxSetLimit limit (stack, printf FIFO, heap) counts now, and before its last
    // change (for undo_context_limit).
    std::uint64_t context_bytes_[3] = {0, 0, 0};
    std::uint64_t context_before_[3] = {0, 0, 0};
};

}  // namespace orion
