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
    if (run.view().header().open_slots == 0) {
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
    if (run.view().header().open_slots != 0) {
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

// Moves `slot` from `from` to `end` (exited or dead) unless its state changed meanwhile, then
// zeroes its memory use: its allocations died with its process. Returns the state it saw (`from`
// when this call moved it).
ClientState end_slot(ClientSlot& slot, ClientState from, ClientState end) {
    auto expected = static_cast<std::uint32_t>(from);
    if (!slot.state.compare_exchange_strong(expected, static_cast<std::uint32_t>(end),
                                            std::memory_order_acq_rel)) {
        return static_cast<ClientState>(expected);
    }
    slot.memory.used.store(0, std::memory_order_release);
    return from;
}

void name_slot(ClientSlot& slot, const std::string& name, Role role) {
    slot.role = static_cast<std::uint32_t>(role);
    std::memcpy(slot.name, name.data(), name.size());
    slot.name[name.size()] = '\0';
}

void set_state(ClientSlot& slot, ClientState state) {
    slot.state.store(static_cast<std::uint32_t>(state), std::memory_order_release);
}

// What a free slot holds that is not zero: no cap on its GPU time, and its gate open (nothing is
// held until an HP client launches).
void write_slot_defaults(const RunView& run, std::uint32_t client) {
    run.client(client).quota.max_ppm.store(kFullShare, std::memory_order_relaxed);
    run.gates().gates[client].word.store(kGateOpen, std::memory_order_release);
}

// The gates an HP launch closes: one bit per BE slot.
void mark_best_effort(RunHeader& header, std::uint32_t client) {
    header.be_mask.fetch_or(1U << client, std::memory_order_acq_rel);
}

}  // namespace

RunMapping::RunMapping(RunMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)),
      layout_(std::exchange(other.layout_, Layout{})),
      trace_capacity_(std::exchange(other.trace_capacity_, 0)) {}

RunMapping& RunMapping::operator=(RunMapping&& other) noexcept {
    if (this != &other) {
        if (base_ != nullptr) munmap(base_, size_);
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
        name_ = std::move(other.name_);
        layout_ = std::exchange(other.layout_, Layout{});
        trace_capacity_ = std::exchange(other.trace_capacity_, 0);
    }
    return *this;
}

RunMapping::~RunMapping() {
    if (base_ != nullptr) munmap(base_, size_);
}

RunMapping RunMapping::create(const std::string& name, const RunConfig& config,
                              std::string* error) {
    const std::uint32_t trace_capacity = round_up_pow2(config.trace_capacity);
    const Layout layout = compute_layout(trace_capacity);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        *error = describe("cannot create shared memory", name);
        return {};
    }
    // The umask may have widened nothing, but make the 0600 promise explicit.
    fchmod(fd, S_IRUSR | S_IWUSR);
    if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
        *error = describe("cannot size shared memory", name);
        close(fd);
        shm_unlink(name.c_str());
        return {};
    }
    void* base = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = describe("cannot map shared memory", name);
        shm_unlink(name.c_str());
        return {};
    }
    // ftruncate zero-fills: every atomic starts at 0, every slot is free.
    auto* header = static_cast<RunHeader*>(base);
    header->magic = kMagic;
    header->layout_version = kLayoutVersion;
    header->header_bytes = sizeof(RunHeader);
    header->total_bytes = layout.total_bytes;
    header->policy = static_cast<std::uint32_t>(config.policy);
    header->sm_count = config.sm_count;
    // An open run counts every slot (free ones take part in nothing); a closed one counts the
    // clients its controller adds before publishing.
    header->open_slots = config.open_slots ? 1 : 0;
    header->client_count = config.open_slots ? kMaxClients : 0;
    header->queue_limit_ns = config.queue_limit_ns;
    header->unknown_duration_ns = config.unknown_duration_ns;
    header->stale_ns = config.stale_ns;
    header->trace_capacity = trace_capacity;
    header->hp_completion = static_cast<std::uint32_t>(config.hp_completion);
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
    header->be_gate = static_cast<std::uint32_t>(config.be_gate);
    header->be_graph_gate = static_cast<std::uint32_t>(config.be_graph_gate);
    header->quotas = config.quotas ? 1 : 0;
    header->quota_window_ns = config.quota_window_ns;
    header->hp_quiet_ns = std::min(config.hp_quiet_ns, kMaxHpQuietNs);
    for (std::uint32_t client = 0; client < kMaxClients; ++client) {
        write_slot_defaults(RunView(base, layout, trace_capacity), client);
    }
    return RunMapping(base, layout.total_bytes, name, trace_capacity);
}

RunMapping RunMapping::attach(const std::string& name, std::string* error) {
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
    // Read once, checked: from now on this process uses its own copy (RunView).
    return RunMapping(base, size, name, header->trace_capacity);
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
    if (client >= run.view().header().client_count) {
        throw std::out_of_range("no client " + std::to_string(client) + " in run '" +
                                run.name() + "'");
    }
}

void publish(const RunMapping& run) {
    run.view().header().ready.store(1, std::memory_order_release);
}

bool needs_gate_keeper(const RunMapping& run) {
    const RunHeader& header = run.view().header();
    return header.be_gate == static_cast<std::uint32_t>(BeGate::kGpu) &&
           (policy_tracks_launches(static_cast<Policy>(header.policy)) || header.quotas != 0);
}

void set_queue_limit(const RunMapping& run, std::uint64_t queue_limit_ns,
                     std::uint64_t unknown_duration_ns) {
    RunHeader& header = run.view().header();
    header.queue_limit_ns = queue_limit_ns;
    header.unknown_duration_ns = unknown_duration_ns;
}

void set_hold_long_be(const RunMapping& run, bool hold) {
    run.view().header().hold_long_be.store(hold ? 1 : 0, std::memory_order_release);
}

void heartbeat(const RunMapping& run) {
    run.view().header().daemon_heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
}

void shut_down(const RunMapping& run) {
    run.view().header().shutdown.store(1, std::memory_order_release);
}

std::uint32_t add_client(const RunMapping& run, const std::string& name, Role role) {
    require_unpublished(run);
    RunHeader& header = run.view().header();
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
    name_slot(slot, name, role);
    set_state(slot, ClientState::kRegistered);
    if (role == Role::kBestEffort) mark_best_effort(header, index);
    header.client_count = index + 1;
    return index;
}

int reserve_slot(const RunMapping& run, const std::string& name, Role role) {
    require_open(run);
    check_client_name(name);
    for (std::uint32_t index = 0; index < kMaxClients; ++index) {
        ClientSlot& slot = run.view().client(index);
        auto expected = static_cast<std::uint32_t>(ClientState::kFree);
        if (!slot.state.compare_exchange_strong(
                expected, static_cast<std::uint32_t>(ClientState::kReserved),
                std::memory_order_acq_rel)) {
            continue;
        }
        name_slot(slot, name, role);
        return static_cast<int>(index);
    }
    return -1;
}

void register_slot(const RunMapping& run, std::uint32_t client, std::int32_t claim_pid) {
    require_state(run, client, ClientState::kReserved, "register");
    ClientSlot& slot = run.view().client(client);
    slot.claim_pid.store(claim_pid, std::memory_order_release);
    slot.pid.store(0, std::memory_order_release);
    if (slot.role == static_cast<std::uint32_t>(Role::kBestEffort)) {
        mark_best_effort(run.view().header(), client);
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
        const ClientState seen = end_slot(slot, state, end);
        // An exited one detached in the meantime.
        if (seen == state || seen == ClientState::kExited) gone.push_back(index);
    }
    return gone;
}

bool expire_registered(const RunMapping& run, std::uint32_t client) {
    require_open(run);
    check_client(run, client);
    ClientSlot& slot = run.view().client(client);
    return end_slot(slot, ClientState::kRegistered, ClientState::kExited) ==
           ClientState::kRegistered;
}

void release_slot(const RunMapping& run, std::uint32_t client) {
    require_open(run);
    check_client(run, client);
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
    v.header().be_mask.fetch_and(~(1U << client), std::memory_order_acq_rel);
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
    ClientSlot& slot = run.view().client(client);
    end_slot(slot, ClientState::kAttached, crashed ? ClientState::kDead : ClientState::kExited);
    // Its allocations died with its process, also when it detached before this call.
    slot.memory.used.store(0, std::memory_order_release);
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

void set_memory_limit(const RunMapping& run, std::uint32_t client, std::uint64_t bytes) {
    check_client(run, client);
    run.view().client(client).memory.limit.store(bytes, std::memory_order_release);
}

void set_quota(const RunMapping& run, std::uint32_t client, double min_util, double max_util) {
    check_client(run, client);
    if (!(min_util >= 0 && min_util <= 1 && max_util >= 0 && max_util <= 1)) {
        throw std::invalid_argument("min_util and max_util must be between 0 and 1");
    }
    if (min_util > max_util) throw std::invalid_argument("min_util must not exceed max_util");
    ClientQuota& quota = run.view().client(client).quota;
    quota.min_ppm.store(share_ppm(min_util), std::memory_order_release);
    quota.max_ppm.store(share_ppm(max_util), std::memory_order_release);
}

}  // namespace orion
