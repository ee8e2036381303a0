// Best-effort CUDA graphs split into segments (be_graph_gate kSegments, time-sliced runs' default):
// each segment a piece of the program's graph holding at most one queue limit of its profiled
// work (one kernel node where the work is unknown), launched one after another through the same
// gate as eager launches. Why not wait nodes inside the graph (graph_gating.h)? Measured on an
// H100, time-sliced: a graph stopped at a wait node inside it kept its context on the GPU until
// the driver's timeslice ended, so an arriving HP request waited about as long as for the whole
// graph; between two launches on a stream the BE context has nothing running and the driver
// switches to the HP's at once, as for eager BE work.
//
// How a segment is made: the program's graph is cloned (the driver's cuGraphClone copies every
// node kind with its parameters), the clone pruned to the segment's nodes, and instantiated. A
// graph's nodes are split along one topological order, so every dependency between two segments
// points forward and launching the segments in order on the program's stream keeps it. The
// program's own executable is kept as it is: launched whole when orion does not gate (a capturing
// stream), and the target of every change the program makes, which orion follows into the
// segment holding the node.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "graph_gating.h"
#include "policy.h"

namespace orion {

// One segment: orion's clone of the program's graph pruned to the segment's nodes, instantiated.
struct GraphSegment {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    std::uint32_t first_kernel = 0;  // its kernel nodes: a range of the walk's kernels
    std::uint32_t kernel_count = 0;
    bool opaque = false;  // holds a child graph or a conditional node: how long it runs is unknown
    // Its one kernel node (kernel_count == 1): launched, it is described as that kernel, learned
    // and gated like an eager launch of it.
    CUDA_KERNEL_NODE_PARAMS_v2 kernel{};
    // Several kernel nodes, all profiled: their work together, fixed when the graph was split.
    KernelInfo work;
};

struct SegmentedGraph {
    std::vector<GraphSegment> segments;
    // Each node of the program's graph: its segment, and its node in that segment's clone (the
    // node the segment's executable takes changes for).
    std::unordered_map<CUgraphNode, std::pair<std::uint32_t, CUgraphNode>> nodes;
    unsigned long long flags = 0;  // NOLINT(google-runtime-int): the instantiation's, for segments
};

// The most node visits (segments x nodes) one split may take: each segment is a clone of the whole
// graph pruned, so a graph too large for this is launched whole (counted, with why).
constexpr std::uint64_t kMaxSegmentingVisits = 4'000'000;

// The segment of each node of `walk.order`, and how many there are (`*count`, 0 when the graph
// has nothing to split: no kernel, child-graph or conditional node). Units are kernel nodes, with
// `kernel_work[k]` the profiled work of walk.kernels[k] (kUnknownNodeWork when unknown), and child
// graph and conditional nodes (unknown): a segment starts at each unit where gate_positions puts
// a wait; any other node goes with the unit before it in the order (the first segment for nodes
// before the first unit).
std::vector<std::uint32_t> assign_segments(const GraphWalk& walk,
                                           const std::vector<std::uint64_t>& kernel_work,
                                           std::uint64_t spacing_ns, std::uint32_t* count);

// Makes `count` segments of `graph` (walked as `walk`, nodes assigned by `segment_of`),
// instantiated with `flags`, into `out`. nullptr on success, else why (and `out` is left empty).
const char* build_segments(CUgraph graph, const GraphWalk& walk,
                           const std::vector<std::uint32_t>& segment_of, std::uint32_t count,
                           unsigned long long flags,  // NOLINT(google-runtime-int)
                           SegmentedGraph* out);

// Destroys the segments' executables and clones (launched work completes first: the driver
// defers the release of an executable still running).
void destroy_segments(SegmentedGraph* graph);

}  // namespace orion
