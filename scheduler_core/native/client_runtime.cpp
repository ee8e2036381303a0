#include "client_runtime.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "clock.h"
#include "driver.h"
#include "futex.h"
#include "hooked_symbols.h"
#include "kernel_key.h"
#include "tracking.h"

namespace orion {
namespace {

constexpr std::uint64_t kRingMask = kInflightSlots - 1;
// A blocked BE launch waits for a launch in flight to finish. Every launch carries its profiled
// expected end, so the client sleeps until shortly before the earliest one, spins briefly around
// it (a BE kernel admitted microseconds late leaves the GPU idle), and only when the prediction
// has clearly failed falls back to sleeping with exponential back-off: no core burns for long.
constexpr std::uint64_t kSpinNs = 20'000;            // always spin this long first
constexpr std::uint64_t kSpinLeadNs = 15'000;        // wake this long before an expected end
constexpr std::uint64_t kSpinTailNs = 200'000;       // spin at most this long past it
constexpr std::uint64_t kMaxPredictedSleepNs = 2'000'000;
constexpr std::uint64_t kFirstSleepNs = 2'000;
constexpr std::uint64_t kMaxSleepNs = 50'000;
// How often a sleeping BE client checks that the peers it waits on are still alive.
constexpr std::uint64_t kReapIntervalNs = 2'000'000;

void log_message(const char* text) {
    // One write, so messages of concurrent processes do not interleave mid-line.
    std::string line = std::string("orion: ") + text + "\n";
    [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
}

bool env_flag(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Sleeps with this thread's timer slack cut to 1 us (Linux defaults to 50 us), so a waiting BE
// launch wakes when asked to. Slack is per thread: the rest of the program is unaffected.
void precise_sleep(std::uint64_t ns) {
    thread_local bool slack_set = false;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = true;
    }
    timespec ts{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    nanosleep(&ts, nullptr);
}

bool is_legacy_stream(CUstream stream, int variant) {
    return stream == cu_stream_legacy() || (stream == nullptr && variant == hooks::kLegacy);
}

void atfork_child() { ClientRuntime::instance().disable_in_child(); }

}  // namespace

namespace {
std::atomic<bool> g_created{false};  // instance() has run: the process-wide runtime exists
}  // namespace

ClientRuntime& ClientRuntime::instance() {
    // Never destroyed: hooks may still run while other libraries' destructors execute at exit.
    static ClientRuntime* runtime = [] {
        auto* made = new ClientRuntime();
        g_created.store(true, std::memory_order_release);
        return made;
    }();
    return *runtime;
}

bool ClientRuntime::created() { return g_created.load(std::memory_order_acquire); }

bool ClientRuntime::attaches_at_load() {
    const char* run = std::getenv("ORION_RUN");
    return run == nullptr || run[0] == '\0' || env_flag("ORION_STRICT");
}

ClientRuntime::ClientRuntime() { attach_from_environment(); }

void ClientRuntime::attach_from_environment() {
    const char* run = std::getenv("ORION_RUN");
    if (run == nullptr || run[0] == '\0') return;  // not part of a run: pass everything through
    const bool strict = env_flag("ORION_STRICT");
    auto fail = [strict](const std::string& why) {
        log_message((why + (strict ? "; exiting (ORION_STRICT is set)" : "; passing every call through")).c_str());
        if (strict) _exit(70);
    };
    const char* client_text = std::getenv("ORION_CLIENT");
    char* end = nullptr;
    const long client = client_text != nullptr ? std::strtol(client_text, &end, 10) : -1;
    if (client_text == nullptr || end == client_text || *end != '\0' || client < 0 ||
        client >= static_cast<long>(kMaxClients)) {
        fail("ORION_RUN is set but ORION_CLIENT is missing or not a client index");
        return;
    }
    std::string error;
    RunMapping mapping = RunMapping::attach(run, &error);
    if (!mapping.valid()) {
        fail("cannot join run: " + error);
        return;
    }
    RunView view = mapping.view();
    if (view.header().ready.load(std::memory_order_acquire) == 0) {
        fail(std::string("run '") + run + "' is not ready (its controller has not published it)");
        return;
    }
    const auto index = static_cast<std::uint32_t>(client);
    if (index >= view.header().client_count) {
        fail("client index " + std::to_string(index) + " is not configured in run '" + run + "'");
        return;
    }
    ClientSlot& slot = view.client(index);
    auto expected = static_cast<std::uint32_t>(ClientState::kRegistered);
    if (!slot.state.compare_exchange_strong(expected,
                                            static_cast<std::uint32_t>(ClientState::kAttached),
                                            std::memory_order_acq_rel)) {
        // Typically a helper process (a compiler worker) that inherited its parent's environment.
        if (env_flag("ORION_DEBUG")) log_message("client slot already taken; this process passes through");
        return;
    }
    slot.pid.store(static_cast<std::int32_t>(getpid()), std::memory_order_release);
    mapping_ = std::move(mapping);
    view_ = mapping_.view();
    index_ = index;
    slot_ = &slot;
    policy_ = static_cast<Policy>(view_.header().policy);
    role_ = static_cast<Role>(slot.role);
    // GPU-time shares hold BE clients under any policy with a library that gates (priority too).
    tracks_ = policy_tracks_launches(policy_) ||
              (view_.header().quotas != 0 && role_ == Role::kBestEffort);
    tracing_ = view_.header().trace_capacity != 0;
    has_profile_ = slot.kernel_count != 0;
    // Under `quota` every client is a peer whose work the gate keeper grants.
    gpu_gate_ = tracks_ && (role_ == Role::kBestEffort || policy_ == Policy::kQuota) &&
                view_.header().be_gate == static_cast<std::uint32_t>(BeGate::kGpu);
    // Work between two gate waits: the queue limit, whose reason is HP latency; under `quota`,
    // where none rides on it, a tenth of a slice (a wait per tiny kernel costs the GPU itself).
    gate_spacing_ns_ = policy_ == Policy::kQuota
                           ? quota_wait_spacing_ns(view_.header().quota_window_ns)
                           : view_.header().queue_limit_ns;
    memory_.attach(&slot);
    pthread_atfork(nullptr, nullptr, atfork_child);
    active_.store(true, std::memory_order_release);
    if (view_.header().open_slots != 0) start_daemon_watch();
    if (env_flag("ORION_DEBUG")) {
        log_message((std::string("client ") + std::to_string(index_) + " attached, policy " +
                     policy_name(policy_) + ", role " +
                     (role_ == Role::kHighPriority ? "hp" : "be"))
                        .c_str());
    }
}

void ClientRuntime::start_daemon_watch() {
    std::thread([this] {
        constexpr timespec kPeriod{0, 200'000'000};
        while (active()) {
            nanosleep(&kPeriod, nullptr);
            const RunHeader& header = view_.header();
            if (header.shutdown.load(std::memory_order_acquire) != 0) {
                leave_daemon("the daemon stopped");
                return;
            }
            const std::uint64_t beat = header.daemon_heartbeat_ns.load(std::memory_order_acquire);
            if (beat != 0 && monotonic_ns() > beat + kDaemonStaleNs) {
                leave_daemon("the daemon fell silent");
                return;
            }
        }
    }).detach();
}

void ClientRuntime::leave_daemon(const char* why) {
    if (!active_.exchange(false, std::memory_order_acq_rel)) return;
    // Work already behind this client's gate on the GPU runs; nothing new waits.
    view_.gates().gates[index_].word.fetch_or(kGateOpen, std::memory_order_acq_rel);
    log_message((std::string(why) + "; client '" + slot_->name + "' runs ungated").c_str());
}

void ClientRuntime::detach() {
    if (slot_ == nullptr || !active()) return;
    if (slot_->pid.load(std::memory_order_relaxed) != static_cast<std::int32_t>(getpid())) return;
    auto expected = static_cast<std::uint32_t>(ClientState::kAttached);
    if (slot_->state.compare_exchange_strong(expected,
                                             static_cast<std::uint32_t>(ClientState::kExited),
                                             std::memory_order_acq_rel)) {
        slot_->memory.used.store(0, std::memory_order_release);  // freed with the process
    }
}

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
    CUfunction function =
        params.func != nullptr ? params.func : reinterpret_cast<CUfunction>(params.kern);
    if (function == nullptr) return 0;
    return kernel_key(name_hash(function), params.gridDimX, params.gridDimY, params.gridDimZ,
                      params.blockDimX, params.blockDimY, params.blockDimZ);
}

std::uint64_t ClientRuntime::identify_graph(CUgraph graph, NodeKeys* nodes_out) {
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
    const std::uint64_t key = identify_graph(graph, &nodes);
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

bool ClientRuntime::stream_is_capturing(CUstream own_stream) const {
    const auto fn = driver::helpers().stream_is_capturing;
    if (fn == nullptr) return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    // Only a stream the driver says is capturing passes through ungated. A failed query (an
    // invalidated capture, a bad handle) must not open the gate: the launch is gated and tracked
    // as usual, and if the driver then refuses it too, it is marked finished at once.
    return fn(own_stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool ClientRuntime::ensure_completion_words() {
    std::call_once(words_once_, [this] {
        const driver::Helpers& h = driver::helpers();
        void* words = view_.completion(index_);
        // Register just this client's page-aligned block of completion words, so the GPU can
        // write a launch's sequence number into shared memory the moment the launch finishes.
        const std::size_t bytes = sizeof(std::uint64_t) * kInflightSlots;
        words_mapped_ =
            h.mem_host_register != nullptr && h.mem_host_get_device_pointer != nullptr &&
            h.stream_write_value64 != nullptr &&
            h.mem_host_register(words, bytes,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
                CUDA_SUCCESS &&
            h.mem_host_get_device_pointer(&completion_device_base_, words, 0) == CUDA_SUCCESS;
    });
    return words_mapped_;
}

bool ClientRuntime::ensure_gate_mapped() {
    std::call_once(gate_once_, [this] {
        const driver::Helpers& h = driver::helpers();
        GateBlock& block = view_.gates();
        CUdeviceptr base = 0;
        gate_mapped_ =
            h.mem_host_register != nullptr && h.mem_host_get_device_pointer != nullptr &&
            h.stream_wait_value32 != nullptr &&
            h.mem_host_register(&block, kPageBytes,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
                CUDA_SUCCESS &&
            h.mem_host_get_device_pointer(&base, &block, 0) == CUDA_SUCCESS;
        if (gate_mapped_) {
            const auto offset = reinterpret_cast<unsigned char*>(&block.gates[index_].word) -
                                reinterpret_cast<unsigned char*>(&block);
            gate_device_ = base + static_cast<CUdeviceptr>(offset);
        } else {
            log_message("cannot map the BE gate for the GPU; held launches wait in their thread");
        }
    });
    return gate_mapped_;
}

ClientRuntime::StreamBudget* ClientRuntime::stream_budget(CUstream stream) {
    // The legacy stream's handle is 0, which marks a free slot here: use its explicit handle.
    if (stream == nullptr) stream = cu_stream_legacy();
    // nullptr when the table is full: every launch on this stream gets a wait of its own
    auto stream_of = [](StreamBudget& slot) -> std::atomic<CUstream>& { return slot.stream; };
    return find_or_claim_slot(stream_budgets_, kStreamSlots, kStreamSlots, handle_start(stream),
                              stream, stream_of);
}

bool ClientRuntime::gate_on_gpu(CUstream own_stream, const KernelInfo& kernel, bool* waited) {
    std::uint64_t work = kernel.duration_ns;
    if (!kernel.known && policy_ == Policy::kQuota) {
        // No profile: what its launches measured on the GPU (the keeper's figure), once there
        // is one. The run's unknown-kernel duration may be far off, and a holder overruns its
        // closed gate by as many launches as fit in the spacing.
        const std::uint64_t measured = slot_->quota.launch_ns.load(std::memory_order_relaxed);
        if (measured != 0) work = measured;
    }
    work = std::max<std::uint64_t>(work, 1);
    *waited = false;
    // The first launch on a stream, and every launch that would take the work past one gate over
    // the spacing (the queue limit under reef and orion), waits on the gate: an HP request never
    // finds more than the limit of BE work let through by one opening (the same bound the CPU
    // gate keeps).
    const std::uint64_t spacing = gate_spacing_ns_;
    StreamBudget* budget = stream_budget(own_stream);
    // Threads may share a stream. A launch decides in one compare-and-swap, so no two launches
    // decide from the same count, and the one that will put a wait marks the count until the wait
    // is on the stream: a launch seeing the mark waits too, or its kernel could reach the stream
    // ahead of every wait and run beside HP while the gate is closed.
    bool must_wait = true;
    if (budget != nullptr) {
        std::uint64_t seen = budget->since_wait_ns.load(std::memory_order_acquire);
        std::uint64_t next = 0;
        do {
            const std::uint64_t count = seen & ~kWaitPending;
            must_wait = (seen & kWaitPending) != 0 || count == 0 || count + work > spacing;
            next = must_wait ? (kWaitPending | work) : seen + work;
        } while (!budget->since_wait_ns.compare_exchange_weak(
            seen, next, std::memory_order_acq_rel, std::memory_order_acquire));
    }
    if (!must_wait) return true;
    const CUresult result = driver::helpers().stream_wait_value32(own_stream, gate_device_,
                                                                  kGateOpen,
                                                                  CU_STREAM_WAIT_VALUE_AND);
    if (result != CUDA_SUCCESS) {
        if (budget != nullptr) budget->since_wait_ns.store(0, std::memory_order_release);
        if (!gate_failed_.exchange(true, std::memory_order_relaxed)) {
            log_message("the driver refused a GPU-side gate wait; held launches wait in their thread");
        }
        return false;
    }
    // On the stream now: later launches may go behind it without a wait of their own. (Another
    // thread's wait may still be on its way; its kernel is behind that wait whatever this does.)
    if (budget != nullptr) budget->since_wait_ns.fetch_and(~kWaitPending, std::memory_order_release);
    slot_->stats.gate_waits.fetch_add(1, std::memory_order_relaxed);
    *waited = true;
    return true;
}

void ClientRuntime::close_be_gates(std::uint64_t now_ns) {
    GateBlock& block = view_.gates();
    const std::uint64_t heartbeat = block.keeper_heartbeat_ns.load(std::memory_order_acquire);
    // Without a live keeper nobody would open what HP closes: leave BE ungated instead.
    const bool keeper_alive = heartbeat != 0 && now_ns < heartbeat + kKeeperStaleNs;
    // Clients of an open run join and leave: the controller keeps the BE set in the header.
    const std::uint32_t be_clients = view_.header().be_mask.load(std::memory_order_acquire);
    for (std::uint32_t mask = be_clients; mask != 0; mask &= mask - 1) {
        const auto client = static_cast<std::uint32_t>(__builtin_ctz(mask));
        if (keeper_alive) {
            close_gate(block.gates[client].word);
        } else {
            block.gates[client].word.fetch_or(kGateOpen, std::memory_order_acq_rel);
        }
    }
    if (!keeper_alive) return;
    block.hp_activity.fetch_add(1, std::memory_order_seq_cst);
    // Only when the keeper sleeps (HP was idle): one system call per HP burst, not per launch.
    if (block.keeper_sleeping.load(std::memory_order_seq_cst) != 0) {
        futex_wake_all(block.hp_activity);
    }
}

void ClientRuntime::ensure_completion_tracking() {
    std::call_once(completion_once_, [this] {
        // The HP client estimates its finish times unless the run asks for GPU writes: a write is
        // one more driver call after every HP launch, on the path whose latency the scheduler is
        // there to protect. BE clients always ask for writes (exact BE queue accounting). Graph
        // launches get a written completion in either mode (see track_graph below).
        // Under `quota` every client's work is timed by its written completions.
        const bool gpu_writes =
            role_ != Role::kHighPriority || policy_ == Policy::kQuota ||
            view_.header().hp_completion != static_cast<std::uint32_t>(CompletionMode::kEstimate);
        CompletionMode mode = CompletionMode::kEstimate;
        if (gpu_writes) {
            if (ensure_completion_words()) {
                mode = CompletionMode::kGpuWrite;
            } else {
                log_message("cannot map completion words for the GPU; estimating finish times");
            }
        }
        completion_mode_.store(static_cast<std::uint32_t>(mode), std::memory_order_release);
        slot_->completion_mode.store(static_cast<std::uint32_t>(mode), std::memory_order_release);
    });
}

CUstream ClientRuntime::redirect_legacy_launch() {
    if (redirect_failed_.load(std::memory_order_relaxed)) return nullptr;
    const driver::Helpers& h = driver::helpers();
    if (!redirect_ready_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(redirect_mutex_);
        if (!redirect_ready_.load(std::memory_order_relaxed)) {
            auto create = hooks::real_cuStreamCreateWithPriority(hooks::kLegacy);
            CUcontext context = nullptr;
            // A blocking stream: the legacy default stream's implicit synchronisation keeps
            // every later legacy-stream operation ordered after the moved launches.
            if (create == nullptr || h.ctx_get_current == nullptr || h.event_record == nullptr ||
                h.stream_wait_event == nullptr || h.event_create == nullptr ||
                h.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr ||
                create(&redirect_stream_, CU_STREAM_DEFAULT, stream_priority(0)) != CUDA_SUCCESS) {
                redirect_failed_.store(true, std::memory_order_relaxed);
                return nullptr;
            }
            redirect_context_ = context;
            redirect_ready_.store(true, std::memory_order_release);
        }
    }
    CUcontext context = nullptr;
    if (h.ctx_get_current(&context) != CUDA_SUCCESS || context != redirect_context_) return nullptr;
    // Each thread records its own event, so concurrent launches need no lock.
    thread_local CUevent event = nullptr;
    if (event == nullptr && h.event_create(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        event = nullptr;
        return nullptr;
    }
    // The launch must still wait for everything the legacy stream would have waited for.
    if (h.event_record(event, cu_stream_legacy()) != CUDA_SUCCESS ||
        h.stream_wait_event(redirect_stream_, event, 0) != CUDA_SUCCESS) {
        return nullptr;
    }
    redirect_used_.store(true, std::memory_order_release);
    slot_->stats.redirected_launches.fetch_add(1, std::memory_order_relaxed);
    return redirect_stream_;
}

int ClientRuntime::stream_priority(int requested) {
    if (!sets_priorities()) return requested;
    std::call_once(priority_once_, [this] {
        const auto fn = driver::helpers().ctx_get_stream_priority_range;
        priority_known_ =
            fn != nullptr && fn(&least_priority_, &greatest_priority_) == CUDA_SUCCESS;
    });
    if (!priority_known_) return requested;
    return role_ == Role::kHighPriority ? greatest_priority_ : least_priority_;
}

void ClientRuntime::count_prioritised_stream() {
    if (slot_ != nullptr) slot_->stats.streams_prioritised.fetch_add(1, std::memory_order_relaxed);
}

Reason ClientRuntime::wait_for_turn(const KernelInfo& kernel, bool* waited) {
    const std::uint64_t start = monotonic_ns();
    std::uint64_t now = start;
    std::uint64_t last_reap = start;
    std::uint64_t sleep = kFirstSleepNs;
    std::uint32_t wait_reasons = 0;  // bit per Reason this launch waited for
    Snapshot snapshot;
    for (;;) {
        gather_snapshot(view_, now, kernel.duration_ns, &snapshot);
        Decision decision = decide(policy_, role_, kernel, snapshot);
        // The daemon of an open run stopped or died while this launch waited: it goes now.
        if (!active()) decision = Decision{true, Reason::kNotGated};
        if (decision.launch) {
            *waited = wait_reasons != 0;
            if (*waited) {
                slot_->stats.blocked_launches.fetch_add(1, std::memory_order_relaxed);
                slot_->stats.blocked_ns.fetch_add(now - start, std::memory_order_relaxed);
                for (int r = 0; r < static_cast<int>(Reason::kCount); ++r) {
                    if (wait_reasons & (1U << r)) {
                        slot_->stats.reasons[r].fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
            return decision.reason;
        }
        wait_reasons |= 1U << static_cast<unsigned>(decision.reason);
        const std::uint64_t expected = snapshot.earliest_end_ns;
        const bool spin_phase = now - start < kSpinNs;
        if (!spin_phase && now - last_reap > kReapIntervalNs) {
            // A peer killed while its launches were in flight must not hold anyone up.
            reap_dead_peers(view_, index_);
            last_reap = now;
        }
        if (!spin_phase && expected > now + kSpinLeadNs) {
            precise_sleep(std::min(expected - kSpinLeadNs - now, kMaxPredictedSleepNs));
        } else if (spin_phase || (expected != 0 && now < expected + kSpinTailNs)) {
            for (int i = 0; i < 32; ++i) cpu_relax();
        } else {
            precise_sleep(sleep);
            sleep = std::min(sleep * 2, kMaxSleepNs);
        }
        now = monotonic_ns();
    }
}

std::uint64_t ClientRuntime::track_launch(const KernelInfo& kernel, std::uint64_t key,
                                          std::uint64_t now_ns, bool gpu_written, bool graph) {
    ensure_completion_tracking();
    const std::uint64_t seq = slot_->next_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    InflightEntry& entry = view_.inflight(index_)[seq & kRingMask];
    std::uint64_t previous_end = slot_->last_expected_end_ns.load(std::memory_order_relaxed);
    std::uint64_t expected_end = 0;
    do {
        expected_end = std::max(now_ns, previous_end) + kernel.duration_ns;
    } while (!slot_->last_expected_end_ns.compare_exchange_weak(previous_end, expected_end,
                                                                std::memory_order_relaxed));
    InflightLaunch launch;
    launch.key = key;
    launch.launch_ns = now_ns;
    launch.expected_end_ns = expected_end;
    launch.duration_ns = kernel.duration_ns;
    launch.sm_needed = kernel.sm_needed;
    launch.kernel_class = static_cast<std::uint8_t>(kernel.kernel_class);
    launch.known = kernel.known;
    launch.gpu_written = gpu_written;
    launch.graph = graph;
    write_inflight(entry, seq, launch);
    std::uint64_t published = slot_->published_seq.load(std::memory_order_relaxed);
    while (published < seq && !slot_->published_seq.compare_exchange_weak(
                                  published, seq, std::memory_order_release,
                                  std::memory_order_relaxed)) {
    }
    slot_->stats.tracked_launches.fetch_add(1, std::memory_order_relaxed);
    return seq;
}

void ClientRuntime::mark_finished_by_cpu(std::uint64_t seq) {
    view_.completion(index_)[seq & kRingMask].store(seq, std::memory_order_release);
}

LaunchTicket ClientRuntime::before_launch(const LaunchShape& shape, CUstream stream, int variant) {
    LaunchTicket ticket;
    ticket.stream = stream;
    ticket.own_stream =
        (stream == nullptr && variant == hooks::kPerThread) ? cu_stream_per_thread() : stream;
    ticket.enqueue_ns = monotonic_ns();
    ticket.trace = tracing_;
    slot_->stats.launches.fetch_add(1, std::memory_order_relaxed);
    if (shape.function == nullptr) {
        slot_->stats.graph_launches.fetch_add(1, std::memory_order_relaxed);
    }
    const bool may_redirect = role_ == Role::kHighPriority && policy_sets_priorities(policy_) &&
                              !shape.stream_fixed && is_legacy_stream(stream, variant);
    if ((tracks_ || may_redirect) && stream_is_capturing(ticket.own_stream)) {
        // Work captured into a graph runs later, as a graph launch; adding or gating now would
        // change the graph. Pass it through untouched.
        slot_->stats.capture_launches.fetch_add(1, std::memory_order_relaxed);
        ticket.trace = false;
        return ticket;
    }
    const RunHeader& header = view_.header();
    ticket.kernel.sm_needed = header.sm_count;
    ticket.kernel.duration_ns = header.unknown_duration_ns;
    if (shape.function != nullptr && (tracks_ || tracing_ || has_profile_)) {
        ticket.key = kernel_key(name_hash(shape.function), shape.grid[0], shape.grid[1],
                                shape.grid[2], shape.block[0], shape.block[1], shape.block[2]);
        if (const KernelEntry* entry = view_.find_kernel(index_, ticket.key)) {
            ticket.kernel.known = true;
            ticket.kernel.sm_needed = entry->sm_needed;
            ticket.kernel.kernel_class = static_cast<KernelClass>(entry->kernel_class);
            ticket.kernel.duration_ns = entry->duration_ns;
        } else if (has_profile_) {
            report_unknown(shape.function, shape);
        }
    } else if (shape.function == nullptr) {
        // A graph: known when its kernel nodes match a graph of the profile; it then needs the
        // SMs of its widest kernel for its measured wall time. Otherwise all SMs, and (see
        // track_launch) it counts as running until the GPU writes its completion.
        const GraphSlot* exec = graph_slot(shape.graph, false);
        ticket.key = exec != nullptr ? exec->key.load(std::memory_order_acquire) : 0;
        const GraphEntry* entry = ticket.key != 0 ? view_.find_graph(index_, ticket.key) : nullptr;
        if (entry != nullptr) {
            ticket.kernel.known = true;
            ticket.kernel.sm_needed = entry->sm_needed;
            ticket.kernel.kernel_class = static_cast<KernelClass>(entry->kernel_class);
            ticket.kernel.duration_ns = entry->duration_ns;
        } else if (has_profile_) {
            slot_->stats.unknown_launches.fetch_add(1, std::memory_order_relaxed);
            slot_->stats.unknown_graph_launches.fetch_add(1, std::memory_order_relaxed);
        }
    }
    if (may_redirect) {
        if (CUstream moved = redirect_legacy_launch()) {
            ticket.stream = moved;
            ticket.own_stream = moved;
            ticket.redirected = true;
        }
    }
    bool waited = false;
    if (tracks_ && (role_ == Role::kBestEffort || policy_ == Policy::kQuota)) {
        // Under the GPU-side gate the launch returns at once (the GPU holds it); if the gate
        // cannot be used, it waits here as under the CPU gate.
        if (gpu_gate_ && !gate_failed_.load(std::memory_order_relaxed) && ensure_gate_mapped() &&
            gate_on_gpu(ticket.own_stream, ticket.kernel, &ticket.gate_wait)) {
            ticket.reason = Reason::kGpuGate;
        } else {
            ticket.reason = wait_for_turn(ticket.kernel, &waited);
        }
    } else {
        ticket.reason = role_ == Role::kHighPriority ? Reason::kHighPriority : Reason::kNotGated;
    }
    slot_->stats.reasons[static_cast<int>(ticket.reason)].fetch_add(1, std::memory_order_relaxed);
    ticket.launch_ns = (waited || tracing_) ? monotonic_ns() : ticket.enqueue_ns;
    if (tracks_) {
        // A graph's length is unknown at its launch (it may run for milliseconds), so peers must
        // not take it as finished at an estimated end: the GPU writes its completion, one write
        // per graph, also for a client that estimates its kernels' ends. Without mapped words
        // it is estimated like a kernel (and the client's log says why).
        ticket.gpu_written = shape.function == nullptr && ensure_completion_words();
        ticket.seq = track_launch(ticket.kernel, ticket.key, ticket.launch_ns, ticket.gpu_written,
                                  shape.function == nullptr);
        // Published first, then the gates closed: the keeper's open-after-check protocol
        // (shared_state.h, GateBlock) relies on that order.
        if (role_ == Role::kHighPriority && policy_holds_be_for_hp(policy_) &&
            header.be_gate == static_cast<std::uint32_t>(BeGate::kGpu)) {
            close_be_gates(ticket.launch_ns);
        }
    }
    return ticket;
}

void ClientRuntime::join_legacy_stream() {
    const driver::Helpers& h = driver::helpers();
    // Blocking streams wait for earlier legacy-stream work, but not for each other: without this,
    // work the program then puts on a blocking stream of its own (CuPy's default Stream(), say)
    // would no longer wait for the moved kernel. Making the legacy stream wait for the moved
    // launch keeps every ordering the program wrote: later legacy work, and through the legacy
    // stream's implicit synchronisation every later blocking-stream launch, comes after it.
    thread_local CUevent done = nullptr;
    if (done == nullptr && h.event_create(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        done = nullptr;
        return;
    }
    if (h.event_record(done, redirect_stream_) == CUDA_SUCCESS) {
        h.stream_wait_event(cu_stream_legacy(), done, 0);
    }
}

void ClientRuntime::after_launch(const LaunchTicket& ticket, CUresult result) {
    if (ticket.seq != 0) {
        bool recorded = false;
        const bool writes = ticket.gpu_written ||
                            completion_mode_.load(std::memory_order_acquire) ==
                                static_cast<std::uint32_t>(CompletionMode::kGpuWrite);
        if (result == CUDA_SUCCESS && writes) {
            const CUdeviceptr address =
                completion_device_base_ + sizeof(std::uint64_t) * (ticket.seq & kRingMask);
            // Runs on the GPU after the launch finishes (stream order): publishes completion with
            // no polling thread and no extra synchronisation.
            recorded = driver::helpers().stream_write_value64(ticket.own_stream, address,
                                                              ticket.seq,
                                                              CU_STREAM_WRITE_VALUE_DEFAULT) ==
                       CUDA_SUCCESS;
            if (recorded && ticket.gpu_written) {
                slot_->stats.graph_gpu_writes.fetch_add(1, std::memory_order_relaxed);
            }
            if (!recorded && ticket.gpu_written) {
                // Nothing will ever write this graph's completion: rather than hold every peer
                // back until the staleness bound, count it finished now, and say so.
                log_message("GPU completion write for a graph launch failed; counting it finished");
                mark_finished_by_cpu(ticket.seq);
            } else if (!recorded) {
                log_message("GPU completion write failed; estimating finish times from now on");
                completion_mode_.store(static_cast<std::uint32_t>(CompletionMode::kEstimate),
                                       std::memory_order_release);
                slot_->completion_mode.store(static_cast<std::uint32_t>(CompletionMode::kEstimate),
                                             std::memory_order_release);
            }
        }
        // A failed launch never runs, so nothing on the GPU will ever mark it finished.
        if (result != CUDA_SUCCESS) mark_finished_by_cpu(ticket.seq);
    }
    if (ticket.redirected && result == CUDA_SUCCESS) join_legacy_stream();
    if (ticket.trace) write_trace(ticket);
}

void ClientRuntime::write_trace(const LaunchTicket& ticket) {
    const RunHeader& header = view_.header();
    const std::uint64_t index = slot_->trace_head.fetch_add(1, std::memory_order_acq_rel);
    TraceRecord& record = view_.trace(index_)[index & (header.trace_capacity - 1)];
    // The seqlock of shared_state.h: invalidate, fence, fields, publish.
    record.seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    record.key.store(ticket.key, std::memory_order_relaxed);
    record.enqueue_ns.store(ticket.enqueue_ns, std::memory_order_relaxed);
    record.launch_ns.store(ticket.launch_ns, std::memory_order_relaxed);
    record.duration_ns.store(ticket.kernel.duration_ns, std::memory_order_relaxed);
    record.sm_needed.store(ticket.kernel.sm_needed, std::memory_order_relaxed);
    record.kernel_class.store(static_cast<std::uint8_t>(ticket.kernel.kernel_class),
                              std::memory_order_relaxed);
    record.reason.store(static_cast<std::uint8_t>(ticket.reason), std::memory_order_relaxed);
    record.known.store(ticket.kernel.known ? 1 : 0, std::memory_order_relaxed);
    record.seq.store(index + 1, std::memory_order_release);
}

}  // namespace orion
