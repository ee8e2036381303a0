// Best-effort CUDA graphs split into segments (graph_segments.h): where the segments fall, making
// them, and the runtime's side: which instantiations are split, launching the segments through
// the gate, following the program's changes to its executable into them, and the counters
// (graphs_segmented, graph_segments, graphs_ungated).
#include "graph_segments.h"

#include <algorithm>
#include <memory>
#include <string>

#include "client_runtime.h"
#include "driver.h"
#include "hooked_symbols.h"
#include "runtime_support.h"
#include "shared_state.h"

namespace orion {
namespace {

// A node whose work orion cannot see: it gets a segment of its own, as an unknown kernel does.
bool opaque_node(CUgraphNodeType type) {
    return type == CU_GRAPH_NODE_TYPE_GRAPH || type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
}

}  // namespace

std::vector<std::uint32_t> assign_segments(const GraphWalk& walk,
                                           const std::vector<std::uint64_t>& kernel_work,
                                           std::uint64_t spacing_ns, std::uint32_t* count) {
    std::vector<std::uint64_t> unit_work;
    std::size_t kernel = 0;
    for (const CUgraphNodeType type : walk.types) {
        if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
            unit_work.push_back(kernel < kernel_work.size() ? kernel_work[kernel] : kUnknownNodeWork);
            ++kernel;
        } else if (opaque_node(type)) {
            unit_work.push_back(kUnknownNodeWork);
        }
    }
    *count = 0;
    if (unit_work.empty()) return {};
    // The same rule as gate waits: a segment starts where a wait would go.
    const std::vector<std::uint32_t> starts = gate_positions(unit_work, spacing_ns);
    std::vector<std::uint32_t> segment_of(walk.types.size(), 0);
    std::uint32_t segment = 0;
    std::size_t next_start = 1;  // starts[0] is the first unit: segment 0
    std::uint32_t unit = 0;
    for (std::size_t i = 0; i < walk.types.size(); ++i) {
        const CUgraphNodeType type = walk.types[i];
        if (type == CU_GRAPH_NODE_TYPE_KERNEL || opaque_node(type)) {
            if (next_start < starts.size() && starts[next_start] == unit) {
                ++segment;
                ++next_start;
            }
            ++unit;
        }
        segment_of[i] = segment;
    }
    *count = segment + 1;
    return segment_of;
}

const char* build_segments(CUgraph graph, const GraphWalk& walk,
                           const std::vector<std::uint32_t>& segment_of, std::uint32_t count,
                           unsigned long long flags,  // NOLINT(google-runtime-int)
                           SegmentedGraph* out) {
    const driver::Helpers& h = driver::helpers();
    if (h.graph_clone == nullptr || h.graph_node_find_in_clone == nullptr ||
        h.graph_destroy == nullptr || h.graph_instantiate == nullptr ||
        h.graph_exec_destroy == nullptr || h.graph_destroy_node == nullptr) {
        return "the driver lacks a graph call orion needs to split it";
    }
    if (segment_of.size() != walk.order.size()) return "its nodes changed while it was read";
    out->flags = flags;
    out->segments.assign(count, GraphSegment{});
    std::vector<CUgraphNode> mine(walk.order.size());
    const char* failure = nullptr;
    for (std::uint32_t s = 0; s < count && failure == nullptr; ++s) {
        GraphSegment& segment = out->segments[s];
        if (h.graph_clone(&segment.graph, graph) != CUDA_SUCCESS) {
            segment.graph = nullptr;
            failure = "the driver did not clone it";
            break;
        }
        // Every node found first: a node pruned from the clone can no longer be looked up.
        for (std::size_t i = 0; i < walk.order.size() && failure == nullptr; ++i) {
            if (h.graph_node_find_in_clone(&mine[i], walk.order[i], segment.graph) !=
                CUDA_SUCCESS) {
                failure = "the driver did not find a node in its clone";
            }
        }
        std::uint32_t kernel = 0;
        for (std::size_t i = 0; i < walk.order.size() && failure == nullptr; ++i) {
            const bool is_kernel = walk.types[i] == CU_GRAPH_NODE_TYPE_KERNEL;
            if (segment_of[i] != s) {
                if (h.graph_destroy_node(mine[i]) != CUDA_SUCCESS) {
                    failure = "the driver refused to take a node out of a segment";
                }
            } else {
                out->nodes[walk.order[i]] = {s, mine[i]};
                segment.opaque = segment.opaque || opaque_node(walk.types[i]);
                if (is_kernel) {
                    if (segment.kernel_count == 0) {
                        segment.first_kernel = kernel;
                        segment.kernel = walk.params[kernel];
                    }
                    ++segment.kernel_count;
                }
            }
            if (is_kernel) ++kernel;
        }
        if (failure == nullptr &&
            h.graph_instantiate(&segment.exec, segment.graph, flags) != CUDA_SUCCESS) {
            segment.exec = nullptr;
            failure = "the driver refused to instantiate a segment";
        }
    }
    if (failure != nullptr) destroy_segments(out);
    return failure;
}

void destroy_segments(SegmentedGraph* graph) {
    const driver::Helpers& h = driver::helpers();
    for (GraphSegment& segment : graph->segments) {
        if (segment.exec != nullptr && h.graph_exec_destroy != nullptr) {
            h.graph_exec_destroy(segment.exec);
        }
        if (segment.graph != nullptr && h.graph_destroy != nullptr) h.graph_destroy(segment.graph);
    }
    graph->segments.clear();
    graph->nodes.clear();
}

// ---------------------------------------------------------------------------------------------
// The runtime's side

bool ClientRuntime::segments_graphs() const {
    // The clients whose launches wait at a gate (BE under reef and orion, every client under
    // quota), in a run that splits graphs.
    return tracks_ && (role_ == Role::kBestEffort || policy_ == Policy::kQuota) &&
           view_.decisions().be_graph_gate == static_cast<std::uint32_t>(BeGraphGate::kSegments);
}

KernelInfo ClientRuntime::node_work(const CUDA_KERNEL_NODE_PARAMS_v2& params) {
    KernelInfo info;
    const std::uint64_t key = node_key(params);
    if (key == 0) return info;
    if (const KernelEntry* entry = view_.find_kernel(index_, key)) {
        info.known = true;
        info.sm_needed = entry->sm_needed;
        info.kernel_class = static_cast<KernelClass>(entry->kernel_class);
        info.duration_ns = std::max<std::uint64_t>(entry->duration_ns, 1);
    } else if (const LearnedEntry* learned = learning_ ? learner_.find(key) : nullptr) {
        if (const std::uint64_t duration = KernelLearner::duration(*learned); duration != 0) {
            info.known = true;
            info.sm_needed = learned->sm_needed;
            info.duration_ns = duration;
        }
    }
    return info;
}

void ClientRuntime::segment_graph(CUgraphExec exec, CUgraph graph,
                                  unsigned long long flags) {  // NOLINT(google-runtime-int)
    forget_segments(exec);  // a handle reused, or an executable updated from another graph
    if (!segments_graphs()) return;
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0) {
        count_ungated_graph("it was instantiated for launch from the device");
        return;
    }
    GraphWalk walk;
    if (const char* why = walk_graph(graph, &walk)) {
        count_ungated_graph(why);
        return;
    }
    std::vector<KernelInfo> infos;
    std::vector<std::uint64_t> work;
    infos.reserve(walk.params.size());
    work.reserve(walk.params.size());
    for (const CUDA_KERNEL_NODE_PARAMS_v2& params : walk.params) {
        infos.push_back(node_work(params));
        work.push_back(infos.back().known ? infos.back().duration_ns : kUnknownNodeWork);
    }
    std::uint32_t count = 0;
    const std::vector<std::uint32_t> segment_of = assign_segments(walk, work, gate_spacing(), &count);
    if (count == 0) return;  // nothing that runs on SMs: left alone
    if (static_cast<std::uint64_t>(count) * walk.order.size() > kMaxSegmentingVisits) {
        count_ungated_graph("it is too large to split (segments x nodes over the bound)");
        return;
    }
    auto made = std::make_unique<SegmentedGraph>();
    if (const char* why = build_segments(graph, walk, segment_of, count,
                                         flags & CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY,
                                         made.get())) {
        count_ungated_graph(why);
        return;
    }
    for (GraphSegment& segment : made->segments) {
        if (segment.opaque || segment.kernel_count < 2) continue;
        // Several kernels share a segment only when each is profiled (gate_positions): their
        // work together, the SMs of the widest, their class where they agree.
        KernelInfo& sum = segment.work;
        sum = infos[segment.first_kernel];
        for (std::uint32_t k = 1; k < segment.kernel_count; ++k) {
            const KernelInfo& next = infos[segment.first_kernel + k];
            sum.known = sum.known && next.known;
            sum.duration_ns += next.duration_ns;
            sum.sm_needed = std::max(sum.sm_needed, next.sm_needed);
            if (sum.kernel_class != next.kernel_class) sum.kernel_class = KernelClass::kUnknown;
        }
    }
    GraphSlot* slot = graph_slot(exec, true);
    if (slot == nullptr) {
        destroy_segments(made.get());
        count_ungated_graph("orion's table of this process's graphs is full");
        return;
    }
    SegmentedGraph* published = made.get();
    {
        std::lock_guard<std::mutex> lock(gated_graphs_mutex_);
        segmented_graphs_[exec] = std::move(made);
    }
    slot->segments.store(published, std::memory_order_release);
    slot_->stats.graphs_segmented.fetch_add(1, std::memory_order_relaxed);
    slot_->stats.graph_segments.fetch_add(count, std::memory_order_relaxed);
}

void ClientRuntime::forget_segments(CUgraphExec exec) {
    if (GraphSlot* slot = graph_slot(exec, false)) {
        slot->segments.store(nullptr, std::memory_order_release);
    }
    std::unique_ptr<SegmentedGraph> gone;
    {
        std::lock_guard<std::mutex> lock(gated_graphs_mutex_);
        const auto found = segmented_graphs_.find(exec);
        if (found == segmented_graphs_.end()) return;
        gone = std::move(found->second);
        segmented_graphs_.erase(found);
    }
    destroy_segments(gone.get());
}

SegmentedGraph* ClientRuntime::graph_segments(CUgraphExec exec, CUstream stream, int variant) {
    if (!segments_graphs()) return nullptr;  // an HP's launches, a run that splits nothing
    const GraphSlot* slot = graph_slot(exec, false);
    SegmentedGraph* segments = slot != nullptr ? slot->segments.load(std::memory_order_acquire)
                                               : nullptr;
    if (segments == nullptr) return nullptr;
    // Launched into a capturing stream, the program's graph becomes one node of another graph:
    // the program's executable, as it made it.
    const CUstream own =
        (stream == nullptr && variant == hooks::kPerThread) ? cu_stream_per_thread() : stream;
    return stream_is_capturing(own) ? nullptr : segments;
}

CUresult ClientRuntime::launch_segments(const SegmentedGraph& graph, CUstream stream, int variant,
                                        CUresult (*launch)(CUgraphExec, CUstream)) {
    slot_->stats.graph_launches.fetch_add(1, std::memory_order_relaxed);  // the program's one
    for (const GraphSegment& segment : graph.segments) {
        LaunchShape shape;
        shape.graph = segment.exec;
        shape.segment = true;
        if (!segment.opaque && segment.kernel_count == 1) {
            // Described as its one kernel: looked up, learned and gated as an eager launch of it.
            copy_node_shape(segment.kernel, &shape);
        } else if (!segment.opaque && segment.work.known) {
            shape.work = &segment.work;
        }
        const LaunchTicket ticket = before_launch(shape, stream, variant);
        const CUresult result = launch(segment.exec, ticket.stream);
        after_launch(ticket, result);
        if (result != CUDA_SUCCESS) return result;
    }
    return CUDA_SUCCESS;
}

void ClientRuntime::follow_node_change(CUgraphExec exec, CUgraphNode node,
                                       const CUDA_KERNEL_NODE_PARAMS_v2* kernel,
                                       const std::function<CUresult(CUgraphExec, CUgraphNode)>& apply) {
    GraphSlot* slot = graph_slot(exec, false);
    SegmentedGraph* graph = slot != nullptr ? slot->segments.load(std::memory_order_acquire)
                                            : nullptr;
    if (graph == nullptr) return;
    const auto found = graph->nodes.find(node);
    if (found == graph->nodes.end()) {
        drop_segments(exec, "the program changed a node orion did not split");
        return;
    }
    GraphSegment& segment = graph->segments[found->second.first];
    if (apply(segment.exec, found->second.second) != CUDA_SUCCESS) {
        drop_segments(exec, "the driver refused a change the program made, in a segment");
        return;
    }
    if (kernel != nullptr && segment.kernel_count == 1 && !segment.opaque) {
        segment.kernel = *kernel;  // the segment is now described as the new kernel
    } else {
        // Parameters orion does not read (or a kernel among several): its work is unknown now.
        segment.opaque = true;
    }
}

void ClientRuntime::drop_segments(CUgraphExec exec, const char* why) {
    forget_segments(exec);
    count_ungated_graph(why);
}

}  // namespace orion
