// Kernel and graph identity inside a client: the cache from CUfunction to the hash of its name,
// the identity of each instantiated CUDA graph (from its kernel nodes, followed through node
// updates and destruction), and the report of kernels the client's profile does not list.
#include "client_runtime.h"

#include <cstdio>
#include <mutex>
#include <vector>

#include "driver.h"
#include "kernel_key.h"
#include "runtime_support.h"

namespace orion {

std::uint64_t ClientRuntime::name_hash(CUfunction function) {
    auto compute = [function]() -> std::uint64_t {
        const char* name = driver::kernel_name(function);
        const std::uint64_t hash = hash_name(name != nullptr ? name : "");
        return hash == 0 ? 1 : hash;
    };
    const std::uint32_t generation = name_generation_.load(std::memory_order_acquire);
    bool claimed = false;
    FunctionSlot* slot = find_or_claim_slot(functions_, kFunctionSlots, kNeighbourhood,
                                            handle_start(function), function, function_of,
                                            &claimed);
    if (slot == nullptr) return compute();  // cache full in this neighbourhood: just slower
    if (claimed) {
        const std::uint64_t hash = compute();
        slot->name_hash.store(hash, std::memory_order_release);
        slot->generation.store(generation, std::memory_order_release);
        return hash;
    }
    if (slot->generation.load(std::memory_order_acquire) != generation) {
        // Code was unloaded since this name was read: the handle may now be another kernel's.
        // Read it again (and let the new kernel be reported if unknown).
        const std::uint64_t hash = compute();
        slot->name_hash.store(hash, std::memory_order_release);
        slot->unknown_reported.store(0, std::memory_order_release);
        slot->generation.store(generation, std::memory_order_release);
        return hash;
    }
    const std::uint64_t hash = slot->name_hash.load(std::memory_order_acquire);
    return hash != 0 ? hash : compute();  // another thread is filling it in right now
}

std::uint64_t ClientRuntime::node_key(const CUDA_KERNEL_NODE_PARAMS_v2& params) {
    CUfunction function = node_function(params);
    if (function == nullptr) return 0;
    return kernel_key(name_hash(function), params.gridDimX, params.gridDimY, params.gridDimZ,
                      params.blockDimX, params.blockDimY, params.blockDimZ);
}

std::uint64_t ClientRuntime::identify_graph(CUgraph graph, NodeKeys* nodes_out,
                                            std::vector<KernelSighting>* sightings) {
    const driver::Helpers& h = driver::helpers();
    if (graph == nullptr || h.graph_get_nodes == nullptr || h.graph_node_get_type == nullptr ||
        h.graph_kernel_node_get_params == nullptr) {
        return 0;
    }
    std::size_t count = 0;
    if (h.graph_get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) return 0;
    // Instantiation is set-up, not the launch path: an allocation here is fine.
    std::vector<CUgraphNode> nodes(count);
    if (count != 0 && h.graph_get_nodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return 0;
    GraphKeyBuilder builder;
    for (std::size_t i = 0; i < count && i < nodes.size(); ++i) {
        CUgraphNodeType type = -1;
        if (h.graph_node_get_type(nodes[i], &type) != CUDA_SUCCESS) return 0;
        if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;  // copies, memsets, events: no SMs
        CUDA_KERNEL_NODE_PARAMS_v2 params{};
        if (h.graph_kernel_node_get_params(nodes[i], &params) != CUDA_SUCCESS) return 0;
        const std::uint64_t key = node_key(params);
        if (key == 0) return 0;
        builder.add(key);
        (*nodes_out)[nodes[i]] = key;
        if (sightings != nullptr) {
            KernelSighting& seen = sightings->emplace_back();
            seen.key = key;
            copy_node_shape(params, &seen);
        }
    }
    return builder.key();
}

ClientRuntime::GraphSlot* ClientRuntime::graph_slot(CUgraphExec exec, bool claim) {
    if (exec == nullptr) return nullptr;
    // nullptr when the neighbourhood is full: the graph stays unidentified (gated conservatively)
    auto exec_of = [](GraphSlot& slot) -> std::atomic<CUgraphExec>& { return slot.exec; };
    const std::uint64_t start = handle_start(exec);
    return claim ? find_or_claim_slot(graph_execs_, kGraphExecSlots, kNeighbourhood, start, exec,
                                      exec_of)
                 : find_slot(graph_execs_, kGraphExecSlots, kNeighbourhood, start, exec, exec_of);
}

void ClientRuntime::graph_instantiated(CUgraphExec exec, CUgraph graph) {
    // Only a client whose launches are gated or matched against a profile needs the identity;
    // otherwise instantiation stays exactly the program's call.
    if (!tracks_ && !has_profile_) return;
    NodeKeys nodes;
    std::vector<KernelSighting> sightings;
    const std::uint64_t key = identify_graph(graph, &nodes, learning_ ? &sightings : nullptr);
    // A graph the profile lacks is learned: described now, timed as it is launched.
    if (learning_ && key != 0 && view_.find_graph(index_, key) == nullptr) {
        learner_.graph(key, sightings);
    }
    if (GraphSlot* slot = graph_slot(exec, true)) {
        slot->key.store(key, std::memory_order_release);
    }
    {
        std::lock_guard<std::mutex> lock(graph_nodes_mutex_);
        if (key != 0) {
            graph_nodes_[exec] = std::move(nodes);
        } else {
            graph_nodes_.erase(exec);
        }
    }
    if (key != 0) slot_->stats.graphs_identified.fetch_add(1, std::memory_order_relaxed);
}

void ClientRuntime::graph_node_changed(CUgraphExec exec, CUgraphNode node,
                                       const CUDA_KERNEL_NODE_PARAMS_v2* params) {
    if (!tracks_ && !has_profile_) return;
    std::uint64_t key = 0;
    {
        std::lock_guard<std::mutex> lock(graph_nodes_mutex_);
        const auto found = graph_nodes_.find(exec);
        const std::uint64_t changed = params != nullptr ? node_key(*params) : 0;
        if (found != graph_nodes_.end() && changed != 0 && found->second.count(node) != 0) {
            found->second[node] = changed;
            GraphKeyBuilder builder;
            for (const auto& entry : found->second) builder.add(entry.second);
            key = builder.key();
        } else if (found != graph_nodes_.end()) {
            graph_nodes_.erase(found);  // cannot follow the change: unidentified from now on
        }
    }
    if (GraphSlot* slot = graph_slot(exec, false)) slot->key.store(key, std::memory_order_release);
}

void ClientRuntime::graph_destroyed(CUgraphExec exec) {
    if (GraphSlot* slot = graph_slot(exec, false)) slot->key.store(0, std::memory_order_release);
    std::lock_guard<std::mutex> lock(graph_nodes_mutex_);
    graph_nodes_.erase(exec);
}

void ClientRuntime::report_unknown(CUfunction function, const LaunchShape& shape) {
    slot_->stats.unknown_launches.fetch_add(1, std::memory_order_relaxed);
    if (function == nullptr) return;
    FunctionSlot* slot = find_slot(functions_, kFunctionSlots, kNeighbourhood,
                                   handle_start(function), function, function_of);
    if (slot != nullptr && slot->unknown_reported.exchange(1, std::memory_order_acq_rel) != 0) {
        return;  // reported once already
    }
    const std::uint32_t n = slot_->unknown_name_count.fetch_add(1, std::memory_order_relaxed);
    if (n >= kUnknownNames) return;
    const char* name = driver::kernel_name(function);
    std::snprintf(slot_->unknown_names[n], kNameBytes, "%s grid(%u,%u,%u) block(%u,%u,%u)",
                  name != nullptr ? name : "<unnamed>", shape.grid[0], shape.grid[1],
                  shape.grid[2], shape.block[0], shape.block[1], shape.block[2]);
}

}  // namespace orion
