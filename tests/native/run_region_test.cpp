// run_region's writers on their own: a closed run and an open (daemon's) run are configured through
// them, then read back through RunView the way a client process reads them: the slots, the BE
// mask, the profile tables and timelines, the shares and limits, what publishing forbids, and
// what releasing a slot resets. Prints "ok" or the first failure; exits 1 on one.
#include "run_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace orion;

int failures = 0;
void check(bool ok, const char* what) {
    if (!ok && failures++ == 0) std::printf("FAILED: %s\n", what);
}

// Whether `call` throws exactly an `Error` (the module's promise about its errors).
template <typename Error, typename Call>
bool throws(Call call) {
    try {
        call();
    } catch (const Error&) {
        return true;
    } catch (...) {
        return false;
    }
    return false;
}

std::uint32_t state_of(const RunView& view, std::uint32_t client) {
    return view.client(client).state.load();
}
constexpr auto as_word = [](ClientState state) { return static_cast<std::uint32_t>(state); };

// Where a process opens `run`'s decisions: through its controller's descriptor (this process's).
std::string path_of(const RunMapping& run) {
    return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(run.decisions_fd());
}

// What make_run says one process's CUDA context takes (RunDecisions::context_bytes, layout 16).
constexpr std::uint64_t kContextBytes = 612ULL << 20;

RunMapping make_run(const std::string& name, bool open_slots,
                    BeGraphGate graph_gate = BeGraphGate::kInside) {
    RunConfig config;
    config.context_bytes = kContextBytes;
    config.policy = Policy::kOrion;
    config.sm_count = 108;
    config.trace_capacity = 3;  // rounded up to 4
    config.be_gate = BeGate::kGpu;
    config.be_graph_gate = graph_gate;
    config.open_slots = open_slots;
    std::string error;
    RunMapping run = RunMapping::create(name, config, &error);
    if (!run.valid()) std::printf("FAILED: %s\n", error.c_str());
    return run;
}

void closed_run(const std::string& name) {
    const RunMapping run = make_run(name, false);
    if (!run.valid()) return ++failures, void();
    const RunView view = run.view();
    check(view.decisions().client_count == 0 && view.decisions().trace_capacity == 4,
          "a new closed run counts no client and a power-of-two trace");
    check(view.decisions().be_graph_gate == static_cast<std::uint32_t>(BeGraphGate::kInside),
          "BE graphs are gated inside unless the run says otherwise");
    check(add_client(run, "service", Role::kHighPriority) == 0, "the first client takes slot 0");
    check(add_client(run, "trainer", Role::kBestEffort) == 1, "the second takes slot 1");
    check(view.decisions().client_count == 2 && view.decisions().be_mask.load() == 0b10,
          "the run counts both; only the BE slot is in the mask");
    check(std::strcmp(view.client(1).name, "trainer") == 0 &&
              view.role(1) == Role::kBestEffort &&
              state_of(view, 1) == as_word(ClientState::kRegistered),
          "a client's name, role and state are read back");
    check(view.decision(0).max_ppm.load() == kFullShare &&
              (view.gates().gates[1].word.load() & kGateOpen) != 0,
          "a slot starts uncapped with its gate open");

    load_kernel(run, 0, 77, ProfileEntry{40, KernelClass::kCompute, 1000, 0});
    load_kernel(run, 0, 77, ProfileEntry{41, KernelClass::kCompute, 1200, 0});
    const KernelEntry* kernel = view.find_kernel(0, 77);
    check(kernel != nullptr && kernel->sm_needed == 41 && kernel->duration_ns == 1200 &&
              kernel->kernel_class == static_cast<std::uint8_t>(KernelClass::kCompute),
          "a kernel loaded twice is found with its latest figures");
    check(view.client(0).kernel_count == 1 && view.find_kernel(1, 77) == nullptr,
          "it counts once, in its own client's table only");

    std::vector<TimelineNode> nodes(2);
    nodes[0] = TimelineNode{0, 300, 20, static_cast<std::uint8_t>(KernelClass::kMemory), 0, {}};
    nodes[1] = TimelineNode{300, 900, 80, static_cast<std::uint8_t>(KernelClass::kCompute), 0, {}};
    load_graph(run, 1, 500, ProfileEntry{80, KernelClass::kUnknown, 900, 2}, nodes);
    load_graph(run, 1, 600, ProfileEntry{10, KernelClass::kMemory, 50, 1}, {nodes[0]});
    const GraphEntry* graph = view.find_graph(1, 600);
    check(graph != nullptr && graph->node_count == 1 && graph->timeline_first == 2 &&
              graph->timeline_count == 1,
          "a graph's timeline follows the nodes of the graphs loaded before it");
    const TimelineNode& second = view.timeline(1)[1];
    check(second.start_ns == 300 && second.end_ns == 900 && second.sm_needed == 80 &&
              second.known == 1,
          "timeline nodes are read back as loaded, marked known");
    check(view.client(1).graph_count == 2 && view.client(1).timeline_count == 3,
          "the client counts its graphs and timeline nodes");

    check(throws<std::invalid_argument>([&] { load_kernel(run, 0, 0, ProfileEntry{}); }),
          "key 0 (the empty slot) is refused");
    check(throws<std::out_of_range>([&] { load_kernel(run, 2, 9, ProfileEntry{}); }),
          "a client the run does not have is refused");
    nodes[1].end_ns = 100;
    check(throws<std::invalid_argument>([&] { load_graph(run, 1, 700, ProfileEntry{}, nodes); }) &&
              view.find_graph(1, 700) == nullptr && view.client(1).timeline_count == 3,
          "a node ending before it starts refuses the whole graph, writing nothing");
    check(throws<std::invalid_argument>([&] { add_client(run, "", Role::kBestEffort); }),
          "an empty client name is refused");

    set_quota(run, 1, 0.25, 0.5);
    set_memory_limit(run, 1, 1 << 20);
    check(view.decision(1).min_ppm.load() == 250'000 &&
              view.decision(1).max_ppm.load() == 500'000 &&
              view.decision(1).memory_limit.load() == (1 << 20),
          "shares and the memory limit are read back");
    check(throws<std::invalid_argument>([&] { set_quota(run, 1, 0.6, 0.5); }) &&
              view.decision(1).min_ppm.load() == 250'000,
          "a minimum above the maximum is refused, the shares kept");
    check(throws<std::runtime_error>([&] { reserve_slot(run, "late", Role::kBestEffort); }),
          "a closed run has no slots to reserve");

    publish(run);
    check(view.header().ready.load() == 1 && needs_gate_keeper(run), "publish sets ready");
    check(throws<std::runtime_error>([&] { add_client(run, "late", Role::kBestEffort); }) &&
              throws<std::runtime_error>([&] { load_kernel(run, 0, 78, ProfileEntry{}); }),
          "a published closed run takes no client and no profile");
    mark_gone(run, 0, true);
    check(state_of(view, 0) == as_word(ClientState::kRegistered),
          "mark_gone leaves a client that never attached as it was");
    std::string error;
    RunMapping::unlink(name, &error);
}

void open_run(const std::string& name) {
    const RunMapping run = make_run(name, true, BeGraphGate::kWhole);
    if (!run.valid()) return ++failures, void();
    const RunView view = run.view();
    check(view.decisions().be_graph_gate == static_cast<std::uint32_t>(BeGraphGate::kWhole),
          "a run that admits BE graphs whole says so in its header");
    publish(run);  // a daemon publishes first; clients join later
    check(view.decisions().client_count == kMaxClients, "an open run counts every slot");

    check(reserve_slot(run, "trainer", Role::kBestEffort) == 0, "a reserve takes a free slot");
    check(state_of(view, 0) == as_word(ClientState::kReserved) && view.decisions().be_mask.load() == 0,
          "a reserved slot is invisible: not registered, not in the mask");
    load_kernel(run, 0, 91, ProfileEntry{8, KernelClass::kMemory, 10, 0});
    set_quota(run, 0, 0, 0.5);
    check(throws<std::runtime_error>([&] { load_kernel(run, 1, 91, ProfileEntry{}); }),
          "a free slot takes no profile");
    register_slot(run, 0, getpid());
    check(state_of(view, 0) == as_word(ClientState::kRegistered) &&
              view.decisions().be_mask.load() == 0b1 && view.client(0).claim_pid.load() == getpid(),
          "registering makes the slot attachable and puts a BE slot in the mask");
    check(throws<std::runtime_error>([&] { load_kernel(run, 0, 92, ProfileEntry{}); }),
          "a registered slot's profile is fixed");
    check(reap_slots(run).empty(), "a slot whose claimer lives is not reaped");
    check(throws<std::runtime_error>([&] { release_slot(run, 1); }), "a free slot is not released");

    // The claimer ends before any process attached: reaped as exited.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    view.client(0).claim_pid.store(child);
    const std::vector<std::uint32_t> gone = reap_slots(run);
    check(gone.size() == 1 && gone[0] == 0 && state_of(view, 0) == as_word(ClientState::kExited),
          "a slot whose claimer ended is reaped as exited");
    release_slot(run, 0);
    check(state_of(view, 0) == as_word(ClientState::kFree) && view.find_kernel(0, 91) == nullptr &&
              view.client(0).kernel_count == 0 && view.decisions().be_mask.load() == 0 &&
              view.decision(0).max_ppm.load() == kFullShare && view.client(0).name[0] == '\0',
          "releasing empties the table, the mask bit, the name, and restores the defaults");

    // A process attached, then died without detaching: reaped as dead, its memory use zeroed.
    check(reserve_slot(run, "service", Role::kHighPriority) == 0, "a released slot is reused");
    register_slot(run, 0, getpid());
    view.client(0).pid.store(child);
    view.client(0).memory.used.store(4096);
    view.client(0).state.store(as_word(ClientState::kAttached));
    check(throws<std::runtime_error>([&] { release_slot(run, 0); }), "an attached slot is kept");
    check(reap_slots(run).size() == 1 && state_of(view, 0) == as_word(ClientState::kDead) &&
              view.client(0).memory.used.load() == 0,
          "an attached slot whose process is gone is reaped as dead, its memory zeroed");

    for (std::uint32_t i = 1; i < kMaxClients; ++i) reserve_slot(run, "filler", Role::kBestEffort);
    check(reserve_slot(run, "one-too-many", Role::kBestEffort) == -1, "a full run reserves nothing");

    set_queue_limit(run, 5000, 700);
    heartbeat(run);
    shut_down(run);
    check(view.decisions().queue_limit_ns == 5000 &&
              view.decisions().unknown_duration_ns == 700 &&
              view.decisions().daemon_heartbeat_ns.load() != 0 &&
              view.decisions().shutdown.load() == 1,
          "the queue bound, the heartbeat and the shutdown word are read back");
    std::string error;
    RunMapping::unlink(name, &error);
}

// Any process that maps a run can write its header: a region offset written wrong there moves
// nothing for a process already attached (its view keeps its own copy), and a process attaching
// afterwards is refused rather than sent reading out of bounds.
void corrupted_offsets(const std::string& name) {
    RunMapping run = make_run(name, true);
    if (!run.valid()) return ++failures, void();
    const int slot = reserve_slot(run, "job", Role::kBestEffort);
    ClientSlot* before = &run.view().client(static_cast<std::uint32_t>(slot));
    RunHeader& header = run.view().header();
    header.clients_offset = ~std::uint64_t{0} - 4096;  // far past the mapping
    header.trace_capacity = 1U << 30;
    check(&run.view().client(static_cast<std::uint32_t>(slot)) == before &&
              run.view().trace_capacity() == 4,
          "an attached view keeps its own offsets and trace capacity");
    check(std::strcmp(run.view().client(static_cast<std::uint32_t>(slot)).name, "job") == 0,
          "the slot is read where it is");
    std::string error;
    const std::string decisions = path_of(run);
    RunMapping late = RunMapping::attach(name, decisions, &error);
    check(!late.valid() && error.find("has a corrupt layout") != std::string::npos,
          "a process attaching to a run with a corrupt header is refused");
    header.trace_capacity = 4;
    late = RunMapping::attach(name, decisions, &error);
    check(!late.valid() && error.find("has a corrupt layout") != std::string::npos,
          "one wrong offset is enough to refuse");
    header.clients_offset = compute_layout(4).clients_offset;
    late = RunMapping::attach(name, decisions, &error);
    check(late.valid() &&
              std::strcmp(late.view().client(static_cast<std::uint32_t>(slot)).name, "job") == 0,
          "mended, it attaches again (a view moved with its mapping keeps its offsets)");
    RunMapping::unlink(name, &error);
}

// What the controller decides is sealed (shared_state.h, RunDecisions): a process that attached
// maps it read-only, cannot map it writable or write it by any other route, its stores fault,
// and the region's writers refuse it; a segment that is not sealed, or another run's, is refused.
void sealed_decisions(const std::string& name) {
    RunMapping run = make_run(name, true);
    if (!run.valid()) return ++failures, void();
    const int slot = reserve_slot(run, "trainer", Role::kBestEffort);
    set_memory_limit(run, static_cast<std::uint32_t>(slot), 1 << 20);
    set_quota(run, static_cast<std::uint32_t>(slot), 0.1, 0.5);
    register_slot(run, static_cast<std::uint32_t>(slot), getpid());
    publish(run);
    const std::string path = path_of(run);
    std::string error;
    RunMapping client = RunMapping::attach(name, path, &error);
    check(client.valid(), "a client attaches with the path to the controller's descriptor");
    if (!client.valid()) return std::printf("  %s\n", error.c_str()), void();
    const auto index = static_cast<std::uint32_t>(slot);
    const RunView mine = client.view();
    check(mine.role(index) == Role::kBestEffort &&
              mine.decision(index).memory_limit.load() == (1 << 20) &&
              mine.decision(index).max_ppm.load() == 500'000 &&
              mine.decisions().be_mask.load() == (1U << index) && !client.controls(),
          "the client reads the controller's decisions");
    check(mine.decisions().context_bytes == kContextBytes,
          "the client reads what a CUDA context takes, which it counts in its use");
    set_memory_limit(run, index, 2 << 20);
    check(mine.decision(index).memory_limit.load() == (2 << 20),
          "a change the controller makes is seen by the client at once");

    // Every route to writing the segment is closed to the client.
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    check(fd >= 0, "the descriptor can be opened (the seals, not the mode, protect it)");
    void* writable = mmap(nullptr, kDecisionsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    check(writable == MAP_FAILED && errno == EPERM, "it cannot be mapped writable");
    const std::uint32_t role = static_cast<std::uint32_t>(Role::kHighPriority);
    check(pwrite(fd, &role, sizeof role, 0) < 0 && errno == EPERM, "it cannot be written");
    check(ftruncate(fd, 0) != 0, "it cannot be shrunk under its readers");
    void* shared = mmap(nullptr, kDecisionsBytes, PROT_READ, MAP_SHARED, fd, 0);
    check(shared != MAP_FAILED && mprotect(shared, kDecisionsBytes, PROT_READ | PROT_WRITE) != 0,
          "a read-only mapping cannot be made writable");
    if (shared != MAP_FAILED) munmap(shared, kDecisionsBytes);
    if (fd >= 0) close(fd);
    check(throws<std::runtime_error>([&] { set_memory_limit(client, index, 0); }) &&
              throws<std::runtime_error>([&] { set_quota(client, index, 1, 1); }) &&
              throws<std::runtime_error>([&] { shut_down(client); }) &&
              throws<std::runtime_error>([&] { heartbeat(client); }),
          "the region's writers refuse a process that is not the run's controller");
    // A store through the client's own mapping faults (in a child: it dies of SIGSEGV).
    const pid_t child = fork();
    if (child == 0) {
        mine.decision(index).role.store(role);
        mine.decisions().be_mask.store(0);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
          "a client's store into the decisions faults");
    check(run.view().role(index) == Role::kBestEffort &&
              run.view().decisions().be_mask.load() == (1U << index),
          "and changes nothing the controller decided");

    // Decisions anyone could write, or another run's, are refused.
    const int loose = memfd_create("loose", MFD_CLOEXEC);
    check(loose >= 0 && ftruncate(loose, static_cast<off_t>(kDecisionsBytes)) == 0 &&
              pwrite(loose, &run.view().decisions(), sizeof(RunDecisions), 0) == static_cast<ssize_t>(sizeof(RunDecisions)),
          "a copy of the decisions, unsealed");
    const std::string loose_path = "/proc/" + std::to_string(getpid()) + "/fd/" +
                                   std::to_string(loose);
    RunMapping forged = RunMapping::attach(name, loose_path, &error);
    check(!forged.valid() && error.find("not a sealed orion segment") != std::string::npos,
          "an unsealed segment is refused, whatever it holds");
    close(loose);
    RunMapping other = make_run(name + "-other", true);
    forged = RunMapping::attach(name, path_of(other), &error);
    check(!forged.valid() && error.find("are not those of run") != std::string::npos,
          "another run's decisions are refused");
    forged = RunMapping::attach(name, "", &error);
    check(!forged.valid() && error.find("ORION_DECISIONS") != std::string::npos,
          "no decisions at all are refused, naming the variable");
    RunMapping::unlink(name + "-other", &error);
    RunMapping::unlink(name, &error);
}

// A BE client's child shares its parent's memory limit (share_memory): the child's use comes back
// out of the parent's when the child ends, and the child keeps the limit on its own once the
// parent's slot is released.
void shared_memory_limit(const std::string& name) {
    RunMapping run = make_run(name, true);
    if (!run.valid()) return ++failures, void();
    publish(run);
    const RunView view = run.view();
    const auto parent = static_cast<std::uint32_t>(reserve_slot(run, "loader", Role::kBestEffort));
    set_memory_limit(run, parent, 8000);
    register_slot(run, parent, getpid());
    const auto child = static_cast<std::uint32_t>(reserve_slot(run, "loader.1", Role::kBestEffort));
    share_memory(run, child, parent);
    register_slot(run, child, getpid());
    check(view.decision(child).memory_account.load() == parent + 1 &&
              view.decision(child).memory_limit.load() == 8000,
          "the child counts against its parent's slot, and says the parent's limit");
    const auto grandchild =
        static_cast<std::uint32_t>(reserve_slot(run, "loader.2", Role::kBestEffort));
    check(throws<std::invalid_argument>([&] { share_memory(run, grandchild, child); }) &&
              throws<std::invalid_argument>([&] { share_memory(run, parent, grandchild); }),
          "no chains: a sharer's own limit is not shared, nor a holder made a sharer");
    // What the two processes hold (as their ledgers count it), then the child is gone.
    view.client(parent).memory.used.store(5000 + 2000);
    view.client(child).memory.used.store(2000);
    view.client(child).state.store(as_word(ClientState::kExited));
    const std::vector<std::uint32_t> gone = reap_slots(run);
    check(gone.size() == 1 && view.client(parent).memory.used.load() == 5000 &&
              view.client(child).memory.used.load() == 0,
          "a child that ended gives its use back out of its parent's");
    release_slot(run, child);
    check(view.decision(child).memory_account.load() == 0, "a released slot shares nothing");

    share_memory(run, grandchild, parent);
    view.client(parent).state.store(as_word(ClientState::kExited));
    reap_slots(run);
    release_slot(run, parent);
    check(view.decision(grandchild).memory_account.load() == 0 &&
              view.decision(grandchild).memory_limit.load() == 8000,
          "once the parent's slot is released, its child keeps the limit on its own");
    std::atomic<std::uint64_t> count{100};
    subtract_at_most(count, 300);
    check(count.load() == 0, "a shared count never goes below zero");
    std::string error;
    RunMapping::unlink(name, &error);
}

}  // namespace

int main() {
    const std::string prefix = "/orion-region-test-" + std::to_string(getpid());
    closed_run(prefix + "-closed");
    open_run(prefix + "-open");
    corrupted_offsets(prefix + "-corrupt");
    sealed_decisions(prefix + "-sealed");
    shared_memory_limit(prefix + "-shared");
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
}
