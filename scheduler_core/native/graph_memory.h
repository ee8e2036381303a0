// Graph memory-allocation nodes against the client's memory limit (memory_ledger.h).
//
// A graph's allocation nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync into a captured stream)
// take device memory when an executable of the graph runs, at the same addresses every launch.
// orion counts them per executable: at instantiation the device-located nodes' sizes are
// reserved (an instantiation that would pass the limit fails with CUDA_ERROR_OUT_OF_MEMORY
// before the driver sees it, as an allocation would), and destroying the executable gives them
// back. Counting from instantiation, not from the launch, is what lets a limit refuse: a failed
// launch is no place to tell a program it is out of memory. What the driver's graph memory pool
// keeps after the executable is gone (until cuDeviceGraphMemTrim) is not counted.
#pragma once

#include <cstdint>

#include "cuda_api.h"

namespace orion {

// Device memory of `graph`'s allocation nodes reserved for an executable about to be made;
// `reserved()` false when the limit forbids it (nothing is then taken). Outside a run, and for a
// graph without such nodes, nothing is taken.
class GraphMemory {
public:
    explicit GraphMemory(CUgraph graph);
    bool reserved() const { return reserved_; }
    // The instantiation's outcome: the bytes stay counted with `exec`, or go back.
    void settle(CUresult result, const CUgraphExec* exec);

private:
    std::uint64_t bytes_ = 0;
    bool reserved_ = true;
};

// An executable destroyed: its allocation nodes' bytes go back.
void forget_graph_memory(CUgraphExec exec);

}  // namespace orion
