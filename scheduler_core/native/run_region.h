// Creating, attaching to, writing and removing one run's POSIX shared-memory object.
//
// Every store the controller makes into a run's region is a function of this module, so the rules
// of the layout (which slot may be configured when, what a profile table holds, what releasing a
// slot resets) live in one place; `_native` (control_module.cpp) only converts Python values and
// calls them. Plain C++ for a C++ test of its own: a bad value is thrown as std::invalid_argument,
// a client the run does not have as std::out_of_range, and a call the run's or the slot's state
// forbids as std::runtime_error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared_state.h"

namespace orion {

struct RunConfig {
    Policy policy = Policy::kPassthrough;
    std::uint32_t sm_count = 0;
    std::uint64_t queue_limit_ns = 0;
    std::uint64_t unknown_duration_ns = 0;
    std::uint64_t stale_ns = 0;
    std::uint32_t trace_capacity = 0;  // rounded up to a power of two; 0 = off
    CompletionMode hp_completion = CompletionMode::kEstimate;  // kEstimate or kGpuWrite
    BeGate be_gate = BeGate::kCpu;
    BeGraphGate be_graph_gate = BeGraphGate::kInside;
    bool quotas = false;
    std::uint64_t quota_window_ns = 1'000'000'000;
    bool open_slots = false;  // a daemon's run: clients join and leave after publication
    std::uint64_t hp_quiet_ns = 0;  // RunDecisions::hp_quiet_ns, at most kMaxHpQuietNs; 0 = off
    bool hp_priority_stream = true;  // RunDecisions::hp_priority_stream
    std::uint64_t context_bytes = 0;  // RunDecisions::context_bytes: one process's CUDA context
    std::uint64_t be_gate_spacing_ns = 0;  // RunDecisions::be_gate_spacing_ns; 0 = a queue limit
};

// Owns one mapping of a run's shared memory and of its decisions (RunDecisions); unmaps on
// destruction. Movable, not copyable.
//
// The decisions are a sealed memfd (shared_state.h, RunDecisions): the process that creates the
// run maps them read-write and keeps the descriptor to hand to clients (decisions_fd); every
// process that attaches maps them read-only from a path to that descriptor (`/proc/<pid>/fd/<n>`:
// the controller's, or its own copy received over the daemon's socket). Every function below that
// writes a decision refuses a mapping that is not the controller's (std::runtime_error) instead
// of faulting.
class RunMapping {
public:
    RunMapping() = default;
    RunMapping(const RunMapping&) = delete;
    RunMapping& operator=(const RunMapping&) = delete;
    RunMapping(RunMapping&& other) noexcept;
    RunMapping& operator=(RunMapping&& other) noexcept;
    ~RunMapping();

    // Creates a new run (fails if the name exists) and its sealed decisions. The header is filled
    // but not yet `ready`.
    static RunMapping create(const std::string& name, const RunConfig& config, std::string* error);
    // Maps an existing run after checking magic, layout version and size, and its decisions
    // (read-only) from `decisions_path` after checking that they are sealed against writing and
    // are this run's.
    static RunMapping attach(const std::string& name, const std::string& decisions_path,
                             std::string* error);
    // Removes the name; mappings stay valid until unmapped.
    static bool unlink(const std::string& name, std::string* error);

    bool valid() const { return base_ != nullptr; }
    RunView view() const { return RunView(base_, layout_, trace_capacity_, decisions_); }
    // The decisions' descriptor (close-on-exec) in the process that created the run; -1 in one
    // that attached.
    int decisions_fd() const { return decisions_fd_; }
    // Whether this process may write the decisions (it created the run).
    bool controls() const { return decisions_fd_ >= 0; }
    std::uint64_t size() const { return size_; }
    // The shared-memory name the run was created or attached under (for error messages).
    const std::string& name() const { return name_; }

private:
    RunMapping(void* base, std::uint64_t size, std::string name, std::uint32_t trace_capacity,
               RunDecisions* decisions, int decisions_fd)
        : base_(base),
          size_(size),
          name_(std::move(name)),
          layout_(compute_layout(trace_capacity)),
          trace_capacity_(trace_capacity),
          decisions_(decisions),
          decisions_fd_(decisions_fd) {}
    void release();
    void* base_ = nullptr;
    std::uint64_t size_ = 0;
    std::string name_;
    Layout layout_{};  // where the regions are: this process's own copy (RunView)
    std::uint32_t trace_capacity_ = 0;
    RunDecisions* decisions_ = nullptr;  // kDecisionsBytes mapped
    int decisions_fd_ = -1;
};

// A share of GPU time (0-1 of the quota window) in the parts per million ClientQuota holds.
inline std::uint32_t share_ppm(double share) {
    return static_cast<std::uint32_t>(share * kFullShare + 0.5);
}

// One kernel or graph of a client's profile, as its table entry holds it.
struct ProfileEntry {
    std::uint32_t sm_needed = 0;
    KernelClass kernel_class = KernelClass::kUnknown;
    std::uint64_t duration_ns = 0;
    std::uint32_t node_count = 0;  // graphs: kernel nodes
};

// The name of a ClientState, as client_state() and errors print it.
const char* state_name(std::uint32_t state);

// ---- Checks (each throws as the module comment says) ----
// `client` is a slot the run counts (every slot of an open run).
void check_client(const RunMapping& run, std::uint32_t client);
// This process created the run: it alone may change what the run decides.
void require_controller(const RunMapping& run);

// ---- Run-wide words ----
// Makes the run visible to clients (release: everything written before is seen by an attacher).
void publish(const RunMapping& run);
// Whether the published run needs a gate keeper: held BE launches wait on the GPU, under a policy
// that holds work back or with GPU-time shares.
bool needs_gate_keeper(const RunMapping& run);
// The BE queue bound and the duration assumed for an unprofiled kernel (a daemon sets them when
// an HP client joins or once its step is learned; clients read them at each launch).
void set_queue_limit(const RunMapping& run, std::uint64_t queue_limit_ns,
                     std::uint64_t unknown_duration_ns);
// The latency controller's strictest step (RunDecisions::hold_long_be): the gate keeper holds BE
// work longer than the queue limit while the HP client is active.
void set_hold_long_be(const RunMapping& run, bool hold);
// Whether the HP client's legacy-stream launches move to a private highest-priority stream
// (RunDecisions::hp_priority_stream): set as each HP joins, by the context it joins in (an HP
// in a context of its own gains nothing from the move and pays four driver calls a launch).
void set_hp_priority_stream(const RunMapping& run, bool move);
// The daemon's pulse: now, on the monotonic clock.
void heartbeat(const RunMapping& run);
// Every client passes through from now on.
void shut_down(const RunMapping& run);

// ---- Client slots ----
// Closed runs, before publication: the next slot, registered at once. Returns its index.
std::uint32_t add_client(const RunMapping& run, const std::string& name, Role role);
// Open runs: takes a free slot (kReserved, invisible to every process while it is configured);
// -1 when every slot is taken.
int reserve_slot(const RunMapping& run, const std::string& name, Role role);
// Open runs: a reserved slot becomes attachable by the process tree of `claim_pid`.
void register_slot(const RunMapping& run, std::uint32_t client, std::int32_t claim_pid);
// Open runs: the slots whose process is gone, found now (marked exited or dead, memory use zeroed)
// or before; the caller reads their statistics, then releases them.
std::vector<std::uint32_t> reap_slots(const RunMapping& run);
// Ends a registered slot that no process has attached to (its claimer is alive but never
// attached within the daemon's bound): exited, for reap_slots to report. False when a process
// attached (or the slot ended) in the meantime: then nothing changes.
bool expire_registered(const RunMapping& run, std::uint32_t client);
// Open runs: empties a slot whose process is gone (or that was never registered) for reuse.
void release_slot(const RunMapping& run, std::uint32_t client);
// The controller saw the process of an attached client end (crashed: killed).
void mark_gone(const RunMapping& run, std::uint32_t client, bool crashed);

// ---- A client's profile and limits ----
// Loaded before publication, or into a slot its daemon has reserved.
void load_kernel(const RunMapping& run, std::uint32_t client, std::uint64_t key,
                 const ProfileEntry& kernel);
// `timeline`: the graph's kernel nodes on its own clock, in the order they run; empty: the graph
// is gated as a unit only.
void load_graph(const RunMapping& run, std::uint32_t client, std::uint64_t key,
                const ProfileEntry& graph, const std::vector<TimelineNode>& timeline);
// Client `client`'s allocations count against the memory limit of `holder` (a BE client's
// child, its parent's), in `holder`'s use as well as its own; its own use goes back to `holder`
// when it ends, and it keeps the limit on its own once `holder`'s slot is released. `holder` must
// not share another's limit itself, nor `client` have others sharing its own.
void share_memory(const RunMapping& run, std::uint32_t client, std::uint32_t holder);
// Bytes (0: none); also while the run is live.
void set_memory_limit(const RunMapping& run, std::uint32_t client, std::uint64_t bytes);
// GPU-time shares (fractions 0-1 of the quota window); also while the run is live.
void set_quota(const RunMapping& run, std::uint32_t client, double min_util, double max_util);

}  // namespace orion
