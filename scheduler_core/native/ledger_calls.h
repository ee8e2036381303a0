// How a hooked driver call settles with the client's memory ledger (memory_ledger.h), shared by
// every file of memory hooks (memory_hooks.cpp, array_hooks.cpp, graph_memory.cpp) so that each
// allocation route reserves, records and gives back by one rule, and each free or query tells
// the ledger only after the driver did what was asked.
//
// Allocation is not the launch path: the ledger's mutex is affordable here.
#pragma once

#include <cstdint>

#include "client_runtime.h"

namespace orion {

// The ledger of this process's client, or nullptr outside a run (everything passes through).
inline MemoryLedger* active_ledger() {
    ClientRuntime& runtime = ClientRuntime::instance();
    return runtime.active() ? &runtime.memory() : nullptr;
}

// Reserves `bytes` before `make` runs (refusing with CUDA_ERROR_OUT_OF_MEMORY, without calling
// it, when they do not fit the limit); on success `record()` remembers them for the free, on
// failure they are given back.
template <typename Make, typename Record>
CUresult reserved_call(MemoryLedger& account, std::uint64_t bytes, Make make, Record record) {
    if (!account.reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = make();
    if (result == CUDA_SUCCESS) {
        record();
    } else {
        account.unreserve(bytes);
    }
    return result;
}

// `result` of a call that frees, reconfigures or reports memory: on success, and in a run,
// `note(ledger)` tells the ledger; a failed call changed nothing the ledger counts.
template <typename Note>
CUresult noted_on_success(CUresult result, Note note) {
    if (result == CUDA_SUCCESS) {
        if (MemoryLedger* account = active_ledger()) note(*account);
    }
    return result;
}

}  // namespace orion
