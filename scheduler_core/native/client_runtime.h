// What the preload library does inside one client process.
//
// An LD_PRELOAD library has no caller to hand it an object, so one `ClientRuntime` per process is
// created on first use and lives until exit: that is the only global state, and the reason for it.
// Without `ORION_RUN` in the environment it stays inactive and every hook passes straight through.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clock.h"
#include "cuda_api.h"
#include "graph_segments.h"
#include "kernel_learning.h"
#include "launch_sampler.h"
#include "memory_ledger.h"
#include "policy.h"
#include "run_region.h"
#include "probe_table.h"
#include "request_timer.h"
#include "shared_state.h"

namespace orion {

struct LaunchShape {
    CUfunction function = nullptr;  // nullptr for a graph launch
    unsigned int grid[3] = {1, 1, 1};
    unsigned int block[3] = {1, 1, 1};
    unsigned int shared_bytes = 0;  // dynamic shared memory per block
    CUgraphExec graph = nullptr;  // the executable graph of a graph launch
    bool stream_fixed = false;    // the API takes no stream (cuLaunch, cuLaunchGrid): never moved
    // A segment of a split BE graph (graph_segments.h): not a graph launch of the program's.
    // With `function` set it is described as that one kernel; otherwise `work` when known.
    bool segment = false;
    const KernelInfo* work = nullptr;
};

// What `before_launch` decided, carried to `after_launch`.
struct LaunchTicket {
    CUstream stream = nullptr;        // the stream to launch on (an HP legacy launch is moved)
    CUstream own_stream = nullptr;    // the same stream as an explicit handle for orion's own calls
    std::uint64_t seq = 0;            // 0: not tracked
    std::uint64_t key = 0;
    std::uint64_t enqueue_ns = 0;
    std::uint64_t launch_ns = 0;
    KernelInfo kernel;
    Reason reason = Reason::kNotGated;
    bool trace = false;
    bool gpu_written = false;  // a graph whose completion the GPU writes (whatever the mode)
    bool gate_wait = false;    // a GPU-side gate wait was put on the stream before this launch
    bool redirected = false;   // an HP legacy-stream launch moved to the private stream
    std::uint64_t guard_seq = 0;  // BE under the GPU-side gate: the launch whose wait guards it
    int sample = -1;           // the LaunchSampler pair timing this launch, -1 if none
    bool request_mark = false; // an HP launch of the request the RequestTimer times
    SampleUse sample_use;      // what that timing is for
};

class ClientRuntime {
public:
    static ClientRuntime& instance();
    // Whether instance() has run in this process (nothing to detach otherwise).
    static bool created();
    // Whether this process attaches when the library loads (see hooks.cpp) or on first use.
    static bool attaches_at_load();

    ClientRuntime(const ClientRuntime&) = delete;
    ClientRuntime& operator=(const ClientRuntime&) = delete;

    // Attached to a run, and not a forked child of the process that attached.
    bool active() const { return active_.load(std::memory_order_relaxed); }
    // Stream priorities are set by role (every policy but passthrough).
    bool sets_priorities() const { return active() && policy_sets_priorities(policy_); }

    // Called by every launch hook around the real launch. May block a BE client (gating).
    LaunchTicket before_launch(const LaunchShape& shape, CUstream stream, int variant);
    void after_launch(const LaunchTicket& ticket, CUresult result);

    // A graph was instantiated into `exec`: read its kernel nodes and remember its identity.
    void graph_instantiated(CUgraphExec exec, CUgraph graph);
    // `exec` is being destroyed: a later executable at the same address is a different graph.
    void graph_destroyed(CUgraphExec exec);
    // A kernel node of `exec` got new parameters (nullptr: unreadable ones): its identity changes.
    void graph_node_changed(CUgraphExec exec, CUgraphNode node,
                            const CUDA_KERNEL_NODE_PARAMS_v2* params);

    // CUDA graphs gated inside (graph_gating.cpp). `instantiate` is the program's real
    // instantiation call; for a client gated on the GPU it runs with gate wait nodes added to the
    // graph (taken out again afterwards), then the executable is identified. `update` is the real
    // cuGraphExecUpdate: a gated executable is updated from the graph with the same waits.
    // `flags` are the instantiation's (a BE graph is split into segments instantiated alike).
    CUresult instantiate_graph(CUgraphExec* exec, CUgraph graph,
                               unsigned long long flags,  // NOLINT(google-runtime-int)
                               const std::function<CUresult()>& instantiate);
    CUresult update_graph(CUgraphExec exec, CUgraph graph, const std::function<CUresult()>& update);
    void forget_gated_graph(CUgraphExec exec);

    // BE graphs split into segments (graph_segments.cpp). The segments `exec` is launched as,
    // nullptr when it is launched whole (not split, or into a capturing stream): one lock-free
    // probe, on the launch path.
    SegmentedGraph* graph_segments(CUgraphExec exec, CUstream stream, int variant);
    // Launches each segment through before_launch/after_launch with the driver's `launch`.
    CUresult launch_segments(const SegmentedGraph& graph, CUstream stream, int variant,
                             CUresult (*launch)(CUgraphExec, CUstream));
    // The program changed `node` of `exec` (the driver took it): the same change, by `apply`, on
    // the segment holding it; a kernel node's new parameters in `kernel`, nullptr when not read.
    // A change orion cannot follow leaves the executable launched whole from then on.
    void follow_node_change(CUgraphExec exec, CUgraphNode node,
                            const CUDA_KERNEL_NODE_PARAMS_v2* kernel,
                            const std::function<CUresult(CUgraphExec, CUgraphNode)>& apply);
    // `exec` is gone (or changes wholesale): its segments are destroyed.
    void forget_segments(CUgraphExec exec);

    // Code was unloaded: cached kernel names may belong to handles that will be reused.
    void forget_kernel_names() { name_generation_.fetch_add(1, std::memory_order_acq_rel); }

    // This client's memory accounting (inactive outside a run).
    MemoryLedger& memory() { return memory_; }

    // The priority a stream created by this process gets.
    int stream_priority(int requested);
    void count_prioritised_stream();

    // The private stream HP legacy-stream launches were moved to, or nullptr if none was used.
    CUstream redirect_stream() const { return redirect_used_.load(std::memory_order_acquire) ? redirect_stream_ : nullptr; }

    // A wait of the program's for a stream returned with its work done (cuStreamSynchronize, a
    // cuStreamQuery that found it done): where an HP's request may end (kRequestGapNs below).
    void waited() {
        if (role_ == Role::kHighPriority && active()) {
            hp_last_wait_ns_.store(monotonic_ns(), std::memory_order_relaxed);
        }
    }

    // Marks this client's slot as exited (normal process exit).
    void detach();
    // pthread_atfork child handler: a forked child must not act as its parent's client.
    void disable_in_child() { active_.store(false, std::memory_order_relaxed); }
    // The daemon of an open run stopped (`orion down`) or died: open this client's own gate and
    // pass every call through from now on. Idempotent; safe from any thread.
    void leave_daemon(const char* why);

private:
    ClientRuntime();
    // A runtime for the daemon this client rejoined (watch_for_a_daemon): `rejoined` is the
    // daemon's answer, read before the environment (which keeps the first run's variables).
    explicit ClientRuntime(std::vector<std::pair<std::string, std::string>> rejoined);
    const char* variable(const char* name) const;
    void attach_from_environment();
    // The watch thread's two phases: watching the daemon (false once this client detached or is
    // a forked child, true once it left the daemon), then, for a client that joined from its
    // environment, waiting for one to answer again (true: its own daemon beats again and it is
    // gated again; false: a new runtime took over, or the process is ending).
    bool watch_daemon();
    bool watch_for_a_daemon();
    std::vector<std::pair<std::string, std::string>> rejoined_;
    // Open runs: a thread that sleeps, and leaves the daemon once it stops or falls silent (a
    // daemon killed with SIGKILL). It touches only host memory, never the driver: it must not be
    // held by a gate the way a thread of this process inside a synchronising call can be.
    // A BE client told to hold when its daemon is gone (ORION_BE_WHEN_DAEMON_GONE=hold) holds
    // its new launches while the daemon is silent instead, and leaves it only after the bound
    // (ORION_DAEMON_GONE_HOLD_S): a stopped or stalled daemon that comes back finds BE gated.
    void start_daemon_watch();
    // Reads the run's choice for a gone daemon from the daemon's answer to `join`.
    void read_daemon_gone_choice();
    // A launch's wait while the daemon is silent and this client holds: asleep on daemon_hold_
    // (woken by the watch thread), off the launch path's common case.
    void hold_while_daemon_silent();
    std::uint64_t name_hash(CUfunction function);
    // The identity of `graph` from its kernel nodes; 0 when the driver cannot list them. Fills
    // `nodes` with each kernel node's kernel key (for later changes to single nodes).
    // `sightings`, when given, gets each kernel node as seen (to learn an unprofiled graph).
    using NodeKeys = std::unordered_map<CUgraphNode, std::uint64_t>;
    std::uint64_t identify_graph(CUgraph graph, NodeKeys* nodes,
                                 std::vector<KernelSighting>* sightings = nullptr);
    std::uint64_t node_key(const CUDA_KERNEL_NODE_PARAMS_v2& params);
    // The slot remembering `exec`, claimed when `claim` is set; nullptr when there is none.
    struct GraphSlot;
    GraphSlot* graph_slot(CUgraphExec exec, bool claim);
    void report_unknown(CUfunction function, const LaunchShape& shape);
    // A launch the offline profile does not list: its learned figures when there are enough
    // samples (the kernel then counts as known), and whether this launch is timed for learning.
    void use_learned(LearnedEntry* entry, LaunchTicket* ticket, bool* sample);
    // Decides whether this launch is timed (for learning, or for the interference figure) and
    // starts the timing on its stream: the last thing before the launch. `clean`: a duration
    // measured now would be one alone (see learns_alone).
    void start_sampling(LaunchTicket* ticket, bool for_learning, bool clean,
                        std::uint64_t launch_count, bool graph);
    // Whether a BE client has unfinished work: an HP duration measured then is not one alone.
    bool be_has_work(std::uint64_t now_ns) const;
    // HP, the first launch of a request: counts it, has the RequestTimer time it if free (with
    // whether it ran alone), and asks BE to stand aside while the timer lacks requests alone.
    void start_request(LaunchTicket* ticket);
    // HP, a launch of unlearned `entry` to be timed for learning: whether its duration would be
    // one alone. If BE work may run beside it, asks BE to stand aside (a sampling hold, bounded
    // per entry and per client) so that a later launch of it is timed alone; a launch timed
    // while the hold keeps every BE launch behind a closed gate extends the hold over itself.
    bool learns_alone(const LearnedEntry& entry, std::uint64_t now_ns);
    // Extends the sampling hold to `now_ns` + kSamplingHoldNs; false when this client's hold
    // budget is spent.
    bool extend_sampling_hold(std::uint64_t now_ns);
    bool stream_is_capturing(CUstream own_stream) const;
    void ensure_completion_tracking();
    // Registers this client's completion words with the driver (once); false if it cannot.
    bool ensure_completion_words();
    CUstream redirect_legacy_launch();
    // After a moved launch: the legacy stream waits for it, as if it had run there.
    void join_legacy_stream();
    // Blocks until the policy admits `kernel`; counts every reason it waited for.
    Reason wait_for_turn(const KernelInfo& kernel, bool* waited);
    // BE under be_gate kGpu: registers the gate page with the driver (once); false if it cannot.
    bool ensure_gate_mapped();
    // BE under be_gate kGpu: puts a wait on this client's gate before `kernel` on `stream` when
    // the work since the stream's last wait would pass the queue limit. False if the driver
    // refused the wait (the launch is then gated on the CPU).
    // `seq` is the launch's sequence number, reserved before; `*guard_seq` the launch whose wait
    // guards it (InflightEntry::guard_seq), 0 when not known.
    bool gate_on_gpu(CUstream own_stream, const KernelInfo& kernel, std::uint64_t seq,
                     bool* waited, std::uint64_t* guard_seq);
    // HP under be_gate kGpu, after publishing a launch: closes every BE gate, wakes the keeper;
    // opens them instead when the keeper is gone (no heartbeat since kKeeperStaleNs).
    void close_be_gates(std::uint64_t now_ns);
    std::uint64_t track_launch(const KernelInfo& kernel, std::uint64_t key, std::uint64_t now_ns,
                               bool gpu_written, bool graph, std::uint64_t seq = 0,
                               std::uint64_t guard_seq = 0);
    void mark_finished_by_cpu(std::uint64_t seq);
    void write_trace(const LaunchTicket& ticket);

    // A lock-free cache from CUfunction to the hash of its name, filled on first sight.
    struct FunctionSlot {
        std::atomic<CUfunction> function{nullptr};
        std::atomic<std::uint64_t> name_hash{0};
        std::atomic<std::uint32_t> unknown_reported{0};
        std::atomic<std::uint32_t> generation{0};  // name_generation_ when name_hash was read
    };
    static constexpr std::uint32_t kFunctionSlots = 16384;
    // Slots a handle-keyed cache probes before giving up (then: correct, just uncached).
    static constexpr std::uint32_t kNeighbourhood = 64;
    static constexpr auto function_of = [](FunctionSlot& slot) -> std::atomic<CUfunction>& {
        return slot.function;
    };
    // A lock-free map from an executable graph to its identity (0: not identified).
    struct GraphSlot {
        std::atomic<CUgraphExec> exec{nullptr};
        std::atomic<std::uint64_t> key{0};
        std::atomic<SegmentedGraph*> segments{nullptr};  // owned by segmented_graphs_
    };
    static constexpr std::uint32_t kGraphExecSlots = 1024;
    // Per stream: predicted BE work enqueued since the stream's last gate wait (be_gate kGpu).
    // A stream handle reused after its stream was destroyed inherits the count: its first launches
    // may go without a wait of their own, never more than the queue limit of work.
    struct StreamBudget {
        std::atomic<CUstream> stream{nullptr};
        // Profiled work launched since the stream's last gate wait, with kWaitPending set while a
        // launch that decided to wait has not yet put its wait on the stream.
        std::atomic<std::uint64_t> since_wait_ns{0};
        std::atomic<std::uint64_t> last_guard{0};  // the launch that put the stream's last wait
    };
    static constexpr std::uint64_t kWaitPending = 1ULL << 63;
    static constexpr std::uint32_t kStreamSlots = 256;
    StreamBudget* stream_budget(CUstream stream);

    std::atomic<bool> active_{false};
    // Non-zero while this BE client holds its new launches for a silent daemon; the launch path
    // reads it once per launch (one load, no lock) and sleeps on it only when it is set.
    std::atomic<std::uint32_t> daemon_hold_{0};
    std::atomic<std::uint64_t> held_launches_{0};  // launches that waited on daemon_hold_
    bool hold_when_daemon_gone_ = false;
    std::uint64_t daemon_gone_hold_ns_ = 0;
    RunMapping mapping_;
    RunView view_;
    std::uint32_t index_ = 0;
    Policy policy_ = Policy::kPassthrough;
    Role role_ = Role::kBestEffort;
    bool tracks_ = false;
    bool tracing_ = false;
    bool has_profile_ = false;
    ClientSlot* slot_ = nullptr;

    std::once_flag completion_once_;
    std::atomic<bool> completion_ready_{false};  // completion_once_ has run (the launch path's check)
    std::once_flag words_once_;
    bool words_mapped_ = false;
    std::atomic<std::uint32_t> completion_mode_{static_cast<std::uint32_t>(CompletionMode::kNone)};
    CUdeviceptr completion_device_base_ = 0;

    std::once_flag priority_once_;
    int least_priority_ = 0;
    int greatest_priority_ = 0;
    bool priority_known_ = false;

    std::mutex redirect_mutex_;  // taken once, when the redirect stream is created
    CUcontext redirect_context_ = nullptr;
    CUstream redirect_stream_ = nullptr;
    std::atomic<bool> redirect_ready_{false};
    std::atomic<bool> redirect_failed_{false};
    std::atomic<bool> redirect_used_{false};

    bool gpu_gate_ = false;  // BE client of a gating policy with be_gate kGpu
    std::uint64_t gate_spacing_ns_ = 0;  // `quota`: work between two gate waits; 0: the queue limit
    // Profiled work between two gate waits on a stream or in a graph: under `quota` the fixed
    // spacing, otherwise the run's queue limit as it is now (a daemon sets it as HP joins).
    // BE work let through one gate opening before the next wait: a quota's own spacing, else
    // the queue limit, but never under the run's be_gate_spacing_ns.
    std::uint64_t gate_spacing() const {
        if (gate_spacing_ns_ != 0) return gate_spacing_ns_;
        const RunDecisions& decisions = view_.decisions();
        return std::max(decisions.queue_limit_ns, decisions.be_gate_spacing_ns);
    }
    static_assert(kMaxClients <= 32, "RunDecisions::be_mask holds a bit per client");
    std::once_flag gate_once_;
    bool gate_mapped_ = false;
    std::atomic<bool> gate_failed_{false};
    CUdeviceptr gate_device_ = 0;  // this client's gate word, as the GPU addresses it
    StreamBudget stream_budgets_[kStreamSlots];

    MemoryLedger memory_;

    bool learning_ = false;  // learns kernels its profile lacks (every client whose launches are tracked)
    // HP: sampling-hold time this client has asked for so far, against its budget.
    std::atomic<std::uint64_t> hold_granted_ns_{0};
    // A sampling hold lasts this long past the latest HP launch that asked for it or was timed
    // under it: long enough for BE work let through before it to drain and for the HP's next
    // request (at 10 per second or more) to come while it holds.
    static constexpr std::uint64_t kSamplingHoldNs = kMaxSamplingHoldNs;
    // The most BE time one HP client may hold, over its life: an HP whose kernels keep changing
    // shape (new keys forever) must not starve BE. Beyond it HP work is learned only when BE idles.
    static constexpr std::uint64_t kSamplingHoldBudgetNs = 3'000'000'000;
    KernelLearner learner_;
    LaunchSampler sampler_;
    RequestTimer request_timer_;  // HP: its requests timed whole
    // CUDA graphs gated inside (graph_gating.cpp): whether this client's graphs get gate waits;
    // the waits for `graph` (at `fixed` positions, else from the profile), nullptr or why not;
    // taking them out again; counting a graph left ungated (warned once).
    bool gates_graphs();
    const char* gate_graph(CUgraph graph, const std::vector<std::uint32_t>* fixed,
                           std::vector<std::uint32_t>* positions, std::vector<CUgraphNode>* waits);
    void restore_graph(const std::vector<CUgraphNode>& waits);
    void count_ungated_graph(const char* why);
    // Splitting BE graphs (graph_segments.cpp): whether this client's graphs are split; a kernel
    // node's profiled or learned work; the split of `exec`, made from `graph`; dropping it for a
    // change orion cannot follow (counted as ungated, with why).
    bool segments_graphs() const;
    KernelInfo node_work(const CUDA_KERNEL_NODE_PARAMS_v2& params);
    void segment_graph(CUgraphExec exec, CUgraph graph,
                       unsigned long long flags);  // NOLINT(google-runtime-int)
    void drop_segments(CUgraphExec exec, const char* why);
    std::mutex gated_graphs_mutex_;  // gated_graphs_ and segmented_graphs_
    std::unordered_map<CUgraphExec, std::unique_ptr<SegmentedGraph>> segmented_graphs_;
    // Each executable instantiated with waits: before which kernel nodes (walk order).
    std::unordered_map<CUgraphExec, std::vector<std::uint32_t>> gated_graphs_;
    std::atomic<bool> graph_gate_warned_{false};
    std::atomic<bool> graph_restore_warned_{false};
    // An HP's newest launch call (monotonic ns; start_sampling) and the return of its newest
    // wait for a stream (waited()): a launch kRequestGapNs or more after both starts a request,
    // unless the request the RequestTimer follows goes on. So a decoder waiting for each step
    // before it launches the next is one request however long a step waits for the GPU. 1 ms:
    // longer than the gaps inside one request of the suite's services (an eager encoder's
    // launches, the host's work between a decoder's steps), shorter than the idle between their
    // requests at the rates they serve.
    static constexpr std::uint64_t kRequestGapNs = 1'000'000;
    std::atomic<std::uint64_t> hp_last_call_ns_{0};
    std::atomic<std::uint64_t> hp_last_wait_ns_{0};

    // Each identified executable's kernel nodes and their keys: set-up, not the launch path.
    std::mutex graph_nodes_mutex_;
    std::unordered_map<CUgraphExec, NodeKeys> graph_nodes_;

    std::atomic<std::uint32_t> name_generation_{0};  // bumped by every module/library unload
    FunctionSlot functions_[kFunctionSlots];
    GraphSlot graph_execs_[kGraphExecSlots];
};

}  // namespace orion
