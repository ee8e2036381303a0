// ClientRuntime (client_runtime.h): attaching to a run, leaving it, and the launch path that ties
// the mechanisms together. The mechanisms live beside it: kernel_identity.cpp (names, graphs),
// gates.cpp (CPU and GPU gates), completions.cpp (in-flight ring, completions, trace) and
// stream_routing.cpp (stream priorities, the HP legacy-stream redirect).
#include "client_runtime.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "clock.h"
#include "daemon_join.h"
#include "driver.h"
#include "futex.h"
#include "hooked_symbols.h"
#include "kernel_key.h"
#include "runtime_support.h"
#include "tracking.h"

namespace orion {
namespace {

// What the profile says of a launch's work, from a kernel's entry or a graph's alike: the SMs,
// class and time the gate decides on. The launch path reads it: plain copies, no lock.
template <typename Entry>
KernelInfo profiled_work(const Entry& entry) {
    KernelInfo work;
    work.known = true;
    work.sm_needed = entry.sm_needed;
    work.kernel_class = static_cast<KernelClass>(entry.kernel_class);
    work.duration_ns = entry.duration_ns;
    return work;
}

bool is_legacy_stream(CUstream stream, int variant) {
    return stream == cu_stream_legacy() || (stream == nullptr && variant == hooks::kLegacy);
}

void atfork_child() { ClientRuntime::instance().disable_in_child(); }

// The parent of `pid` (/proc/<pid>/stat, field 4), or 0 when it cannot be read.
pid_t parent_of(pid_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    std::FILE* file = std::fopen(path, "r");
    if (file == nullptr) return 0;
    char text[512] = {};
    const std::size_t size = std::fread(text, 1, sizeof text - 1, file);
    std::fclose(file);
    text[size] = '\0';
    const char* close = std::strrchr(text, ')');  // the name, in parentheses, may hold anything
    int parent = 0;
    if (close == nullptr || std::sscanf(close + 1, " %*c %d", &parent) != 1) return 0;
    return static_cast<pid_t>(parent);
}

// Whether `claimer` is this process or one of its ancestors: a registered slot is attachable by
// the process tree of the process that claimed it (run_region.h, register_slot), not by another
// that merely has ORION_RUN and ORION_CLIENT set (one whose claimer's slot expired and was given
// to a newcomer, for instance).
bool claimed_by_my_tree(std::int32_t claimer) {
    if (claimer <= 0) return true;  // a closed run's slots are configured before any process
    pid_t pid = getpid();
    for (int depth = 0; depth < 64 && pid > 1; ++depth) {
        if (pid == claimer) return true;
        pid = parent_of(pid);
    }
    return false;
}

// Whether `pid` is an ancestor of this process (its parent, grandparent, ...).
bool is_my_ancestor(pid_t pid) {
    pid_t at = getppid();
    for (int depth = 0; depth < 64 && at > 1; ++depth) {
        if (at == pid) return true;
        at = parent_of(at);
    }
    return at == pid;
}

// A child process (exec'd) of a daemon client inherits the client's variables, but the slot is
// its ancestor's. A best-effort client's children (data-loader workers, a subprocess that uses
// the GPU) must not pass by the gate, so such a child joins the daemon as a client of its own:
// the same role and GPU-time cap (ORION_MAX_UTIL), no promised share (the parent holds the
// promise: ORION_MIN_UTIL is dropped), its allocations counted against the parent's memory limit
// (ORION_PARENT names the parent; the daemon shares the limit once it has checked that the
// parent's process is an ancestor), named `<parent's name>.<pid>`. The variables
// are set for that join here; true when the caller should join again. The HP client's children
// pass through as before: one HP per GPU, and HP is never gated.
bool rejoin_as_child(const RunView& view, std::uint32_t index) {
    const ClientSlot& slot = view.client(index);
    if (view.decisions().open_slots == 0) return false;  // a closed run: no daemon to join
    const char* role = std::getenv("ORION_ROLE");
    if (role == nullptr || role[0] == '\0') return false;  // not joined from the environment
    if (slot.state.load(std::memory_order_acquire) !=
        static_cast<std::uint32_t>(ClientState::kAttached)) {
        return false;
    }
    const std::int32_t holder = slot.pid.load(std::memory_order_acquire);
    if (holder <= 0 || holder == getpid() || !is_my_ancestor(holder)) return false;
    const std::string parent(slot.name, strnlen(slot.name, sizeof slot.name));
    if (view.role(index) != Role::kBestEffort) {
        if (env_flag("ORION_DEBUG")) {
            log_message(("a child of HP client '" + parent + "' passes through").c_str());
        }
        return false;
    }
    const std::string suffix = "." + std::to_string(getpid());
    const std::size_t room = kClientNameBytes - 1 - suffix.size();
    const std::string name = parent.substr(0, room) + suffix;
    unsetenv("ORION_RUN");
    unsetenv("ORION_CLIENT");
    unsetenv("ORION_DECISIONS");
    unsetenv("ORION_MIN_UTIL");
    setenv("ORION_ROLE", "be", 1);
    setenv("ORION_NAME", name.c_str(), 1);
    // Its allocations count against the parent's memory limit (the daemon checks the parent is
    // its ancestor): a data loader's workers do not each get the whole limit again.
    setenv("ORION_PARENT", parent.c_str(), 1);
    if (env_flag("ORION_DEBUG")) {
        log_message(("a child of BE client '" + parent + "' joins as '" + name + "'").c_str());
    }
    return true;
}

// A process whose ORION_RUN names a run that is gone, though it joined from its environment:
// the child of a client whose daemon was restarted (the client rejoined the new daemon, but the
// variables its children inherit name the old run). A BE client's child joins the GPU's daemon
// now, as rejoin_as_child has it join (named `<ORION_NAME>.<pid>`, no promised share); an HP
// client's passes through, as its children do. True when the caller should join; once only.
bool join_past_a_gone_run() {
    static std::atomic<bool> tried{false};
    if (!joined_from_environment() || tried.exchange(true)) return false;
    const char* role = std::getenv("ORION_ROLE");
    if (std::strcmp(role, "be") != 0) return false;
    unsetenv("ORION_RUN");
    unsetenv("ORION_CLIENT");
    unsetenv("ORION_DECISIONS");
    unsetenv("ORION_MIN_UTIL");
    unsetenv("ORION_PARENT");  // the run it names is gone, and with it the parent's slot
    const char* inherited = std::getenv("ORION_NAME");
    if (inherited != nullptr && inherited[0] != '\0') {
        const std::string suffix = "." + std::to_string(getpid());
        const std::string name =
            std::string(inherited).substr(0, kClientNameBytes - 1 - suffix.size()) + suffix;
        setenv("ORION_NAME", name.c_str(), 1);
    }
    if (env_flag("ORION_DEBUG")) log_message("the run in ORION_RUN is gone; joining the daemon");
    return true;
}

}  // namespace

namespace {
std::atomic<bool> g_created{false};  // instance() has run: the process-wide runtime exists
// The runtime of the daemon this client rejoined (watch_for_a_daemon), replacing the first for
// every later call; nullptr until then. Swapped by the watch thread only, read with one load.
std::atomic<ClientRuntime*> g_rejoined{nullptr};
std::atomic<bool> g_exiting{false};  // detach() ran: the process is ending, no more rejoins
}  // namespace

ClientRuntime& ClientRuntime::instance() {
    // Never destroyed: hooks may still run while other libraries' destructors execute at exit.
    static ClientRuntime* runtime = [] {
        auto* made = new ClientRuntime();
        g_created.store(true, std::memory_order_release);
        return made;
    }();
    ClientRuntime* rejoined = g_rejoined.load(std::memory_order_acquire);
    return rejoined != nullptr ? *rejoined : *runtime;
}

bool ClientRuntime::created() { return g_created.load(std::memory_order_acquire); }

bool ClientRuntime::attaches_at_load() {
    if (daemon_join_requested()) return false;  // joins at its first driver call (daemon_join.h)
    const char* run = std::getenv("ORION_RUN");
    return run == nullptr || run[0] == '\0' || env_flag("ORION_STRICT");
}

ClientRuntime::ClientRuntime() { attach_from_environment(); }

ClientRuntime::ClientRuntime(std::vector<std::pair<std::string, std::string>> rejoined)
    : rejoined_(std::move(rejoined)) {
    attach_from_environment();
}

const char* ClientRuntime::variable(const char* name) const {
    for (const auto& [key, value] : rejoined_) {
        if (key == name) return value.c_str();
    }
    return std::getenv(name);
}

void ClientRuntime::attach_from_environment() {
    // ORION_ROLE without ORION_RUN: get a slot first (a rejoined runtime has its answer).
    if (rejoined_.empty()) join_daemon_from_environment();
    const char* run = variable("ORION_RUN");
    if (run == nullptr || run[0] == '\0') return;  // not part of a run: pass everything through
    const bool strict = env_flag("ORION_STRICT");
    auto fail = [strict](const std::string& why) {
        log_message((why + (strict ? "; exiting (ORION_STRICT is set)" : "; passing every call through")).c_str());
        if (strict) _exit(70);
    };
    const char* client_text = variable("ORION_CLIENT");
    char* end = nullptr;
    const long client = client_text != nullptr ? std::strtol(client_text, &end, 10) : -1;
    if (client_text == nullptr || end == client_text || *end != '\0' || client < 0 ||
        client >= static_cast<long>(kMaxClients)) {
        fail("ORION_RUN is set but ORION_CLIENT is missing or not a client index");
        return;
    }
    // The run's decisions, sealed and mapped read-only (RunDecisions): a path to the descriptor
    // the daemon handed over its socket, or to the closed run's controller's.
    const char* decisions = variable("ORION_DECISIONS");
    std::string error;
    RunMapping mapping =
        RunMapping::attach(run, decisions != nullptr ? decisions : "", &error);
    if (!mapping.valid()) {
        if (rejoined_.empty() && join_past_a_gone_run()) {
            attach_from_environment();
            return;
        }
        fail("cannot join run: " + error);
        return;
    }
    RunView view = mapping.view();
    if (view.header().ready.load(std::memory_order_acquire) == 0) {
        fail(std::string("run '") + run + "' is not ready (its controller has not published it)");
        return;
    }
    const auto index = static_cast<std::uint32_t>(client);
    if (index >= view.decisions().client_count) {
        fail("client index " + std::to_string(index) + " is not configured in run '" + run + "'");
        return;
    }
    ClientSlot& slot = view.client(index);
    if (!claimed_by_my_tree(slot.claim_pid.load(std::memory_order_acquire))) {
        if (env_flag("ORION_DEBUG")) log_message("client slot claimed by another process tree; this process passes through");
        return;
    }
    auto expected = static_cast<std::uint32_t>(ClientState::kRegistered);
    if (!slot.state.compare_exchange_strong(expected,
                                            static_cast<std::uint32_t>(ClientState::kAttached),
                                            std::memory_order_acq_rel)) {
        // A BE daemon client's child joins as a client of its own (see rejoin_as_child).
        if (rejoined_.empty() && rejoin_as_child(view, index)) {
            attach_from_environment();
            return;
        }
        // Typically a helper process (a compiler worker) that inherited its parent's environment.
        if (env_flag("ORION_DEBUG")) log_message("client slot already taken; this process passes through");
        return;
    }
    slot.pid.store(static_cast<std::int32_t>(getpid()), std::memory_order_release);
    mapping_ = std::move(mapping);
    view_ = mapping_.view();
    index_ = index;
    slot_ = &slot;
    policy_ = static_cast<Policy>(view_.decisions().policy);
    role_ = view_.role(index);
    // GPU-time shares hold BE clients under any policy with a library that gates (priority too).
    tracks_ = policy_tracks_launches(policy_) ||
              (view_.decisions().quotas != 0 && role_ == Role::kBestEffort);
    tracing_ = view_.trace_capacity() != 0;
    has_profile_ = slot.kernel_count != 0;
    // Under `quota` every client is a peer whose work the gate keeper grants.
    gpu_gate_ = tracks_ && (role_ == Role::kBestEffort || policy_ == Policy::kQuota) &&
                view_.decisions().be_gate == static_cast<std::uint32_t>(BeGate::kGpu);
    // Work between two gate waits under `quota`, where no HP latency rides on it: a tenth of a
    // slice (a wait per tiny kernel costs the GPU itself). Otherwise the run's queue limit, read
    // at each launch (gates.cpp): a daemon sets it when the HP client joins or is learned.
    gate_spacing_ns_ = policy_ == Policy::kQuota
                           ? quota_wait_spacing_ns(view_.decisions().quota_window_ns)
                           : 0;
    memory_.attach(view_, index, view_.decisions().sm_count);
    // This process's CUDA context, as the controller measured it for the GPU (0: unknown).
    memory_.count_context(view_.decisions().context_bytes);
    // Whoever is gated learns what its profile lacks (an offline entry always wins).
    learning_ = tracks_;
    if (learning_) {
        learner_.attach(&view_.learned(index_), view_.decisions().sm_count);
        sampler_.attach(&slot.stats, &view_);
        if (role_ == Role::kHighPriority) {
            request_timer_.attach(&slot.stats, &view_, &hp_last_call_ns_, &hp_last_wait_ns_,
                                  kRequestGapNs);
        }
    }
    pthread_atfork(nullptr, nullptr, atfork_child);
    active_.store(true, std::memory_order_release);
    if (view_.decisions().open_slots != 0) {
        read_daemon_gone_choice();
        start_daemon_watch();
    }
    if (env_flag("ORION_DEBUG")) {
        log_message((std::string("client ") + std::to_string(index_) + " attached, policy " +
                     policy_name(policy_) + ", role " +
                     (role_ == Role::kHighPriority ? "hp" : "be"))
                        .c_str());
    }
}

void ClientRuntime::read_daemon_gone_choice() {
    // The daemon's answer to `join` says what it was started with (`orion up
    // --be-when-daemon-gone`); HP never holds: its latency is what the GPU is shared for.
    const char* choice = variable("ORION_BE_WHEN_DAEMON_GONE");
    hold_when_daemon_gone_ = role_ == Role::kBestEffort && choice != nullptr &&
                             std::strcmp(choice, "hold") == 0;
    double bound_s = kDefaultDaemonGoneHoldS;
    if (const char* text = variable("ORION_DAEMON_GONE_HOLD_S")) {
        char* end = nullptr;
        const double parsed = std::strtod(text, &end);
        if (end != text && *end == '\0' && parsed > 0 && parsed <= kMaxDaemonGoneHoldS) {
            bound_s = parsed;
        }
    }
    daemon_gone_hold_ns_ = static_cast<std::uint64_t>(bound_s * 1e9);
}

void ClientRuntime::start_daemon_watch() {
    std::thread([this] {
        // Watches the daemon until this client leaves it; then, for a client that joined from
        // its environment, waits for a daemon to answer again: its own, beating again (watch on),
        // or a new one (another runtime takes over: this thread ends).
        while (watch_daemon() && watch_for_a_daemon()) {
        }
    }).detach();
}

bool ClientRuntime::watch_daemon() {
    constexpr timespec kPeriod{0, 200'000'000};
    std::uint64_t silent_since = 0;  // when this client began to hold; 0: not holding
    auto stop_holding = [this] {
        daemon_hold_.store(0, std::memory_order_release);
        futex_wake_all(daemon_hold_);
    };
    while (active()) {
        nanosleep(&kPeriod, nullptr);
        const RunDecisions& decisions = view_.decisions();
        if (decisions.shutdown.load(std::memory_order_acquire) != 0) {
            leave_daemon("the daemon stopped");
            stop_holding();
            return true;
        }
        const std::uint64_t beat = decisions.daemon_heartbeat_ns.load(std::memory_order_acquire);
        const std::uint64_t now = monotonic_ns();
        if (beat == 0 || now <= beat + kDaemonStaleNs) {
            if (silent_since != 0) {
                stop_holding();
                log_message((std::string("the daemon beats again after ") +
                             std::to_string((now - silent_since) / 1'000'000) + " ms; " +
                             std::to_string(held_launches_.load(std::memory_order_relaxed)) +
                             " launches of client '" + slot_->name + "' held so far go on")
                                .c_str());
                silent_since = 0;
            }
            continue;
        }
        if (!hold_when_daemon_gone_) {
            leave_daemon("the daemon fell silent");
            return true;
        }
        if (silent_since == 0) {
            silent_since = now;
            daemon_hold_.store(1, std::memory_order_release);
            log_message((std::string("the daemon fell silent; client '") + slot_->name +
                         "' holds its launches until it beats again, at most " +
                         std::to_string(daemon_gone_hold_ns_ / 1'000'000) + " ms")
                            .c_str());
        } else if (now - silent_since >= daemon_gone_hold_ns_) {
            // Ungated first, then the held launches go: none of them waits at a gate again.
            leave_daemon((std::string("the daemon stayed silent for ") +
                          std::to_string(daemon_gone_hold_ns_ / 1'000'000) + " ms")
                             .c_str());
            stop_holding();
            return true;
        }
    }
    stop_holding();  // a forked child's or a detached client's held launches never wait
    return false;
}

bool ClientRuntime::watch_for_a_daemon() {
    if (!joined_from_environment()) return false;  // a claimer's client: nothing to ask again
    constexpr timespec kPeriod{0, 500'000'000};
    std::string refused;  // the last refusal, said once
    while (!g_exiting.load(std::memory_order_acquire)) {
        nanosleep(&kPeriod, nullptr);
        if (g_exiting.load(std::memory_order_acquire)) break;
        const RunDecisions& decisions = view_.decisions();
        const std::uint64_t beat = decisions.daemon_heartbeat_ns.load(std::memory_order_acquire);
        if (decisions.shutdown.load(std::memory_order_acquire) == 0 && beat != 0 &&
            monotonic_ns() <= beat + kDaemonStaleNs &&
            slot_->state.load(std::memory_order_acquire) ==
                static_cast<std::uint32_t>(ClientState::kAttached) &&
            slot_->pid.load(std::memory_order_acquire) == static_cast<std::int32_t>(getpid())) {
            // The daemon it left beats again (it was stopped or stalled, not gone) and still
            // holds this client's slot: gated again as before, with nothing to swap.
            active_.store(true, std::memory_order_release);
            log_message((std::string("the daemon beats again; client '") + slot_->name +
                         "' is gated again")
                            .c_str());
            return true;
        }
        std::vector<std::pair<std::string, std::string>> answer;
        std::string why;
        if (!rejoin_daemon(&answer, &why)) {
            const bool absent = why.rfind("no orion daemon runs", 0) == 0;
            if (!absent && why != refused) {
                log_message(("cannot rejoin the orion daemon: " + why + "; asking again").c_str());
            }
            refused = absent ? std::string() : why;
            continue;
        }
        auto* next = new ClientRuntime(std::move(answer));
        if (!next->active()) {
            delete next;  // attached to nothing: no thread of its own, nothing to undo
            continue;
        }
        // What this process holds of the GPU's memory counts in its new slot too.
        next->memory_.adopt(memory_);
        g_rejoined.store(next, std::memory_order_release);
        log_message((std::string("rejoined the orion daemon: client '") + next->slot_->name +
                     "' is gated again (calls already inside the old run's client finish there)")
                        .c_str());
        return false;  // this thread is done; the new runtime watches its daemon
    }
    return false;
}

void ClientRuntime::hold_while_daemon_silent() {
    held_launches_.fetch_add(1, std::memory_order_relaxed);
    // The watch thread wakes every sleeper when the hold ends; the timeout is only a net.
    constexpr std::uint64_t kRecheckNs = 100'000'000;
    for (std::uint32_t held = daemon_hold_.load(std::memory_order_acquire); held != 0;
         held = daemon_hold_.load(std::memory_order_acquire)) {
        futex_wait(daemon_hold_, held, kRecheckNs);
    }
}

void ClientRuntime::leave_daemon(const char* why) {
    if (!active_.exchange(false, std::memory_order_acq_rel)) return;
    // Work already behind this client's gate on the GPU runs; nothing new waits.
    view_.gates().gates[index_].word.fetch_or(kGateOpen, std::memory_order_acq_rel);
    log_message((std::string(why) + "; client '" + slot_->name + "' runs ungated").c_str());
}

void ClientRuntime::detach() {
    g_exiting.store(true, std::memory_order_release);  // no rejoin while the process ends
    if (slot_ == nullptr || !active()) return;
    if (slot_->pid.load(std::memory_order_relaxed) != static_cast<std::int32_t>(getpid())) return;
    auto expected = static_cast<std::uint32_t>(ClientState::kAttached);
    if (slot_->state.compare_exchange_strong(expected,
                                             static_cast<std::uint32_t>(ClientState::kExited),
                                             std::memory_order_acq_rel)) {
        memory_.drop_all();  // freed with the process
    }
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

LaunchTicket ClientRuntime::before_launch(const LaunchShape& shape, CUstream stream, int variant) {
    LaunchTicket ticket;
    ticket.stream = stream;
    ticket.own_stream =
        (stream == nullptr && variant == hooks::kPerThread) ? cu_stream_per_thread() : stream;
    // A BE client whose daemon fell silent holds here, before anything is counted or gated, so
    // the launch is decided afresh (gated again) once the daemon beats.
    if (daemon_hold_.load(std::memory_order_acquire) != 0) hold_while_daemon_silent();
    ticket.enqueue_ns = monotonic_ns();
    ticket.trace = tracing_;
    const std::uint64_t launch_count =
        slot_->stats.launches.fetch_add(1, std::memory_order_relaxed) + 1;
    if (shape.function == nullptr && !shape.segment) {
        slot_->stats.graph_launches.fetch_add(1, std::memory_order_relaxed);
    }
    const bool may_redirect = role_ == Role::kHighPriority && policy_sets_priorities(policy_) &&
                              view_.decisions().hp_priority_stream != 0 && !shape.stream_fixed &&
                              is_legacy_stream(stream, variant);
    if ((tracks_ || may_redirect) && stream_is_capturing(ticket.own_stream)) {
        // Work captured into a graph runs later, as a graph launch; adding or gating now would
        // change the graph. Pass it through untouched.
        slot_->stats.capture_launches.fetch_add(1, std::memory_order_relaxed);
        ticket.trace = false;
        return ticket;
    }
    const RunDecisions& decisions = view_.decisions();
    ticket.kernel.sm_needed = decisions.sm_count;
    ticket.kernel.duration_ns = decisions.unknown_duration_ns;
    bool offline = false;
    bool sample_to_learn = false;
    if (shape.function != nullptr && (tracks_ || tracing_ || has_profile_)) {
        ticket.key = kernel_key(name_hash(shape.function), shape.grid[0], shape.grid[1],
                                shape.grid[2], shape.block[0], shape.block[1], shape.block[2]);
        if (const KernelEntry* entry = view_.find_kernel(index_, ticket.key)) {
            offline = true;
            ticket.kernel = profiled_work(*entry);
        } else {
            if (learning_) {
                KernelSighting sighting{ticket.key, shape.function};
                for (int i = 0; i < 3; ++i) {  // element-wise: std::copy became two memmove calls
                    sighting.grid[i] = shape.grid[i];
                    sighting.block[i] = shape.block[i];
                }
                sighting.shared_bytes = shape.shared_bytes;
                use_learned(learner_.kernel(sighting), &ticket, &sample_to_learn);
            }
            if (has_profile_) report_unknown(shape.function, shape);
        }
    } else if (shape.segment) {
        // A segment of a split BE graph holding several profiled kernels: their work, summed
        // when the graph was split; otherwise (a child graph, a changed node) unknown.
        if (shape.work != nullptr && shape.work->known) {
            offline = true;
            ticket.kernel = *shape.work;
        }
    } else if (shape.function == nullptr) {
        // A graph: known when its kernel nodes match a graph of the profile; it then needs the
        // SMs of its widest kernel for its measured wall time. Otherwise all SMs, and (see
        // track_launch) it counts as running until the GPU writes its completion.
        const GraphSlot* exec = graph_slot(shape.graph, false);
        ticket.key = exec != nullptr ? exec->key.load(std::memory_order_acquire) : 0;
        const GraphEntry* entry = ticket.key != 0 ? view_.find_graph(index_, ticket.key) : nullptr;
        if (entry != nullptr) {
            offline = true;
            ticket.kernel = profiled_work(*entry);
        } else {
            // Learned graphs are claimed when instantiated (graph_instantiated).
            if (learning_ && ticket.key != 0) {
                use_learned(learner_.find(ticket.key), &ticket, &sample_to_learn);
            }
            if (has_profile_) {
                slot_->stats.unknown_launches.fetch_add(1, std::memory_order_relaxed);
                slot_->stats.unknown_graph_launches.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }
    if (tracks_ && ticket.kernel.known) {
        ClientStats& stats = slot_->stats;
        (offline ? stats.offline_launches : stats.online_launches)
            .fetch_add(1, std::memory_order_relaxed);
        (offline ? stats.offline_ns : stats.online_ns)
            .fetch_add(ticket.kernel.duration_ns, std::memory_order_relaxed);
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
        // Its sequence number first: the stream marks it started as it passes its gate wait.
        if (gpu_gate_ && !gate_failed_.load(std::memory_order_relaxed) && ensure_gate_mapped() &&
            (ticket.seq = slot_->next_seq.fetch_add(1, std::memory_order_relaxed) + 1) != 0 &&
            gate_on_gpu(ticket.own_stream, ticket.kernel, ticket.seq, &ticket.gate_wait,
                        &ticket.guard_seq)) {
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
        // An HP launch to be timed for learning: whether it would be timed alone, asking BE to
        // stand aside if not. Before the launch is published and the gates closed, so the
        // keeper, which reads the hold before it opens, never lets BE in beside it.
        const bool clean = !sample_to_learn || role_ != Role::kHighPriority ||
                           ticket.sample_use.entry == nullptr ||
                           learns_alone(*ticket.sample_use.entry, ticket.launch_ns);
        ticket.seq = track_launch(ticket.kernel, ticket.key, ticket.launch_ns, ticket.gpu_written,
                                  shape.function == nullptr, ticket.seq, ticket.guard_seq);
        // Published first, then the gates closed: the keeper's open-after-check protocol
        // (shared_state.h, GateBlock) relies on that order.
        if (role_ == Role::kHighPriority && policy_holds_be_for_hp(policy_) &&
            decisions.be_gate == static_cast<std::uint32_t>(BeGate::kGpu)) {
            close_be_gates(ticket.launch_ns);
        }
        start_sampling(&ticket, sample_to_learn, clean, launch_count, shape.function == nullptr);
    }
    return ticket;
}

void ClientRuntime::use_learned(LearnedEntry* entry, LaunchTicket* ticket, bool* sample) {
    if (entry == nullptr) return;
    const std::uint64_t launches = entry->launches.fetch_add(1, std::memory_order_relaxed) + 1;
    if (const std::uint64_t duration = KernelLearner::duration(*entry); duration != 0) {
        ticket->kernel.known = true;
        ticket->kernel.sm_needed = entry->sm_needed;
        ticket->kernel.kernel_class = KernelClass::kUnknown;  // only counters can tell
        ticket->kernel.duration_ns = duration;
    }
    ticket->sample_use.entry = entry;
    *sample = KernelLearner::wants_sample(launches, KernelLearner::duration(*entry) != 0);
}

void ClientRuntime::start_sampling(LaunchTicket* ticket, bool for_learning, bool clean,
                                   std::uint64_t launch_count, bool graph) {
    // Besides learning, an HP client times one launch in kInterferenceEvery (graphs: each a
    // request, so more often) of those with a duration alone to compare with (as felt too, at
    // most one in LaunchSampler::kFeltSpacingNs), and, as felt only, the first launch of each
    // request (see ClientStats::start_felt).
    constexpr std::uint64_t kInterferenceEvery = 64;
    constexpr std::uint64_t kGraphInterferenceEvery = 4;
    const bool hp = role_ == Role::kHighPriority;
    const std::uint64_t previous_call_ns =
        hp ? hp_last_call_ns_.exchange(ticket->enqueue_ns, std::memory_order_relaxed) : 0;
    const bool counted =
        hp && ticket->kernel.known &&
        launch_count % (graph ? kGraphInterferenceEvery : kInterferenceEvery) == 0;
    bool starts_request = false;
    if (hp) {
        const std::uint64_t quiet_from =
            std::max(previous_call_ns, hp_last_wait_ns_.load(std::memory_order_relaxed));
        starts_request =
            previous_call_ns == 0 || (ticket->enqueue_ns >= quiet_from + kRequestGapNs &&
                                      !request_timer_.continues(ticket->enqueue_ns));
        if (starts_request) {
            start_request(ticket);
        } else {
            ticket->request_mark = request_timer_.marking();
        }
    }
    const bool request_start = starts_request && ticket->kernel.known && previous_call_ns != 0;
    if (!for_learning && !counted && !request_start) return;
    // Timed as the user feels it when nothing of its own was before it on the GPU (so all it
    // waited for is its neighbours' work).
    const auto own_queue_empty = [&] {
        return advance_low_water(view_, index_, ticket->launch_ns) + 1 >= ticket->seq;
    };
    SampleUse& use = ticket->sample_use;
    use.expected_ns = ticket->kernel.known ? ticket->kernel.duration_ns : 0;
    // An HP kernel timed beside BE work would look slower than alone: it is not learned from.
    use.learn = for_learning && clean;
    if (!for_learning && !counted) {
        // A request's start, for the felt figure alone: timed only if the felt timer is free,
        // and left out of the GPU-time figures (`interference`), which stay one in 64.
        if (!own_queue_empty() || !sampler_.claim_felt(ticket->enqueue_ns, false)) return;
        use.gpu_time_counted = false;
        ticket->sample = sampler_.begin(ticket->own_stream);
        if (ticket->sample < 0) {
            sampler_.unclaim_felt();
            return;
        }
        use.call_ns = ticket->enqueue_ns;
        use.alone = !be_has_work(ticket->launch_ns);
        use.request_start = true;
        return;
    }
    ticket->sample = sampler_.begin(ticket->own_stream);
    // Not a learning sample as felt: one writer per entry.
    if (ticket->sample >= 0 && (counted || request_start) && !use.learn && own_queue_empty() &&
        sampler_.claim_felt(ticket->enqueue_ns, !request_start)) {
        use.call_ns = ticket->enqueue_ns;
        use.alone = !be_has_work(ticket->launch_ns);
        use.felt_counted = counted;
        use.request_start = request_start;
    }
}

void ClientRuntime::start_request(LaunchTicket* ticket) {
    slot_->stats.hp_requests.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t now_ns = ticket->launch_ns;
    const bool be_busy = be_has_work(now_ns);
    const bool held = be_busy && sampling_hold_in_force(view_.header(), now_ns) &&
                      !be_may_run(view_, now_ns);
    ticket->request_mark = request_timer_.start(ticket->enqueue_ns, !be_busy, held);
    // Beside BE work that never stops, requests alone for the timer's reference come from
    // sampling holds (request_timer.h): each request's start extends one while the timer wants
    // them, so BE stands aside through the next request too (a hold lasts kSamplingHoldNs).
    if (be_busy && request_timer_.wants_alone() && policy_holds_be_for_hp(policy_) &&
        extend_sampling_hold(now_ns)) {
        slot_->stats.request_holds.fetch_add(1, std::memory_order_relaxed);
    }
}

bool ClientRuntime::learns_alone(const LearnedEntry& entry, std::uint64_t now_ns) {
    // Holds are for work not yet learned, a bounded number of its launches, and only where HP
    // holds BE back at all.
    const bool may_hold =
        policy_holds_be_for_hp(policy_) && KernelLearner::duration(entry) == 0 &&
        entry.launches.load(std::memory_order_relaxed) <= KernelLearner::kHoldLaunches;
    if (may_hold && sampling_hold_in_force(view_.header(), now_ns) &&
        (!be_has_work(now_ns) || !be_may_run(view_, now_ns))) {
        // Nothing of BE runs (every unfinished BE launch waits at a gate wait the GPU has not
        // passed): this launch runs alone. The hold must outlast it too.
        if (!extend_sampling_hold(now_ns)) return false;
        slot_->stats.held_samples.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    if (!be_has_work(now_ns)) return true;
    if (!may_hold) return false;
    if (extend_sampling_hold(now_ns)) {
        slot_->stats.sampling_holds.fetch_add(1, std::memory_order_relaxed);
    }
    return false;
}

bool ClientRuntime::extend_sampling_hold(std::uint64_t now_ns) {
    RunHeader& header = view_.header();
    const std::uint64_t until = now_ns + kSamplingHoldNs;
    std::uint64_t current = header.sampling_hold_until_ns.load(std::memory_order_acquire);
    const std::uint64_t added = until - std::max(current, now_ns);
    if (until <= current) return true;  // already held that long
    if (hold_granted_ns_.fetch_add(added, std::memory_order_relaxed) + added > kSamplingHoldBudgetNs) {
        return false;  // this client has held BE long enough: learned beside BE, or not at all
    }
    while (current < until && !header.sampling_hold_until_ns.compare_exchange_weak(
                                  current, until, std::memory_order_acq_rel,
                                  std::memory_order_acquire)) {
    }
    return true;
}

bool ClientRuntime::be_has_work(std::uint64_t now_ns) const {
    for (std::uint32_t client = 0; client < view_.decisions().client_count; ++client) {
        if (is_attached_best_effort(view_, client) && client_has_work(view_, client, now_ns)) {
            return true;
        }
    }
    return false;
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
    if (ticket.request_mark) {
        request_timer_.mark(ticket.own_stream, ticket.enqueue_ns, result == CUDA_SUCCESS);
    }
    if (ticket.sample >= 0) {
        sampler_.end(ticket.sample, ticket.own_stream, result == CUDA_SUCCESS, ticket.sample_use);
    }
    if (ticket.redirected && result == CUDA_SUCCESS) join_legacy_stream();
    if (ticket.trace) write_trace(ticket);
}

}  // namespace orion
