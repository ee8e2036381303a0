#include "run_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "clock.h"
#include "enum_names.h"
#include "policy.h"
#include "tracking.h"

namespace orion {
namespace {

std::string describe(const char* what, const std::string& name) {
    return std::string(what) + " '" + name + "': " + std::strerror(errno);
}

std::uint32_t round_up_pow2(std::uint32_t value) {
    if (value == 0) return 0;
    std::uint32_t result = 1;
    while (result < value && result < (1U << 30)) result <<= 1;
    return result;
}

// Whether the header's region offsets are the ones its trace capacity gives (a capacity that
// is no power of two, or regions past the mapping's end, are not).
bool layout_matches(const RunHeader& header, std::uint64_t size) {
    const std::uint32_t capacity = header.trace_capacity;
    if (capacity != round_up_pow2(capacity)) return false;
    const Layout layout = compute_layout(capacity);
    return layout.total_bytes == size && header.clients_offset == layout.clients_offset &&
           header.kernels_offset == layout.kernels_offset &&
           header.inflight_offset == layout.inflight_offset &&
           header.completion_offset == layout.completion_offset &&
           header.completion_bytes == layout.completion_bytes &&
           header.trace_offset == layout.trace_offset &&
           header.graphs_offset == layout.graphs_offset &&
           header.timeline_offset == layout.timeline_offset &&
           header.gate_offset == layout.gate_offset &&
           header.learned_offset == layout.learned_offset;
}

void require_unpublished(const RunMapping& run) {
    if (run.view().header().ready.load(std::memory_order_acquire) != 0) {
        throw std::runtime_error("run '" + run.name() + "' is already published");
    }
}

void require_open(const RunMapping& run) {
    if (run.view().decisions().open_slots == 0) {
        throw std::runtime_error("run '" + run.name() +
                                 "' is not an open run (its clients are fixed)");
    }
}

void require_state(const RunMapping& run, std::uint32_t client, ClientState state,
                   const char* what) {
    check_client(run, client);
    const std::uint32_t seen = run.view().client(client).state.load(std::memory_order_acquire);
    if (seen != static_cast<std::uint32_t>(state)) {
        throw std::runtime_error(std::string("cannot ") + what + " client slot " +
                                 std::to_string(client) + ": it is " + state_name(seen));
    }
}

// A profile is loaded before publication, or into a slot its daemon has reserved.
void require_configurable(const RunMapping& run, std::uint32_t client) {
    check_client(run, client);
    require_controller(run);
    if (run.view().decisions().open_slots != 0) {
        require_state(run, client, ClientState::kReserved, "load the profile of");
    } else {
        require_unpublished(run);
    }
}

// A client's name fits its slot, terminator included.
void check_client_name(const std::string& name) {
    if (name.empty() || name.size() >= kClientNameBytes) {
        throw std::invalid_argument("client name must have 1 to " +
                                    std::to_string(kClientNameBytes - 1) + " characters");
    }
}

// Zeroes the memory use of `client`, whose process is gone (its allocations died with it), and
// gives it back to the slot whose limit it shared, if any. Idempotent: a second call finds 0.
void drop_memory_use(const RunView& run, std::uint32_t client) {
    const std::uint64_t used = run.client(client).memory.used.exchange(0, std::memory_order_acq_rel);
    const std::uint32_t holder = run.decision(client).memory_account.load(std::memory_order_acquire);
    if (used != 0 && holder != 0 && holder <= kMaxClients && holder - 1 != client) {
        subtract_at_most(run.client(holder - 1).memory.used, used);
    }
}

// Moves `client` from `from` to `end` (exited or dead) unless its state changed meanwhile, then
// drops its memory use. Returns the state it saw (`from` when this call moved it).
ClientState end_slot(const RunView& run, std::uint32_t client, ClientState from,
                     ClientState end) {
    auto expected = static_cast<std::uint32_t>(from);
    if (!run.client(client).state.compare_exchange_strong(
            expected, static_cast<std::uint32_t>(end), std::memory_order_acq_rel)) {
        return static_cast<ClientState>(expected);
    }
    drop_memory_use(run, client);
    return from;
}

void name_slot(const RunView& run, std::uint32_t client, const std::string& name, Role role) {
    run.decision(client).role.store(static_cast<std::uint32_t>(role), std::memory_order_release);
    ClientSlot& slot = run.client(client);
    std::memcpy(slot.name, name.data(), name.size());
    slot.name[name.size()] = '\0';
}

void set_state(ClientSlot& slot, ClientState state) {
    slot.state.store(static_cast<std::uint32_t>(state), std::memory_order_release);
}

// What a free slot holds that is not zero: no cap on its GPU time, and its gate open (nothing is
// held until an HP client launches); its other decisions are zero (HP's role, no limit).
void write_slot_defaults(const RunView& run, std::uint32_t client) {
    ClientDecision& decision = run.decision(client);
    decision.role.store(0, std::memory_order_relaxed);
    decision.memory_account.store(0, std::memory_order_relaxed);
    decision.min_ppm.store(0, std::memory_order_relaxed);
    decision.memory_limit.store(0, std::memory_order_relaxed);
    decision.max_ppm.store(kFullShare, std::memory_order_release);
    run.gates().gates[client].word.store(kGateOpen, std::memory_order_release);
}

// The gates an HP launch closes: one bit per BE slot.
void mark_best_effort(RunDecisions& decisions, std::uint32_t client) {
    decisions.be_mask.fetch_or(1U << client, std::memory_order_acq_rel);
}

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1
#endif
// The seals that make a decisions segment the controller's alone: no mapping made after them can
// write, and it can neither shrink under a reader (SIGBUS) nor grow; F_SEAL_SEAL keeps them.
constexpr int kDecisionSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;

// A new decisions segment, mapped read-write and sealed, for run `name`; nullptr with `error`
// set when it cannot be made (a kernel before 5.1 cannot seal against future writes).
RunDecisions* create_decisions(const std::string& name, int* fd_out, std::string* error) {
    const int fd = memfd_create("orion-decisions", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        *error = describe("cannot create the decisions of", name);
        return nullptr;
    }
    void* base = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(kDecisionsBytes)) == 0) {
        base = mmap(nullptr, kDecisionsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (base == MAP_FAILED) {
        *error = describe("cannot map the decisions of", name);
        close(fd);
        return nullptr;
    }
    // Sealed before anything is handed out: the mapping above is the only writable one, ever.
    if (fcntl(fd, F_ADD_SEALS, kDecisionSeals) != 0) {
        *error = describe("cannot seal the decisions (Linux 5.1 or later is needed) of", name);
        munmap(base, kDecisionsBytes);
        close(fd);
        return nullptr;
    }
    *fd_out = fd;
    return static_cast<RunDecisions*>(base);
}

// The decisions at `path`, mapped read-only once they are sealed against every writer and are
// run `name`'s; nullptr with `error` set otherwise.
const RunDecisions* attach_decisions(const std::string& name, const std::string& path,
                                     std::string* error) {
    if (path.empty()) {
        *error = "no decisions were given for run '" + name +
                 "' (ORION_DECISIONS: they come with the join, or from the run's controller)";
        return nullptr;
    }
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *error = "cannot open the decisions of run '" + name + "' at " + path + ": " +
                 std::strerror(errno);
        return nullptr;
    }
    struct stat info {};
    const int seals = fcntl(fd, F_GET_SEALS);
    const bool sized = fstat(fd, &info) == 0 &&
                       static_cast<std::uint64_t>(info.st_size) == kDecisionsBytes;
    if (seals < 0 || (seals & kDecisionSeals) != kDecisionSeals || !sized) {
        *error = "the decisions of run '" + name + "' at " + path +
                 " are not a sealed orion segment (anyone could write them)";
        close(fd);
        return nullptr;
    }
    void* base = mmap(nullptr, kDecisionsBytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = "cannot map the decisions of run '" + name + "': " + std::strerror(errno);
        return nullptr;
    }
    const auto* decisions = static_cast<const RunDecisions*>(base);
    if (decisions->magic != kDecisionsMagic || decisions->layout_version != kLayoutVersion ||
        decisions->decisions_bytes != sizeof(RunDecisions) ||
        strncmp(decisions->run_name, name.c_str(), kRunNameBytes) != 0) {
        *error = "the decisions at " + path + " are not those of run '" + name +
                 "' (another run's, or another orion version's)";
        munmap(base, kDecisionsBytes);
        return nullptr;
    }
    return decisions;
}

}  // namespace

RunMapping::RunMapping(RunMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)),
      layout_(std::exchange(other.layout_, Layout{})),
      trace_capacity_(std::exchange(other.trace_capacity_, 0)),
      decisions_(std::exchange(other.decisions_, nullptr)),
      decisions_fd_(std::exchange(other.decisions_fd_, -1)) {}

RunMapping& RunMapping::operator=(RunMapping&& other) noexcept {
    if (this != &other) {
        release();
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
        name_ = std::move(other.name_);
        layout_ = std::exchange(other.layout_, Layout{});
        trace_capacity_ = std::exchange(other.trace_capacity_, 0);
        decisions_ = std::exchange(other.decisions_, nullptr);
        decisions_fd_ = std::exchange(other.decisions_fd_, -1);
    }
    return *this;
}

RunMapping::~RunMapping() { release(); }

void RunMapping::release() {
    if (base_ != nullptr) munmap(base_, size_);
    if (decisions_ != nullptr) munmap(decisions_, kDecisionsBytes);
    if (decisions_fd_ >= 0) close(decisions_fd_);
    base_ = nullptr;
    decisions_ = nullptr;
    decisions_fd_ = -1;
}

RunMapping RunMapping::create(const std::string& name, const RunConfig& config,
                              std::string* error) {
    if (name.empty() || name.size() >= kRunNameBytes) {
        *error = "a run's name must have 1 to " + std::to_string(kRunNameBytes - 1) +
                 " characters (got '" + name + "')";
        return {};
    }
    const std::uint32_t trace_capacity = round_up_pow2(config.trace_capacity);
    const Layout layout = compute_layout(trace_capacity);
    int decisions_fd = -1;
    RunDecisions* decisions = create_decisions(name, &decisions_fd, error);
    if (decisions == nullptr) return {};
    auto drop_decisions = [&] {
        munmap(decisions, kDecisionsBytes);
        close(decisions_fd);
    };
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        *error = describe("cannot create shared memory", name);
        drop_decisions();
        return {};
    }
    // The umask may have widened nothing, but make the 0600 promise explicit.
    fchmod(fd, S_IRUSR | S_IWUSR);
    if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
        *error = describe("cannot size shared memory", name);
        close(fd);
        shm_unlink(name.c_str());
        drop_decisions();
        return {};
    }
    void* base = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = describe("cannot map shared memory", name);
        shm_unlink(name.c_str());
        drop_decisions();
        return {};
    }
    // ftruncate zero-fills: every atomic starts at 0, every slot is free.
    auto* header = static_cast<RunHeader*>(base);
    header->magic = kMagic;
    header->layout_version = kLayoutVersion;
    header->header_bytes = sizeof(RunHeader);
    header->total_bytes = layout.total_bytes;
    header->trace_capacity = trace_capacity;
    header->clients_offset = layout.clients_offset;
    header->kernels_offset = layout.kernels_offset;
    header->inflight_offset = layout.inflight_offset;
    header->completion_offset = layout.completion_offset;
    header->completion_bytes = layout.completion_bytes;
    header->trace_offset = layout.trace_offset;
    header->graphs_offset = layout.graphs_offset;
    header->timeline_offset = layout.timeline_offset;
    header->gate_offset = layout.gate_offset;
    header->learned_offset = layout.learned_offset;
    decisions->magic = kDecisionsMagic;
    decisions->layout_version = kLayoutVersion;
    decisions->decisions_bytes = sizeof(RunDecisions);
    std::memcpy(decisions->run_name, name.c_str(), name.size() + 1);
    decisions->policy = static_cast<std::uint32_t>(config.policy);
    decisions->sm_count = config.sm_count;
    // An open run counts every slot (free ones take part in nothing); a closed one counts the
    // clients its controller adds before publishing.
    decisions->open_slots = config.open_slots ? 1 : 0;
    decisions->client_count = config.open_slots ? kMaxClients : 0;
    decisions->queue_limit_ns = config.queue_limit_ns;
    decisions->unknown_duration_ns = config.unknown_duration_ns;
    decisions->stale_ns = config.stale_ns;
    decisions->trace_capacity = trace_capacity;
    decisions->hp_completion = static_cast<std::uint32_t>(config.hp_completion);
    decisions->be_gate = static_cast<std::uint32_t>(config.be_gate);
    decisions->be_graph_gate = static_cast<std::uint32_t>(config.be_graph_gate);
    decisions->quotas = config.quotas ? 1 : 0;
    decisions->quota_window_ns = config.quota_window_ns;
    decisions->hp_quiet_ns = std::min(config.hp_quiet_ns, kMaxHpQuietNs);
    decisions->hp_priority_stream = config.hp_priority_stream ? 1 : 0;
    decisions->context_bytes = config.context_bytes;
    decisions->be_gate_spacing_ns = std::min(config.be_gate_spacing_ns, kMaxBeGateSpacingNs);
    for (std::uint32_t client = 0; client < kMaxClients; ++client) {
        write_slot_defaults(RunView(base, layout, trace_capacity, decisions), client);
    }
    return RunMapping(base, layout.total_bytes, name, trace_capacity, decisions, decisions_fd);
}

RunMapping RunMapping::attach(const std::string& name, const std::string& decisions_path,
                              std::string* error) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
        *error = describe("cannot open shared memory", name);
        return {};
    }
    struct stat info {};
    if (fstat(fd, &info) != 0 || static_cast<std::uint64_t>(info.st_size) < sizeof(RunHeader)) {
        *error = "shared memory '" + name + "' is too small to be an orion run";
        close(fd);
        return {};
    }
    const auto size = static_cast<std::uint64_t>(info.st_size);
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = describe("cannot map shared memory", name);
        return {};
    }
    const auto* header = static_cast<const RunHeader*>(base);
    const char* problem = nullptr;
    if (header->magic != kMagic) {
        problem = "is not an orion run (bad magic number)";
    } else if (header->layout_version != kLayoutVersion) {
        problem = "was made by another orion version (layout version differs)";
    } else if (header->header_bytes != sizeof(RunHeader) || header->total_bytes != size) {
        problem = "has an unexpected size (another orion version?)";
    } else if (!layout_matches(*header, size)) {
        problem = "has a corrupt layout (its regions' offsets are not where its trace capacity "
                  "puts them)";
    }
    if (problem != nullptr) {
        *error = "shared memory '" + name + "' " + problem;
        munmap(base, size);
        return {};
    }
    const RunDecisions* decisions = attach_decisions(name, decisions_path, error);
    if (decisions == nullptr) {
        munmap(base, size);
        return {};
    }
    // The trace capacity is the controller's word; the header's copy only has to agree.
    if (decisions->trace_capacity != header->trace_capacity) {
        *error = "shared memory '" + name + "' has a corrupt layout (its trace capacity is not "
                 "the one its controller decided)";
        munmap(base, size);
        munmap(const_cast<RunDecisions*>(decisions), kDecisionsBytes);
        return {};
    }
    // Read once, checked: from now on this process uses its own copy (RunView). The decisions
    // are mapped read-only: the non-const pointer only lets the view's type be one for every
    // process; a store through it faults.
    return RunMapping(base, size, name, decisions->trace_capacity,
                      const_cast<RunDecisions*>(decisions), -1);
}

bool RunMapping::unlink(const std::string& name, std::string* error) {
    if (shm_unlink(name.c_str()) != 0) {
        *error = describe("cannot remove shared memory", name);
        return false;
    }
    return true;
}

const char* state_name(std::uint32_t state) {
    static const char* const kNames[] = {"free",   "registered", "attached",
                                         "exited", "dead",       "reserved"};
    static_assert(std::size(kNames) == static_cast<std::size_t>(ClientState::kReserved) + 1);
    return name_of(kNames, state);
}

void check_client(const RunMapping& run, std::uint32_t client) {
    if (client >= run.view().decisions().client_count) {
        throw std::out_of_range("no client " + std::to_string(client) + " in run '" +
                                run.name() + "'");
    }
}

void require_controller(const RunMapping& run) {
    if (!run.controls()) {
        throw std::runtime_error("only the controller of run '" + run.name() +
                                 "' decides for it (this process attached to it)");
    }
}

void publish(const RunMapping& run) {
    require_controller(run);
    run.view().header().ready.store(1, std::memory_order_release);
}

bool needs_gate_keeper(const RunMapping& run) {
    const RunDecisions& decisions = run.view().decisions();
    return decisions.be_gate == static_cast<std::uint32_t>(BeGate::kGpu) &&
           (policy_tracks_launches(static_cast<Policy>(decisions.policy)) ||
            decisions.quotas != 0);
}

void set_queue_limit(const RunMapping& run, std::uint64_t queue_limit_ns,
                     std::uint64_t unknown_duration_ns) {
    require_controller(run);
    RunDecisions& decisions = run.view().decisions();
    decisions.queue_limit_ns = queue_limit_ns;
    decisions.unknown_duration_ns = unknown_duration_ns;
}

void set_hold_long_be(const RunMapping& run, bool hold) {
    require_controller(run);
    run.view().decisions().hold_long_be.store(hold ? 1 : 0, std::memory_order_release);
}

void set_hp_priority_stream(const RunMapping& run, bool move) {
    require_controller(run);
    // Written before the joining HP is answered, so it reads the value its context wants; an HP
    // that left meanwhile has no launches left to read it.
    run.view().decisions().hp_priority_stream = move ? 1 : 0;
}

void heartbeat(const RunMapping& run) {
    require_controller(run);
    run.view().decisions().daemon_heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
}

void shut_down(const RunMapping& run) {
    require_controller(run);
    run.view().decisions().shutdown.store(1, std::memory_order_release);
}

std::uint32_t add_client(const RunMapping& run, const std::string& name, Role role) {
    require_unpublished(run);
    require_controller(run);
    RunDecisions& header = run.view().decisions();
    if (header.open_slots != 0) {
        throw std::runtime_error("an open run's clients join with reserve_client");
    }
    if (header.client_count >= kMaxClients) {
        throw std::invalid_argument("a run holds at most " + std::to_string(kMaxClients) +
                                    " clients");
    }
    check_client_name(name);
    const std::uint32_t index = header.client_count;
    ClientSlot& slot = run.view().client(index);
    name_slot(run.view(), index, name, role);
    set_state(slot, ClientState::kRegistered);
    if (role == Role::kBestEffort) mark_best_effort(header, index);
    header.client_count = index + 1;
    return index;
}

int reserve_slot(const RunMapping& run, const std::string& name, Role role) {
    require_open(run);
    require_controller(run);
    check_client_name(name);
    for (std::uint32_t index = 0; index < kMaxClients; ++index) {
        ClientSlot& slot = run.view().client(index);
        auto expected = static_cast<std::uint32_t>(ClientState::kFree);
        if (!slot.state.compare_exchange_strong(
                expected, static_cast<std::uint32_t>(ClientState::kReserved),
                std::memory_order_acq_rel)) {
            continue;
        }
        name_slot(run.view(), index, name, role);
        return static_cast<int>(index);
    }
    return -1;
}

void register_slot(const RunMapping& run, std::uint32_t client, std::int32_t claim_pid) {
    require_state(run, client, ClientState::kReserved, "register");
    require_controller(run);
    ClientSlot& slot = run.view().client(client);
    slot.claim_pid.store(claim_pid, std::memory_order_release);
    slot.pid.store(0, std::memory_order_release);
    if (run.view().role(client) == Role::kBestEffort) {
        mark_best_effort(run.view().decisions(), client);
    }
    set_state(slot, ClientState::kRegistered);
}

std::vector<std::uint32_t> reap_slots(const RunMapping& run) {
    require_open(run);
    std::vector<std::uint32_t> gone;
    for (std::uint32_t index = 0; index < kMaxClients; ++index) {
        ClientSlot& slot = run.view().client(index);
        const auto state = static_cast<ClientState>(slot.state.load(std::memory_order_acquire));
        if (state == ClientState::kExited || state == ClientState::kDead) {
            drop_memory_use(run.view(), index);  // one that detached itself left its count
            gone.push_back(index);
            continue;
        }
        std::int32_t watched = 0;
        if (state == ClientState::kAttached) watched = slot.pid.load(std::memory_order_acquire);
        if (state == ClientState::kRegistered) {
            watched = slot.claim_pid.load(std::memory_order_acquire);
        }
        if (watched <= 0 || !process_is_gone(watched)) continue;
        // An attached process that is gone without detaching was killed; a claimer that ended
        // before any process attached simply ended (a program that never used the GPU).
        const ClientState end =
            state == ClientState::kAttached ? ClientState::kDead : ClientState::kExited;
        const ClientState seen = end_slot(run.view(), index, state, end);
        // An exited one detached in the meantime.
        if (seen == state || seen == ClientState::kExited) gone.push_back(index);
    }
    return gone;
}

bool expire_registered(const RunMapping& run, std::uint32_t client) {
    require_open(run);
    check_client(run, client);
    return end_slot(run.view(), client, ClientState::kRegistered, ClientState::kExited) ==
           ClientState::kRegistered;
}

void release_slot(const RunMapping& run, std::uint32_t client) {
    require_open(run);
    check_client(run, client);
    require_controller(run);
    const RunView v = run.view();
    ClientSlot& slot = v.client(client);
    const auto state = static_cast<ClientState>(slot.state.load(std::memory_order_acquire));
    if (state == ClientState::kAttached || state == ClientState::kFree) {
        throw std::runtime_error("client slot " + std::to_string(client) + " is " +
                                 state_name(static_cast<std::uint32_t>(state)) +
                                 ": only a slot whose process is gone can be released");
    }
    // Readers skip the slot from this store on (no longer attached).
    set_state(slot, ClientState::kReserved);
    drop_memory_use(v, client);
    // Those that shared its memory limit (its children) keep the limit, each on its own from now
    // on: the limit first, so that none sees its own limit unset while it counts on its own.
    const std::uint64_t limit = v.decision(client).memory_limit.load(std::memory_order_acquire);
    for (std::uint32_t other = 0; other < kMaxClients; ++other) {
        ClientDecision& sharer = v.decision(other);
        if (other == client || sharer.memory_account.load(std::memory_order_acquire) != client + 1) {
            continue;
        }
        sharer.memory_limit.store(limit, std::memory_order_release);
        sharer.memory_account.store(0, std::memory_order_release);
    }
    v.decisions().be_mask.fetch_and(~(1U << client), std::memory_order_acq_rel);
    for (std::uint32_t i = 0; i < kKernelSlots; ++i) {
        v.kernels(client)[i].key.store(0, std::memory_order_relaxed);
    }
    for (std::uint32_t i = 0; i < kGraphSlots; ++i) {
        v.graphs(client)[i].key.store(0, std::memory_order_relaxed);
    }
    for (std::uint32_t i = 0; i < kInflightSlots; ++i) {
        v.inflight(client)[i].seq.store(0, std::memory_order_relaxed);
        v.completion(client)[i].store(0, std::memory_order_relaxed);
    }
    for (std::uint32_t i = 0; i < v.trace_capacity(); ++i) {
        v.trace(client)[i].seq.store(0, std::memory_order_relaxed);
    }
    // Nothing of the old client is shared with the new one: its learned kernels go too (the
    // node and name pools are reached only through entries, which need no more clearing).
    std::memset(static_cast<void*>(&v.learned(client)), 0, offsetof(LearnedBlock, nodes));
    // Everything after the state word as a fresh shared-memory object has it: zero, but for the
    // defaults.
    auto* body = reinterpret_cast<unsigned char*>(&slot) + sizeof(slot.state);
    std::memset(static_cast<void*>(body), 0, sizeof(ClientSlot) - sizeof(slot.state));
    write_slot_defaults(v, client);
    set_state(slot, ClientState::kFree);
}

void mark_gone(const RunMapping& run, std::uint32_t client, bool crashed) {
    check_client(run, client);
    end_slot(run.view(), client, ClientState::kAttached,
             crashed ? ClientState::kDead : ClientState::kExited);
    // Its allocations died with its process, also when it detached before this call.
    drop_memory_use(run.view(), client);
}

void load_kernel(const RunMapping& run, std::uint32_t client, std::uint64_t key,
                 const ProfileEntry& kernel) {
    require_configurable(run, client);
    if (key == 0) throw std::invalid_argument("kernel key 0 is reserved");
    ClientSlot& slot = run.view().client(client);
    if (slot.kernel_count >= kKernelSlots / 2) {
        throw std::invalid_argument("a client's profile holds at most " +
                                    std::to_string(kKernelSlots / 2) + " distinct kernels");
    }
    bool claimed = false;
    KernelEntry* entry = find_or_claim_slot(run.view().kernels(client), kKernelSlots,
                                            kKernelSlots, key, key, entry_key, &claimed);
    // Never null: the table is at most half full. Nobody reads it yet (unpublished, or a
    // reserved slot), so the payload may follow the key.
    entry->duration_ns = kernel.duration_ns;
    entry->sm_needed = kernel.sm_needed;
    entry->kernel_class = static_cast<std::uint8_t>(kernel.kernel_class);
    if (claimed) ++slot.kernel_count;
}

void load_graph(const RunMapping& run, std::uint32_t client, std::uint64_t key,
                const ProfileEntry& graph, const std::vector<TimelineNode>& timeline) {
    require_configurable(run, client);
    if (key == 0) throw std::invalid_argument("graph key 0 is reserved");
    ClientSlot& slot = run.view().client(client);
    if (slot.timeline_count + timeline.size() > kTimelineNodes) {
        throw std::invalid_argument("a client's graphs hold at most " +
                                    std::to_string(kTimelineNodes) + " kernel nodes in all");
    }
    if (slot.graph_count >= kGraphSlots / 2) {
        throw std::invalid_argument("a client's profile holds at most " +
                                    std::to_string(kGraphSlots / 2) + " graphs");
    }
    for (const TimelineNode& node : timeline) {  // checked before anything is written
        if (node.end_ns < node.start_ns) {
            throw std::invalid_argument("a timeline node ends before it starts");
        }
    }
    bool claimed = false;
    GraphEntry* entry = find_or_claim_slot(run.view().graphs(client), kGraphSlots, kGraphSlots,
                                           key, key, entry_key, &claimed);
    // Never null: the table is at most half full; nobody reads it yet (see load_kernel).
    entry->duration_ns = graph.duration_ns;
    entry->sm_needed = graph.sm_needed;
    entry->node_count = graph.node_count;
    entry->kernel_class = static_cast<std::uint8_t>(graph.kernel_class);
    entry->timeline_first = slot.timeline_count;
    entry->timeline_count = static_cast<std::uint32_t>(timeline.size());
    TimelineNode* nodes = run.view().timeline(client) + slot.timeline_count;
    for (const TimelineNode& node : timeline) {
        *nodes = node;
        nodes->known = 1;
        ++nodes;
    }
    slot.timeline_count += entry->timeline_count;
    if (claimed) ++slot.graph_count;
}

void share_memory(const RunMapping& run, std::uint32_t client, std::uint32_t holder) {
    check_client(run, client);
    check_client(run, holder);
    require_controller(run);
    if (client == holder) throw std::invalid_argument("a client cannot share its own limit");
    const RunView v = run.view();
    if (v.decision(holder).memory_account.load(std::memory_order_acquire) != 0) {
        throw std::invalid_argument("client slot " + std::to_string(holder) +
                                    " shares another's memory limit: share that one's");
    }
    for (std::uint32_t other = 0; other < kMaxClients; ++other) {
        if (v.decision(other).memory_account.load(std::memory_order_acquire) == client + 1) {
            throw std::invalid_argument("client slot " + std::to_string(client) +
                                        " has others sharing its memory limit");
        }
    }
    // Its own limit says the shared one too (what status shows); the account decides.
    v.decision(client).memory_limit.store(
        v.decision(holder).memory_limit.load(std::memory_order_acquire), std::memory_order_release);
    v.decision(client).memory_account.store(holder + 1, std::memory_order_release);
}

void set_memory_limit(const RunMapping& run, std::uint32_t client, std::uint64_t bytes) {
    check_client(run, client);
    require_controller(run);
    run.view().decision(client).memory_limit.store(bytes, std::memory_order_release);
}

void set_quota(const RunMapping& run, std::uint32_t client, double min_util, double max_util) {
    check_client(run, client);
    require_controller(run);
    if (!(min_util >= 0 && min_util <= 1 && max_util >= 0 && max_util <= 1)) {
        throw std::invalid_argument("min_util and max_util must be between 0 and 1");
    }
    if (min_util > max_util) throw std::invalid_argument("min_util must not exceed max_util");
    ClientDecision& quota = run.view().decision(client);
    quota.min_ppm.store(share_ppm(min_util), std::memory_order_release);
    quota.max_ppm.store(share_ppm(max_util), std::memory_order_release);
}

}  // namespace orion
