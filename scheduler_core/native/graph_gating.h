// Best-effort CUDA graphs gated inside: wait nodes on the client's gate word, one before every
// queue limit of the graph's profiled work, so one opening of the gate lets through at most that
// much of a BE graph, as for eager launches (where gates.cpp puts cuStreamWaitValue32 on the
// stream). The pieces here know nothing of the run: the runtime's side (which clients, the
// counters, the executables gated) is in graph_gating.cpp with them.
//
// How a graph is rewritten. The waits are added to the program's own graph just for the
// instantiation and destroyed right after it, so the graph the program holds is the graph it made
// (nodes and edges), and the executable's nodes are that graph's: the driver's per-node setters
// (cuGraphExecKernelNodeSetParams, the memcpy/memset/host setters, cuGraphNodeSetEnabled) take a
// node of the graph the executable was instantiated from, which an executable of a clone would not
// accept. A wait before kernel node K depends on K's dependencies and K gains it as one more
// dependency: K's own edges are never removed, so nothing but the wait node changes.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_api.h"

namespace orion {

// Work of a kernel node the profile does not list.
constexpr std::uint64_t kUnknownNodeWork = ~std::uint64_t{0};

// Which kernel nodes (positions in walk order) get a gate wait before them: the first, and each
// one at which the work since the last wait would pass `spacing_ns`. `work_ns[i]` is node i's
// profiled duration, kUnknownNodeWork when unknown: such a node gets a wait of its own and so does
// the node after it (how long it holds the GPU is not known).
std::vector<std::uint32_t> gate_positions(const std::vector<std::uint64_t>& work_ns,
                                          std::uint64_t spacing_ns);

// A graph's kernel nodes as orion gates them.
struct GraphWalk {
    // Kernel nodes in a topological order of the graph's own dependencies (the driver's listing
    // order where they leave a choice), with their parameters and their dependencies.
    std::vector<CUgraphNode> kernels;
    std::vector<CUDA_KERNEL_NODE_PARAMS_v2> params;
    std::vector<std::vector<CUgraphNode>> dependencies;
    // Every node in that same order, with its type (segments take them all, graph_segments.h).
    std::vector<CUgraphNode> order;
    std::vector<CUgraphNodeType> types;
};

// Reads `graph` (nodes, types, edges, kernel parameters). Returns nullptr on success, else why
// the graph cannot be rewritten (the driver refused a query, or the graph holds memory
// allocation or free nodes, whose graphs the driver lets no node be destroyed from).
const char* walk_graph(CUgraph graph, GraphWalk* walk);

// Adds a wait on the 32-bit word at `gate` (open when `(word & kGateOpen) != 0`) before each
// kernel node of `walk` at `positions`, in the context `context`; fills `waits`. On failure
// removes what it added and returns why; nullptr on success.
const char* add_gate_waits(CUgraph graph, const GraphWalk& walk,
                           const std::vector<std::uint32_t>& positions, CUdeviceptr gate,
                           CUcontext context, std::vector<CUgraphNode>* waits);

// Destroys the wait nodes again; false when the driver refused one (the graph keeps it).
bool remove_gate_waits(const std::vector<CUgraphNode>& waits);

}  // namespace orion
