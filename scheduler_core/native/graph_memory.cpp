// graph_memory.h: a graph's memory-allocation nodes, counted with its executables.
#include "graph_memory.h"

#include <algorithm>
#include <vector>

#include "client_runtime.h"
#include "driver.h"
#include "ledger_calls.h"

namespace orion {
namespace {

// The bytes of `graph`'s device-located allocation nodes; 0 when the driver cannot list them
// (a graph orion cannot read is not refused for it: the allocation nodes' memory then goes
// uncounted, as before orion read them).
std::uint64_t allocation_node_bytes(CUgraph graph) {
    const driver::Helpers& h = driver::helpers();
    if (graph == nullptr || h.graph_get_nodes == nullptr || h.graph_node_get_type == nullptr ||
        h.graph_mem_alloc_node_get_params == nullptr) {
        return 0;
    }
    // Instantiation is set-up, not the launch path: allocating here is fine.
    std::size_t count = 0;
    if (h.graph_get_nodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return 0;
    std::vector<CUgraphNode> nodes(count);
    if (h.graph_get_nodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return 0;
    nodes.resize(std::min(count, nodes.size()));
    std::uint64_t bytes = 0;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type = 0;
        if (h.graph_node_get_type(node, &type) != CUDA_SUCCESS ||
            type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            continue;
        }
        CUDA_MEM_ALLOC_NODE_PARAMS params{};
        if (h.graph_mem_alloc_node_get_params(node, &params) == CUDA_SUCCESS &&
            params.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            bytes += params.bytesize;
        }
    }
    return bytes;
}

}  // namespace

GraphMemory::GraphMemory(CUgraph graph) {
    MemoryLedger* account = active_ledger();
    if (account == nullptr) return;
    bytes_ = allocation_node_bytes(graph);
    if (bytes_ != 0 && !account->reserve(bytes_)) {
        reserved_ = false;
        bytes_ = 0;
    }
}

void GraphMemory::settle(CUresult result, const CUgraphExec* exec) {
    if (bytes_ == 0) return;
    MemoryLedger* account = active_ledger();
    if (account == nullptr) return;  // the client left its run meanwhile: nothing is counted
    if (result == CUDA_SUCCESS && exec != nullptr) {
        account->record_graph(*exec, bytes_);
    } else {
        account->unreserve(bytes_);
    }
}

void forget_graph_memory(CUgraphExec exec) {
    if (MemoryLedger* account = active_ledger()) account->forget_graph(exec);
}

}  // namespace orion
