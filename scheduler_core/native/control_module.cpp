// `scheduler_core._native`: the controller's view of a run's shared memory.
//
// The Python side creates a run, registers clients, loads their kernel tables, publishes the run,
// and later reads statistics and the trace. It shares the layout, hash and policy code with the
// preload library, so there is no second description of any of them in Python. Every write into
// the run's shared memory is a function of run_region.h: this module converts Python values to
// C++ ones, calls them, and converts what it reads back.
#include <unistd.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstddef>
#include <memory>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "gate_keeper.h"
#include "kernel_key.h"
#include "policy.h"
#include "run_region.h"
#include "shared_state.h"
#include "tracking.h"
#include "clock.h"
#include "enum_names.h"

namespace py = pybind11;

namespace orion {
namespace {

// The names Python uses for the layout's enums, indexed by value (enum_names.h).
const char* const kClassNames[] = {"unknown", "compute", "memory"};
const char* const kRoleNames[] = {"hp", "be"};
const char* const kCompletionNames[] = {"none", "gpu-write", "estimate"};
const char* const kBeGateNames[] = {"cpu", "gpu"};
const char* const kBeGraphGateNames[] = {"inside", "whole", "segments"};
static_assert(std::size(kBeGraphGateNames) == static_cast<std::size_t>(BeGraphGate::kSegments) + 1);

// `name` as a value of `names`, from the value `first` on; a ValueError saying `what` must be one
// of `choices` otherwise.
template <typename Enum, std::size_t N>
Enum parse_name(const char* const (&names)[N], const std::string& name, const char* what,
                const char* choices, std::size_t first = 0) {
    Enum value;
    if (!value_named(names, name.c_str(), &value, first)) {
        throw py::value_error(std::string(what) + " must be " + choices + ", not '" + name + "'");
    }
    return value;
}

KernelClass parse_class(const std::string& name) {
    return parse_name<KernelClass>(kClassNames, name, "kernel class",
                                   "'compute', 'memory' or 'unknown'");
}

const char* class_name(std::uint8_t value) { return name_of(kClassNames, value); }

Role parse_role(const std::string& name) {
    return parse_name<Role>(kRoleNames, name, "role", "'hp' or 'be'");
}

Policy policy_from(const std::string& name) {
    Policy policy;
    if (!parse_policy(name.c_str(), &policy)) {
        throw py::value_error("policy must be passthrough, priority, reef, orion or quota, not '" +
                              name + "'");
    }
    return policy;
}

// The HP client's completion tracking, as named in jobs.json and SchedulerSettings ("none", the
// state before a client chose, is no choice).
CompletionMode hp_completion_from(const std::string& name) {
    return parse_name<CompletionMode>(kCompletionNames, name, "hp_completion",
                                      "'estimate' or 'gpu-write'",
                                      static_cast<std::size_t>(CompletionMode::kGpuWrite));
}

// Where held BE launches wait, as named in jobs.json and SchedulerSettings.
BeGate be_gate_from(const std::string& name) {
    return parse_name<BeGate>(kBeGateNames, name, "be_gate", "'cpu' or 'gpu'");
}

// How the graphs of a client gated on the GPU are held, as named in jobs.json and
// SchedulerSettings.
BeGraphGate be_graph_gate_from(const std::string& name) {
    return parse_name<BeGraphGate>(kBeGraphGateNames, name, "be_graph_gate",
                                   "'inside', 'whole' or 'segments'");
}

const char* completion_mode_name(std::uint32_t mode) {
    return name_of(kCompletionNames, mode, "none");
}

class Run {
public:
    static Run create(const std::string& name, const std::string& policy, std::uint32_t sm_count,
                      std::uint64_t queue_limit_ns, std::uint64_t unknown_duration_ns,
                      std::uint64_t stale_ns, std::uint32_t trace_capacity,
                      const std::string& hp_completion, const std::string& be_gate,
                      bool quotas, std::uint64_t quota_window_ns, bool open_slots,
                      const std::string& be_graph_gate, std::uint64_t hp_quiet_ns,
                      bool hp_priority_stream, std::uint64_t context_bytes,
                      std::uint64_t be_gate_spacing_ns) {
        if (sm_count == 0) throw py::value_error("sm_count must be positive");
        if (quota_window_ns == 0) throw py::value_error("quota_window_ns must be positive");
        if (hp_quiet_ns > kMaxHpQuietNs) {
            throw py::value_error("hp_quiet_ns must be at most " + std::to_string(kMaxHpQuietNs) +
                                  " (1 s)");
        }
        if (be_gate_spacing_ns > kMaxBeGateSpacingNs) {
            throw py::value_error("be_gate_spacing_ns must be at most " +
                                  std::to_string(kMaxBeGateSpacingNs) + " (10 ms)");
        }
        RunConfig config;
        config.be_gate = be_gate_from(be_gate);
        config.be_graph_gate = be_graph_gate_from(be_graph_gate);
        config.quotas = quotas;
        config.quota_window_ns = quota_window_ns;
        config.hp_completion = hp_completion_from(hp_completion);
        config.policy = policy_from(policy);
        config.sm_count = sm_count;
        config.queue_limit_ns = queue_limit_ns;
        config.unknown_duration_ns = unknown_duration_ns;
        config.stale_ns = stale_ns;
        config.trace_capacity = trace_capacity;
        config.open_slots = open_slots;
        config.hp_quiet_ns = hp_quiet_ns;
        config.hp_priority_stream = hp_priority_stream;
        config.context_bytes = context_bytes;
        config.be_gate_spacing_ns = be_gate_spacing_ns;
        std::string error;
        RunMapping mapping = RunMapping::create(name, config, &error);
        if (!mapping.valid()) throw std::runtime_error(error);
        return Run(name, std::move(mapping));
    }

    // Another handle on a run this or another process controls: its decisions read-only, from
    // `decisions` (a path to the controller's descriptor, as `decisions_path` says it).
    static Run attach(const std::string& name, const std::string& decisions) {
        std::string error;
        RunMapping mapping = RunMapping::attach(name, decisions, &error);
        if (!mapping.valid()) throw std::runtime_error(error);
        return Run(name, std::move(mapping));
    }

    const std::string& name() const { return name_; }
    // The sealed decisions' descriptor in the controller (handed to clients over a daemon's
    // socket); -1 in a handle that attached.
    int decisions_fd() const { return run().decisions_fd(); }
    // Where any process of this machine (of this user) opens the decisions read-only: through
    // the controller's descriptor; empty in a handle that attached.
    std::string decisions_path() const {
        const int fd = run().decisions_fd();
        if (fd < 0) return "";
        return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
    }
    std::string policy() const { return policy_name(static_cast<Policy>(decisions().policy)); }
    std::uint32_t sm_count() const { return decisions().sm_count; }
    std::uint32_t client_count() const { return decisions().client_count; }
    std::uint32_t trace_capacity() const { return view().trace_capacity(); }
    std::uint64_t queue_limit_ns() const { return decisions().queue_limit_ns; }
    std::string hp_completion() const { return completion_mode_name(decisions().hp_completion); }
    std::uint64_t size_bytes() const { return mapping_.size(); }
    bool ready() const { return header().ready.load(std::memory_order_acquire) != 0; }

    int add_client(const std::string& client_name, const std::string& role) {
        return static_cast<int>(orion::add_client(run(), client_name, parse_role(role)));
    }

    // Open runs: takes a free slot for a client that is about to join, -1 when every slot is
    // taken. The slot stays invisible to every process (kReserved) while its kernel table and
    // limits are loaded; register_client then makes it attachable.
    int reserve_client(const std::string& client_name, const std::string& role) {
        return reserve_slot(run(), client_name, parse_role(role));
    }

    // Open runs: a reserved slot becomes attachable by the process tree of `claim_pid`; the
    // daemon watches that pid until a process attaches, then the attached one.
    void register_client(std::uint32_t client, std::int32_t claim_pid) {
        register_slot(run(), client, claim_pid);
    }

    // Open runs: slots whose process is gone, found here and now (the owner exited or died, or
    // the process that claimed the slot ended before any process attached). Each is marked
    // exited or dead, its memory count zeroed; the caller reads its statistics, then releases it.
    std::vector<std::uint32_t> reap() { return reap_slots(run()); }
    bool expire(std::uint32_t client) { return expire_registered(run(), client); }

    // Open runs: empties a slot whose process is gone (or that was never registered) so a new
    // client can take it: its kernel and graph tables, launch ring, completion words, trace,
    // statistics and limits.
    void release_client(std::uint32_t client) { release_slot(run(), client); }

    // The daemon's pulse (every pass of its loop): clients of an open run stop gating when it
    // is older than kDaemonStaleNs.
    void heartbeat() { orion::heartbeat(run()); }

    // `orion down`, SIGTERM: every client passes through from now on (each notices within
    // 200 ms); the gate keeper stops and opens every gate.
    void shut_down() {
        orion::shut_down(run());
        stop_gate_keeper();
    }

    // The BE queue bound (and the duration assumed for an unprofiled kernel), set when an HP
    // client joins a daemon or once its step is learned; gating decisions and GPU-side gate
    // spacing read it from the next launch on.
    void set_queue_limit(std::uint64_t queue_limit_ns, std::uint64_t unknown_duration_ns) {
        orion::set_queue_limit(run(), queue_limit_ns, unknown_duration_ns);
    }

    void set_hold_long_be(bool hold) { orion::set_hold_long_be(run(), hold); }
    void set_hp_priority_stream(bool move) { orion::set_hp_priority_stream(run(), move); }
    bool hold_long_be() const { return decisions().hold_long_be.load() != 0; }

    bool open_slots() const { return decisions().open_slots != 0; }
    std::uint32_t be_mask() const { return decisions().be_mask.load(std::memory_order_acquire); }

    void add_kernel(std::uint32_t client, std::uint64_t key, std::uint32_t sm_needed,
                    const std::string& kernel_class, std::uint64_t duration_ns) {
        ProfileEntry kernel;
        kernel.sm_needed = sm_needed;
        kernel.kernel_class = parse_class(kernel_class);
        kernel.duration_ns = duration_ns;
        load_kernel(run(), client, key, kernel);
    }

    // `timeline`: (start_ns, end_ns, sm_needed, kernel_class) per kernel node on the graph's clock,
    // in the order they run; empty: the graph is gated as a unit only.
    void add_graph(std::uint32_t client, std::uint64_t key, std::uint32_t sm_needed,
                   const std::string& kernel_class, std::uint64_t duration_ns,
                   std::uint32_t node_count,
                   const std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint32_t,
                                                std::string>>& timeline) {
        ProfileEntry graph;
        graph.sm_needed = sm_needed;
        graph.kernel_class = parse_class(kernel_class);
        graph.duration_ns = duration_ns;
        graph.node_count = node_count;
        std::vector<TimelineNode> nodes;
        nodes.reserve(timeline.size());
        for (const auto& [start, end, sms, node_class] : timeline) {
            TimelineNode node{};
            node.start_ns = start;
            node.end_ns = end;
            node.sm_needed = sms;
            node.kernel_class = static_cast<std::uint8_t>(parse_class(node_class));
            nodes.push_back(node);
        }
        load_graph(run(), client, key, graph, nodes);
    }

    std::uint32_t graph_count(std::uint32_t client) const {
        check_client(client);
        return view().client(client).graph_count;
    }

    std::uint32_t kernel_count(std::uint32_t client) const {
        check_client(client);
        return view().client(client).kernel_count;
    }

    // Makes the run visible to clients; under be_gate "gpu" also starts the gate keeper, the
    // thread that opens BE gates (this process is outside every gated one).
    void publish() {
        orion::publish(run());
        if (needs_gate_keeper(run()) && !keeper_) {
            keeper_ = std::make_unique<GateKeeper>(view());
            keeper_->start();
        }
    }

    std::string be_gate() const {
        return decisions().be_gate == static_cast<std::uint32_t>(BeGate::kGpu) ? "gpu" : "cpu";
    }

    std::string be_graph_gate() const {
        return name_of(kBeGraphGateNames, decisions().be_graph_gate);
    }

    std::uint64_t hp_quiet_ns() const { return decisions().hp_quiet_ns; }
    std::uint64_t be_gate_spacing_ns() const { return decisions().be_gate_spacing_ns; }
    bool hp_priority_stream() const { return decisions().hp_priority_stream != 0; }
    std::uint64_t context_bytes() const { return decisions().context_bytes; }

    bool gate_open(std::uint32_t client) const {
        check_client(client);
        return (view().gates().gates[client].word.load(std::memory_order_acquire) & kGateOpen) != 0;
    }

    py::dict gate_stats() const {
        const GateBlock& block = view().gates();
        py::dict out;
        out["keeper_running"] = keeper_ != nullptr && keeper_->running();
        out["opens"] = block.opens.load();
        out["closes"] = block.closes.load();
        out["keeper_wakeups"] = block.wakeups.load();
        out["hp_activity"] = block.hp_activity.load();
        out["hold_passes"] = block.hold_passes.load();
        out["long_holds"] = block.long_holds.load();
        out["quiet_holds"] = block.quiet_holds.load();
        return out;
    }

    // Stops the gate keeper, opening every gate (end of run, Ctrl-C, SIGTERM). Idempotent.
    void stop_gate_keeper() {
        if (keeper_) keeper_->stop();
        keeper_.reset();
    }

    std::string client_state(std::uint32_t client) const {
        check_client(client);
        return state_name(view().client(client).state.load(std::memory_order_acquire));
    }

    // The controller saw the process end: nobody should wait on its launches any more.
    void mark_gone(std::uint32_t client, bool crashed) { orion::mark_gone(run(), client, crashed); }

    // The client's memory limit in bytes (0: none). Takes effect at its next allocation, also
    // while the run is live; a limit below the current use refuses new allocations, frees nothing.
    void set_memory_limit(std::uint32_t client, std::uint64_t bytes) {
        orion::set_memory_limit(run(), client, bytes);
    }

    // The client's allocations count against `holder`'s memory limit (a BE client's child).
    void share_memory(std::uint32_t client, std::uint32_t holder) {
        orion::share_memory(run(), client, holder);
    }

    // The client's GPU-time shares (fractions 0-1 of the quota window), also while the run is
    // live: the gate keeper applies them at its next pass.
    void set_quota(std::uint32_t client, double min_util, double max_util) {
        orion::set_quota(run(), client, min_util, max_util);
    }

    bool quotas() const { return decisions().quotas != 0; }
    std::uint64_t quota_window_ns() const { return decisions().quota_window_ns; }

    std::string client_name(std::uint32_t client) const {
        check_client(client);
        const char* name = view().client(client).name;
        return std::string(name, strnlen(name, kClientNameBytes));
    }

    py::dict client_stats(std::uint32_t client) const {
        check_client(client);
        const RunView run_view = view();
        const ClientSlot& slot = run_view.client(client);
        const ClientStats& s = slot.stats;
        py::dict out;
        out["name"] = std::string(slot.name);
        const ClientDecision& decision = run_view.decision(client);
        out["role"] = run_view.role(client) == Role::kHighPriority ? "hp" : "be";
        out["state"] = state_name(slot.state.load(std::memory_order_acquire));
        out["pid"] = slot.pid.load(std::memory_order_acquire);
        out["profiled_kernels"] = slot.kernel_count;
        out["completion_mode"] =
            completion_mode_name(slot.completion_mode.load(std::memory_order_acquire));
        out["launches"] = s.launches.load();
        out["tracked_launches"] = s.tracked_launches.load();
        out["unknown_launches"] = s.unknown_launches.load();
        out["graph_launches"] = s.graph_launches.load();
        out["graph_gpu_writes"] = s.graph_gpu_writes.load();
        out["graphs_identified"] = s.graphs_identified.load();
        out["unknown_graph_launches"] = s.unknown_graph_launches.load();
        out["gate_waits"] = s.gate_waits.load();
        out["graphs_gated"] = s.graphs_gated.load();
        out["graph_gate_waits"] = s.graph_gate_waits.load();
        out["graphs_ungated"] = s.graphs_ungated.load();
        out["memory_limit"] = decision.memory_limit.load();
        out["memory_used"] = slot.memory.used.load();
        out["memory_peak"] = slot.memory.peak.load();
        out["allocations_refused"] = slot.memory.refused.load();
        // The slot whose memory limit it shares, -1 for its own.
        out["memory_account"] = static_cast<int>(decision.memory_account.load()) - 1;
        out["min_util"] = decision.min_ppm.load() / static_cast<double>(kFullShare);
        out["max_util"] = decision.max_ppm.load() / static_cast<double>(kFullShare);
        out["gpu_share"] = static_cast<double>(slot.quota.used_ns.load()) /
                           static_cast<double>(decisions().quota_window_ns);
        out["gpu_busy_ns"] = slot.quota.busy_ns.load();
        out["gpu_launch_ns"] = slot.quota.launch_ns.load();
        out["profiled_graphs"] = slot.graph_count;
        out["blocked_launches"] = s.blocked_launches.load();
        out["blocked_ns"] = s.blocked_ns.load();
        out["redirected_launches"] = s.redirected_launches.load();
        out["capture_launches"] = s.capture_launches.load();
        out["streams_prioritised"] = s.streams_prioritised.load();
        out["trace_records"] = slot.trace_head.load();
        out["offline_launches"] = s.offline_launches.load();
        out["online_launches"] = s.online_launches.load();
        out["offline_ns"] = s.offline_ns.load();
        out["online_ns"] = s.online_ns.load();
        out["sampled_launches"] = s.sampled_launches.load();
        out["sampled_ns"] = s.sampled_ns.load();
        out["sampled_expected_ns"] = s.sampled_expected_ns.load();
        out["sampling_holds"] = s.sampling_holds.load();
        out["held_samples"] = s.held_samples.load();
        // A tally's counters under its prefix; a tail is a count per ratio of kFeltTailPercents.
        const auto tally = [&out](const std::string& prefix, const FeltTally& t) {
            const auto tail = [](const std::atomic<std::uint64_t>(&counts)[kFeltTails]) {
                py::list list;
                for (const auto& count : counts) list.append(count.load());
                return list;
            };
            out[(prefix + "_samples").c_str()] = t.samples.load();
            out[(prefix + "_ns").c_str()] = t.ns.load();
            out[(prefix + "_expected_ns").c_str()] = t.expected_ns.load();
            out[(prefix + "_slower").c_str()] = tail(t.slower);
            out[(prefix + "_alone_samples").c_str()] = t.alone_samples.load();
            out[(prefix + "_alone_slower").c_str()] = tail(t.alone_slower);
        };
        tally("felt", s.felt);
        out["hp_requests"] = s.hp_requests.load();
        tally("start_felt", s.start_felt);
        out["requests_timed"] = s.requests_timed.load();
        tally("request", s.request);
        out["request_holds"] = s.request_holds.load();
        out["graphs_segmented"] = s.graphs_segmented.load();
        out["graph_segments"] = s.graph_segments.load();
        out["ungated_graph_why"] =
            slot.ungated_graph_why_set.load(std::memory_order_acquire) == 2
                ? std::string(slot.ungated_graph_why, strnlen(slot.ungated_graph_why, kNameBytes))
                : std::string();
        py::dict reasons;
        for (int r = 0; r < static_cast<int>(Reason::kCount); ++r) {
            reasons[reason_name(static_cast<Reason>(r))] = s.reasons[r].load();
        }
        out["reasons"] = reasons;
        return out;
    }

    // What `client` learned online (kernel_learning.h): one dict per described entry. A graph
    // lists its kernel nodes as the keys of their own entries (`nodes`), in the order it was read.
    py::list learned(std::uint32_t client) const {
        check_client(client);
        const LearnedBlock& block = view().learned(client);
        py::list out;
        for (std::uint32_t i = 0; i < kLearnedSlots; ++i) {
            const LearnedEntry& entry = block.entries[i];
            const std::uint64_t key = entry.key.load(std::memory_order_acquire);
            if (key == 0 || entry.described.load(std::memory_order_acquire) == 0) continue;
            py::dict row;
            row["key"] = key;
            row["graph"] = entry.graph != 0;
            row["name"] = entry.name_length != 0 && entry.name_offset + entry.name_length <= kLearnedNameBytes
                              ? std::string(block.names + entry.name_offset, entry.name_length)
                              : std::string();
            row["grid"] = std::make_tuple(entry.grid[0], entry.grid[1], entry.grid[2]);
            row["block"] = std::make_tuple(entry.block[0], entry.block[1], entry.block[2]);
            row["shared_bytes"] = entry.shared_bytes;
            row["blocks_per_sm"] = entry.blocks_per_sm;
            row["sm_needed"] = entry.sm_needed;
            row["samples"] = entry.sample_count.load(std::memory_order_acquire);
            row["duration_ns"] = entry.duration_ns.load(std::memory_order_acquire);
            row["launches"] = entry.launches.load(std::memory_order_relaxed);
            py::list nodes;
            if (entry.graph != 0 && entry.node_first + entry.node_count <= kLearnedNodes) {
                for (std::uint32_t n = 0; n < entry.node_count; ++n) {
                    const std::uint32_t index = block.nodes[entry.node_first + n];
                    if (index < kLearnedSlots) {
                        nodes.append(block.entries[index].key.load(std::memory_order_acquire));
                    }
                }
            }
            row["nodes"] = nodes;
            out.append(row);
        }
        return out;
    }

    std::vector<std::string> unknown_kernels(std::uint32_t client) const {
        check_client(client);
        const RunView run_view = view();
        const ClientSlot& slot = run_view.client(client);
        std::uint32_t count = slot.unknown_name_count.load(std::memory_order_acquire);
        if (count > kUnknownNames) count = kUnknownNames;
        std::vector<std::string> names;
        for (std::uint32_t i = 0; i < count; ++i) {
            names.emplace_back(slot.unknown_names[i],
                               strnlen(slot.unknown_names[i], kNameBytes));
        }
        return names;
    }

    // Trace records of `client` from index `start` on: (records, next start, records lost).
    std::tuple<py::list, std::uint64_t, std::uint64_t> read_trace(std::uint32_t client,
                                                                  std::uint64_t start) const {
        check_client(client);
        const std::uint32_t capacity = view().trace_capacity();
        py::list records;
        if (capacity == 0) return {records, start, 0};
        const std::uint64_t head = view().client(client).trace_head.load(std::memory_order_acquire);
        std::uint64_t lost = 0;
        if (head > start + capacity) {
            lost = head - capacity - start;
            start = head - capacity;
        }
        const TraceRecord* ring = view().trace(client);
        std::uint64_t index = start;
        for (; index < head; ++index) {
            // The seqlock of shared_state.h: a record is taken only when both reads of its seq
            // give its own number; one still being written stops this drain (the next one reads
            // it), one overwritten by a later lap or torn is lost and counted.
            const TraceRecord& r = ring[index & (capacity - 1)];
            const std::uint64_t want = index + 1;
            const std::uint64_t first = r.seq.load(std::memory_order_acquire);
            if (first < want) {
                // Not published yet: read it next time, unless its writer has already published
                // the newest record, so it never will (a client killed mid-write): then it is lost.
                const TraceRecord& newest = ring[(head - 1) & (capacity - 1)];
                if (newest.seq.load(std::memory_order_acquire) != head || index + 1 == head) break;
                ++lost;
                continue;
            }
            if (first > want) {
                ++lost;
                continue;
            }
            const std::uint64_t key = r.key.load(std::memory_order_relaxed);
            const std::uint64_t enqueue_ns = r.enqueue_ns.load(std::memory_order_relaxed);
            const std::uint64_t launch_ns = r.launch_ns.load(std::memory_order_relaxed);
            const std::uint64_t duration_ns = r.duration_ns.load(std::memory_order_relaxed);
            const std::uint32_t sm_needed = r.sm_needed.load(std::memory_order_relaxed);
            const std::uint8_t kernel_class = r.kernel_class.load(std::memory_order_relaxed);
            const std::uint8_t reason = r.reason.load(std::memory_order_relaxed);
            const std::uint8_t known = r.known.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (r.seq.load(std::memory_order_relaxed) != want) {
                ++lost;
                continue;
            }
            records.append(py::make_tuple(want, key, enqueue_ns, launch_ns, duration_ns, sm_needed,
                                          class_name(kernel_class),
                                          reason_name(static_cast<Reason>(reason)), known != 0));
        }
        return {records, index, lost};
    }

    // Launches of `client` not yet finished, as the scheduler sees them now.
    std::uint64_t in_flight(std::uint32_t client) const {
        check_client(client);
        const std::uint64_t now = monotonic_ns();
        const std::uint64_t low = advance_low_water(view(), client, now);
        const std::uint64_t published =
            view().client(client).published_seq.load(std::memory_order_acquire);
        std::uint64_t count = 0;
        for (std::uint64_t seq = low + 1; seq <= published; ++seq) {
            if (!launch_finished(view(), client, seq, now)) ++count;
        }
        return count;
    }

    void unlink() {
        std::string error;
        if (!RunMapping::unlink(name_, &error)) throw std::runtime_error(error);
    }

    void close() {
        stop_gate_keeper();
        mapping_ = RunMapping();
    }

private:
    Run(std::string name, RunMapping mapping) : name_(std::move(name)), mapping_(std::move(mapping)) {}

    // The open mapping, which the region's functions write through.
    const RunMapping& run() const {
        if (!mapping_.valid()) throw std::runtime_error("run '" + name_ + "' is closed");
        return mapping_;
    }
    RunView view() const { return run().view(); }
    RunHeader& header() const { return view().header(); }
    RunDecisions& decisions() const { return view().decisions(); }
    void check_client(std::uint32_t client) const { orion::check_client(run(), client); }

    std::string name_;
    RunMapping mapping_;
    std::unique_ptr<GateKeeper> keeper_;  // declared after the mapping: stopped before unmapping
};

std::uint64_t key_for(const std::string& name, std::array<std::uint32_t, 3> grid,
                      std::array<std::uint32_t, 3> block) {
    return kernel_key(hash_name(name.c_str()), grid[0], grid[1], grid[2], block[0], block[1],
                      block[2]);
}

std::uint64_t graph_key_for(const std::vector<std::uint64_t>& kernel_keys) {
    GraphKeyBuilder builder;
    for (const std::uint64_t key : kernel_keys) builder.add(key);
    return builder.key();
}

KernelInfo kernel_from(const py::dict& d) {
    KernelInfo info;
    info.known = d.contains("known") ? d["known"].cast<bool>() : true;
    info.sm_needed = d.contains("sm_needed") ? d["sm_needed"].cast<std::uint32_t>() : 0;
    info.kernel_class =
        parse_class(d.contains("kernel_class") ? d["kernel_class"].cast<std::string>() : "unknown");
    info.duration_ns = d.contains("duration_ns") ? d["duration_ns"].cast<std::uint64_t>() : 0;
    return info;
}

QuotaClient quota_client_from(const py::dict& d) {
    QuotaClient client;
    client.participates = d.contains("participates") ? d["participates"].cast<bool>() : true;
    client.has_work = d.contains("has_work") ? d["has_work"].cast<bool>() : true;
    client.used_ns = d.contains("used_ns") ? d["used_ns"].cast<std::uint64_t>() : 0;
    const double min_util = d.contains("min_util") ? d["min_util"].cast<double>() : 0.0;
    const double max_util = d.contains("max_util") ? d["max_util"].cast<double>() : 1.0;
    client.min_ppm = share_ppm(min_util);
    client.max_ppm = share_ppm(max_util);
    return client;
}

std::string quota_verdict_for(const py::dict& client, std::uint64_t window_ns) {
    switch (quota_verdict(quota_client_from(client), window_ns)) {
        case QuotaVerdict::kCapped:
            return "capped";
        case QuotaVerdict::kOwed:
            return "owed";
        case QuotaVerdict::kFree:
            break;
    }
    return "free";
}

int quota_holder_for(const py::list& clients, std::uint64_t window_ns, int current,
                     bool slice_left) {
    std::vector<QuotaClient> table;
    for (const py::handle item : clients) table.push_back(quota_client_from(item.cast<py::dict>()));
    return quota_holder(table.data(), static_cast<std::uint32_t>(table.size()), window_ns, current,
                        slice_left);
}

py::tuple decide_for(const std::string& policy, const std::string& role, const py::dict& kernel,
                     std::uint32_t sm_count, std::uint64_t queue_limit_ns,
                     std::uint64_t be_outstanding_ns, const py::list& hp_in_flight,
                     bool sampling_hold, std::uint64_t hp_quiet_until_ns) {
    Snapshot snapshot;
    snapshot.sampling_hold = sampling_hold;
    snapshot.hp_quiet_until_ns = hp_quiet_until_ns;
    snapshot.sm_count = sm_count;
    snapshot.queue_limit_ns = queue_limit_ns;
    snapshot.be_outstanding_ns = be_outstanding_ns;
    for (const py::handle item : hp_in_flight) {
        if (snapshot.hp_in_flight == kMaxHpInspected) {
            snapshot.hp_backlog = true;
            break;
        }
        snapshot.hp_kernels[snapshot.hp_in_flight++] = kernel_from(item.cast<py::dict>());
    }
    const Decision decision = decide(policy_from(policy), parse_role(role), kernel_from(kernel), snapshot);
    return py::make_tuple(decision.launch, reason_name(decision.reason));
}

}  // namespace
}  // namespace orion

PYBIND11_MODULE(_native, m) {
    using orion::Run;
    m.doc() = "Controller access to orion's per-run shared memory (create, load, publish, read).";
    m.attr("LAYOUT_VERSION") = orion::kLayoutVersion;
    {
        py::list ratios;
        for (const std::uint32_t percent : orion::kFeltTailPercents) ratios.append(percent / 100.0);
        m.attr("FELT_TAIL_RATIOS") = py::tuple(ratios);
    }
    m.attr("MAX_HP_QUIET_NS") = orion::kMaxHpQuietNs;
    m.attr("MAX_CLIENTS") = orion::kMaxClients;
    m.attr("MAX_KERNELS_PER_CLIENT") = orion::kKernelSlots / 2;
    m.attr("MAX_HP_INSPECTED") = orion::kMaxHpInspected;
    m.def("kernel_key", &orion::key_for, py::arg("name"), py::arg("grid"), py::arg("block"),
          "The 64-bit identity the preload library computes for a launch.");
    m.def("graph_key", &orion::graph_key_for, py::arg("kernel_keys"),
          "The identity the preload library computes for a CUDA graph from the kernel keys of "
          "its kernel nodes (any order).");
    m.attr("MAX_GRAPHS_PER_CLIENT") = orion::kGraphSlots / 2;
    m.def("quota_verdict", &orion::quota_verdict_for, py::arg("client"), py::arg("window_ns"),
          "Whether a client's GPU-time share caps it, is owed, or leaves it to the policy.");
    m.def("quota_holder", &orion::quota_holder_for, py::arg("clients"), py::arg("window_ns"),
          py::arg("current"), py::arg("slice_left"),
          "Under `quota`: the index of the client that holds the GPU next, -1 for nobody.");
    m.def("decide", &orion::decide_for, py::arg("policy"), py::arg("role"), py::arg("kernel"),
          py::arg("sm_count"), py::arg("queue_limit_ns"), py::arg("be_outstanding_ns"),
          py::arg("hp_in_flight"), py::arg("sampling_hold") = false,
          py::arg("hp_quiet_until_ns") = 0,
          "Runs the scheduling policy on a hand-made snapshot: (launch?, reason).");
    py::class_<Run>(m, "Run")
        .def_static("create", &Run::create, py::arg("name"), py::arg("policy"),
                    py::arg("sm_count"), py::arg("queue_limit_ns"),
                    py::arg("unknown_duration_ns"), py::arg("stale_ns"),
                    py::arg("trace_capacity") = 0, py::arg("hp_completion") = "estimate",
                    py::arg("be_gate") = "gpu", py::arg("quotas") = false,
                    py::arg("quota_window_ns") = 1'000'000'000ULL, py::arg("open_slots") = false,
                    py::arg("be_graph_gate") = "inside", py::arg("hp_quiet_ns") = 0,
                    py::arg("hp_priority_stream") = true, py::arg("context_bytes") = 0,
                    py::arg("be_gate_spacing_ns") = 0)
        .def_static("attach", &Run::attach, py::arg("name"), py::arg("decisions"))
        .def_property_readonly("name", &Run::name)
        .def_property_readonly("decisions_fd", &Run::decisions_fd)
        .def_property_readonly("decisions_path", &Run::decisions_path)
        .def_property_readonly("policy", &Run::policy)
        .def_property_readonly("sm_count", &Run::sm_count)
        .def_property_readonly("client_count", &Run::client_count)
        .def_property_readonly("trace_capacity", &Run::trace_capacity)
        .def_property_readonly("queue_limit_ns", &Run::queue_limit_ns)
        .def_property_readonly("hp_completion", &Run::hp_completion)
        .def_property_readonly("be_gate", &Run::be_gate)
        .def_property_readonly("be_graph_gate", &Run::be_graph_gate)
        .def_property_readonly("hp_quiet_ns", &Run::hp_quiet_ns)
        .def_property_readonly("be_gate_spacing_ns", &Run::be_gate_spacing_ns)
        .def_property_readonly("hp_priority_stream", &Run::hp_priority_stream)
        .def_property_readonly("context_bytes", &Run::context_bytes)
        .def("gate_open", &Run::gate_open, py::arg("client"))
        .def("gate_stats", &Run::gate_stats)
        .def("stop_gate_keeper", &Run::stop_gate_keeper,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("size_bytes", &Run::size_bytes)
        .def_property_readonly("ready", &Run::ready)
        .def("add_client", &Run::add_client, py::arg("name"), py::arg("role"))
        .def("reserve_client", &Run::reserve_client, py::arg("name"), py::arg("role"))
        .def("register_client", &Run::register_client, py::arg("client"), py::arg("claim_pid"))
        .def("reap", &Run::reap)
        .def("expire_client", &Run::expire, py::arg("client"))
        .def("release_client", &Run::release_client, py::arg("client"))
        .def("heartbeat", &Run::heartbeat)
        .def("shut_down", &Run::shut_down, py::call_guard<py::gil_scoped_release>())
        .def("set_queue_limit", &Run::set_queue_limit, py::arg("queue_limit_ns"),
             py::arg("unknown_duration_ns"))
        .def("set_hold_long_be", &Run::set_hold_long_be, py::arg("hold"))
        .def("set_hp_priority_stream", &Run::set_hp_priority_stream, py::arg("move"))
        .def_property_readonly("hold_long_be", &Run::hold_long_be)
        .def_property_readonly("open_slots", &Run::open_slots)
        .def_property_readonly("be_mask", &Run::be_mask)
        .def("add_kernel", &Run::add_kernel, py::arg("client"), py::arg("key"),
             py::arg("sm_needed"), py::arg("kernel_class"), py::arg("duration_ns"))
        .def("kernel_count", &Run::kernel_count, py::arg("client"))
        .def("add_graph", &Run::add_graph, py::arg("client"), py::arg("key"), py::arg("sm_needed"),
             py::arg("kernel_class"), py::arg("duration_ns"), py::arg("node_count"),
             py::arg("timeline") = std::vector<std::tuple<std::uint64_t, std::uint64_t,
                                                          std::uint32_t, std::string>>{})
        .def("graph_count", &Run::graph_count, py::arg("client"))
        .def("publish", &Run::publish)
        .def("client_state", &Run::client_state, py::arg("client"))
        .def("mark_gone", &Run::mark_gone, py::arg("client"), py::arg("crashed"))
        .def("set_memory_limit", &Run::set_memory_limit, py::arg("client"), py::arg("bytes"))
        .def("share_memory", &Run::share_memory, py::arg("client"), py::arg("holder"))
        .def("client_name", &Run::client_name, py::arg("client"))
        .def("set_quota", &Run::set_quota, py::arg("client"), py::arg("min_util"),
             py::arg("max_util"))
        .def_property_readonly("quotas", &Run::quotas)
        .def_property_readonly("quota_window_ns", &Run::quota_window_ns)
        .def("client_stats", &Run::client_stats, py::arg("client"))
        .def("unknown_kernels", &Run::unknown_kernels, py::arg("client"))
        .def("learned", &Run::learned, py::arg("client"))
        .def("read_trace", &Run::read_trace, py::arg("client"), py::arg("start"))
        .def("in_flight", &Run::in_flight, py::arg("client"))
        .def("unlink", &Run::unlink)
        .def("close", &Run::close, py::call_guard<py::gil_scoped_release>());
}
