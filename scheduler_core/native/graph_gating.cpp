// Best-effort CUDA graphs gated inside (graph_gating.h): reading a graph, placing the waits, and
// the runtime's side: which instantiations are rewritten, updates of rewritten executables, and
// the counters (graphs_gated, graph_gate_waits, graphs_ungated).
#include "graph_gating.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>

#include "client_runtime.h"
#include "driver.h"
#include "runtime_support.h"
#include "shared_state.h"

namespace orion {

std::vector<std::uint32_t> gate_positions(const std::vector<std::uint64_t>& work_ns,
                                          std::uint64_t spacing_ns) {
    std::vector<std::uint32_t> positions;
    std::uint64_t since_wait = 0;
    for (std::size_t i = 0; i < work_ns.size(); ++i) {
        const std::uint64_t work = work_ns[i];
        const bool unknown = work == kUnknownNodeWork;
        // The same rule as a stream's waits (gates.cpp): before the first kernel, and before any
        // kernel that would take the work since the last wait past the spacing.
        if (i == 0 || unknown || since_wait + work > spacing_ns) {
            positions.push_back(static_cast<std::uint32_t>(i));
            since_wait = unknown ? spacing_ns : work;  // unknown: the next kernel waits too
        } else {
            since_wait += work;
        }
        if (since_wait > spacing_ns) since_wait = spacing_ns;  // no overflow past "full"
    }
    return positions;
}

const char* walk_graph(CUgraph graph, GraphWalk* walk) {
    const driver::Helpers& h = driver::helpers();
    if (graph == nullptr || h.graph_get_nodes == nullptr || h.graph_node_get_type == nullptr ||
        h.graph_kernel_node_get_params == nullptr || h.graph_get_edges == nullptr ||
        h.graph_add_dependencies == nullptr || h.graph_add_batch_mem_op_node == nullptr ||
        h.graph_destroy_node == nullptr) {
        return "the driver lacks a graph call orion needs";
    }
    // Instantiation is set-up, not the launch path: allocations here are fine.
    std::size_t count = 0;
    if (h.graph_get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) {
        return "the driver did not list its nodes";
    }
    std::vector<CUgraphNode> nodes(count);
    if (count != 0 && h.graph_get_nodes(graph, nodes.data(), &count) != CUDA_SUCCESS) {
        return "the driver did not list its nodes";
    }
    nodes.resize(std::min(count, nodes.size()));
    // Only the topology is read. The CUDA 10.0 form refuses edges that carry data (programmatic
    // launch, ports), so such a graph is listed again with the CUDA 12.3 form.
    std::size_t edge_count = 0;
    std::vector<CUgraphNode> from;
    std::vector<CUgraphNode> to;
    std::vector<cuda::CUgraphEdgeData_st> data;
    const auto list_edges = [&](bool with_data) {
        const auto get = [&](CUgraphNode* f, CUgraphNode* t, cuda::CUgraphEdgeData_st* d) {
            return with_data ? h.graph_get_edges_v2(graph, f, t, d, &edge_count)
                             : h.graph_get_edges(graph, f, t, &edge_count);
        };
        edge_count = 0;
        if (get(nullptr, nullptr, nullptr) != CUDA_SUCCESS) return false;
        from.assign(edge_count, nullptr);
        to.assign(edge_count, nullptr);
        data.assign(edge_count, cuda::CUgraphEdgeData_st{});
        if (edge_count != 0 &&
            get(from.data(), to.data(), with_data ? data.data() : nullptr) != CUDA_SUCCESS) {
            return false;
        }
        edge_count = std::min(edge_count, from.size());
        return true;
    };
    if (!list_edges(false) && (h.graph_get_edges_v2 == nullptr || !list_edges(true))) {
        return "the driver did not list its edges";
    }

    std::unordered_map<CUgraphNode, std::size_t> index;
    std::vector<CUgraphNodeType> types(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        index[nodes[i]] = i;
        if (h.graph_node_get_type(nodes[i], &types[i]) != CUDA_SUCCESS) {
            return "the driver did not say a node's type";
        }
        if (types[i] == CU_GRAPH_NODE_TYPE_MEM_ALLOC || types[i] == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            // No node can be destroyed in such a graph, so the waits could not be taken out again.
            return "it holds memory allocation or free nodes";
        }
    }
    std::vector<std::vector<std::size_t>> dependents(nodes.size());
    std::vector<std::vector<CUgraphNode>> dependencies(nodes.size());
    std::vector<std::size_t> waiting_on(nodes.size(), 0);
    for (std::size_t e = 0; e < edge_count; ++e) {
        const auto source = index.find(from[e]);
        const auto target = index.find(to[e]);
        if (source == index.end() || target == index.end()) {
            return "its edges name nodes it did not list";
        }
        dependents[source->second].push_back(target->second);
        dependencies[target->second].push_back(from[e]);
        ++waiting_on[target->second];
    }
    // Kahn's algorithm, the driver's listing order breaking ties: a topological order of the
    // graph's own dependencies, the same for every graph of the same shape.
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (waiting_on[i] == 0) ready.push(i);
    }
    std::size_t visited = 0;
    while (!ready.empty()) {
        const std::size_t i = ready.top();
        ready.pop();
        ++visited;
        walk->order.push_back(nodes[i]);
        walk->types.push_back(types[i]);
        if (types[i] == CU_GRAPH_NODE_TYPE_KERNEL) {
            CUDA_KERNEL_NODE_PARAMS_v2 params{};
            if (h.graph_kernel_node_get_params(nodes[i], &params) != CUDA_SUCCESS) {
                return "the driver did not give a kernel node's parameters";
            }
            walk->kernels.push_back(nodes[i]);
            walk->params.push_back(params);
            walk->dependencies.push_back(dependencies[i]);
        }
        for (const std::size_t next : dependents[i]) {
            if (--waiting_on[next] == 0) ready.push(next);
        }
    }
    if (visited != nodes.size()) return "its dependencies form no order";
    return nullptr;
}

const char* add_gate_waits(CUgraph graph, const GraphWalk& walk,
                           const std::vector<std::uint32_t>& positions, CUdeviceptr gate,
                           CUcontext context, std::vector<CUgraphNode>* waits) {
    const driver::Helpers& h = driver::helpers();
    for (const std::uint32_t position : positions) {
        if (position >= walk.kernels.size()) {
            return "it has fewer kernel nodes than its executable's waits need";
        }
    }
    for (const std::uint32_t position : positions) {
        CUstreamBatchMemOpParams operation;
        std::memset(&operation, 0, sizeof(operation));
        operation.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
        operation.waitValue.address = gate;
        operation.waitValue.value = kGateOpen;
        operation.waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
        CUDA_BATCH_MEM_OP_NODE_PARAMS params{context, 1, &operation, 0};
        const std::vector<CUgraphNode>& before = walk.dependencies[position];
        CUgraphNode wait = nullptr;
        if (h.graph_add_batch_mem_op_node(&wait, graph, before.empty() ? nullptr : before.data(),
                                          before.size(), &params) != CUDA_SUCCESS) {
            remove_gate_waits(*waits);
            waits->clear();
            return "the driver refused a wait node";
        }
        waits->push_back(wait);
        // The kernel keeps its own dependencies and gains the wait: nothing else changes.
        const CUgraphNode kernel = walk.kernels[position];
        if (h.graph_add_dependencies(graph, &wait, &kernel, 1) != CUDA_SUCCESS) {
            remove_gate_waits(*waits);
            waits->clear();
            return "the driver refused a wait node's edge";
        }
    }
    return nullptr;
}

bool remove_gate_waits(const std::vector<CUgraphNode>& waits) {
    const driver::Helpers& h = driver::helpers();
    bool removed = true;
    for (const CUgraphNode wait : waits) {
        removed = h.graph_destroy_node != nullptr && h.graph_destroy_node(wait) == CUDA_SUCCESS &&
                  removed;
    }
    return removed;
}

// ---------------------------------------------------------------------------------------------
// The runtime's side

bool ClientRuntime::gates_graphs() {
    // As for eager launches: a client whose work waits at its gate on the GPU (BE under reef and
    // orion, every client under quota), while the driver takes stream waits; unless the run
    // admits graphs whole (be_graph_gate kWhole): then each runs whole behind its launch's
    // stream wait, as before graphs were gated inside. Not counted in graphs_ungated, which
    // says a graph could not be rewritten: here none was meant to be.
    return gpu_gate_ &&
           view_.decisions().be_graph_gate == static_cast<std::uint32_t>(BeGraphGate::kInside) &&
           !gate_failed_.load(std::memory_order_relaxed) && ensure_gate_mapped();
}

void ClientRuntime::count_ungated_graph(const char* why) {
    slot_->stats.graphs_ungated.fetch_add(1, std::memory_order_relaxed);
    if (graph_gate_warned_.exchange(true, std::memory_order_relaxed)) return;
    const bool split = segments_graphs();
    log_message((std::string("a CUDA graph could not be ") +
                 (split ? "split into segments (" : "gated inside (") + why +
                 "); it runs as a whole behind its launch's gate (counted in graphs_ungated)")
                    .c_str());
    // The first reason, for `orion status`: written once, then marked complete.
    std::uint32_t unset = 0;
    if (slot_->ungated_graph_why_set.compare_exchange_strong(unset, 1,
                                                             std::memory_order_acq_rel)) {
        std::snprintf(slot_->ungated_graph_why, kNameBytes, "%s", why);
        slot_->ungated_graph_why_set.store(2, std::memory_order_release);
    }
}

const char* ClientRuntime::gate_graph(CUgraph graph, const std::vector<std::uint32_t>* fixed,
                                      std::vector<std::uint32_t>* positions,
                                      std::vector<CUgraphNode>* waits) {
    GraphWalk walk;
    if (const char* why = walk_graph(graph, &walk)) return why;
    if (walk.kernels.empty()) return nullptr;  // no kernels, nothing to gate: left alone
    if (fixed != nullptr) {
        *positions = *fixed;
    } else {
        std::vector<std::uint64_t> work;
        work.reserve(walk.params.size());
        for (const CUDA_KERNEL_NODE_PARAMS_v2& params : walk.params) {
            const KernelInfo info = node_work(params);  // profiled or learned (graph_segments.cpp)
            work.push_back(info.known ? info.duration_ns : kUnknownNodeWork);
        }
        *positions = gate_positions(work, gate_spacing());
    }
    // The waits run in the graph's context: its kernels' (CUDA 12 fills it in), else the current.
    CUcontext context = walk.params.front().ctx;
    const auto current = driver::helpers().ctx_get_current;
    if (context == nullptr && (current == nullptr || current(&context) != CUDA_SUCCESS)) {
        context = nullptr;
    }
    if (context == nullptr) return "no CUDA context for its wait nodes";
    return add_gate_waits(graph, walk, *positions, gate_device_, context, waits);
}

void ClientRuntime::restore_graph(const std::vector<CUgraphNode>& waits) {
    if (!remove_gate_waits(waits) && !graph_restore_warned_.exchange(true)) {
        log_message("the driver kept a gate wait orion added to a CUDA graph; the program's graph "
                    "holds it (harmless: the gate opens when HP is idle)");
    }
}

CUresult ClientRuntime::instantiate_graph(CUgraphExec* exec, CUgraph graph,
                                          unsigned long long flags,  // NOLINT(google-runtime-int)
                                          const std::function<CUresult()>& instantiate) {
    std::vector<std::uint32_t> positions;
    std::vector<CUgraphNode> waits;
    if (exec != nullptr && gates_graphs()) {
        if (const char* why = gate_graph(graph, nullptr, &positions, &waits)) {
            count_ungated_graph(why);
        }
    }
    CUresult result = instantiate();
    if (!waits.empty()) {
        restore_graph(waits);  // the program's graph as it made it, whatever happened
        if (result != CUDA_SUCCESS) {
            // The driver would not instantiate it with the waits (a graph for device launch, say):
            // the program's graph, unchanged. Its own error, if it has one, is the one returned.
            waits.clear();
            result = instantiate();
            if (result == CUDA_SUCCESS) {
                count_ungated_graph("the driver refused to instantiate it with gate waits");
            }
        }
    }
    if (result != CUDA_SUCCESS || exec == nullptr) return result;
    graph_instantiated(*exec, graph);
    {
        std::lock_guard<std::mutex> lock(gated_graphs_mutex_);
        if (!waits.empty()) {
            gated_graphs_[*exec] = positions;
        } else {
            gated_graphs_.erase(*exec);
        }
    }
    if (!waits.empty()) {
        slot_->stats.graphs_gated.fetch_add(1, std::memory_order_relaxed);
        slot_->stats.graph_gate_waits.fetch_add(waits.size(), std::memory_order_relaxed);
    }
    segment_graph(*exec, graph, flags);  // a run that splits BE graphs (graph_segments.cpp)
    return result;
}

CUresult ClientRuntime::update_graph(CUgraphExec exec, CUgraph graph,
                                     const std::function<CUresult()>& update) {
    std::vector<std::uint32_t> positions;
    bool gated = false;
    {
        std::lock_guard<std::mutex> lock(gated_graphs_mutex_);
        const auto found = gated_graphs_.find(exec);
        if (found != gated_graphs_.end()) {
            positions = found->second;
            gated = true;
        }
    }
    // The executable holds waits, so the graph it is updated from must hold them in the same
    // places (the driver pairs nodes by topology): the same positions, not new ones, so that an
    // update the program's own graphs allow is allowed here too. Without them the driver refuses
    // the update, as it would any graph of another shape, and the program instantiates afresh.
    std::vector<CUgraphNode> waits;
    if (gated) {
        std::vector<std::uint32_t> placed;
        if (const char* why = gate_graph(graph, &positions, &placed, &waits)) {
            if (env_flag("ORION_DEBUG")) {
                log_message((std::string("graph update without gate waits: ") + why).c_str());
            }
        }
    }
    const CUresult result = update();
    if (!waits.empty()) restore_graph(waits);
    if (result == CUDA_SUCCESS) {
        graph_instantiated(exec, graph);
        // A split executable is split again from the graph it now runs (graph_segments.cpp).
        const GraphSlot* slot = graph_slot(exec, false);
        const SegmentedGraph* segments =
            slot != nullptr ? slot->segments.load(std::memory_order_acquire) : nullptr;
        if (segments != nullptr) segment_graph(exec, graph, segments->flags);
    }
    return result;
}

void ClientRuntime::forget_gated_graph(CUgraphExec exec) {
    std::lock_guard<std::mutex> lock(gated_graphs_mutex_);
    gated_graphs_.erase(exec);
}

}  // namespace orion
