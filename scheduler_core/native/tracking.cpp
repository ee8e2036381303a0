#include "tracking.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace orion {
namespace {

constexpr std::uint64_t kRingMask = kInflightSlots - 1;
// Bound on the work one snapshot does per client; a longer unfinished run of launches is treated
// as "a lot of work queued", which makes a BE client wait: the safe answer.
constexpr std::uint64_t kMaxScan = 1024;

}  // namespace

bool launch_finished(const RunView& view, std::uint32_t client, std::uint64_t seq,
                     std::uint64_t now_ns) {
    InflightLaunch launch;
    const std::uint64_t stored = read_inflight(view.inflight(client)[seq & kRingMask], seq, &launch);
    if (stored > seq) return true;   // the slot was reused by a later launch: this one is long done
    if (stored != seq) return false;  // not yet published, or being rewritten: count it in flight
    if (view.completion(client)[seq & kRingMask].load(std::memory_order_acquire) == seq) {
        return true;
    }
    const RunDecisions& decisions = view.decisions();
    if (decisions.stale_ns != 0 && now_ns > launch.launch_ns + decisions.stale_ns) return true;
    if (launch.gpu_written) return false;  // a graph: only its written completion ends it
    const auto mode = view.client(client).completion_mode.load(std::memory_order_relaxed);
    return mode == static_cast<std::uint32_t>(CompletionMode::kEstimate) &&
           now_ns >= launch.expected_end_ns;
}

std::uint64_t advance_low_water(const RunView& view, std::uint32_t client, std::uint64_t now_ns) {
    ClientSlot& slot = view.client(client);
    std::uint64_t low = slot.low_water.load(std::memory_order_acquire);
    const std::uint64_t published = slot.published_seq.load(std::memory_order_acquire);
    std::uint64_t mark = low;
    while (mark < published && mark - low < kInflightSlots &&
           launch_finished(view, client, mark + 1, now_ns)) {
        ++mark;
    }
    while (mark > low &&
           !slot.low_water.compare_exchange_weak(low, mark, std::memory_order_acq_rel)) {
    }
    return mark > low ? mark : low;
}

namespace {

// Adds `info` as an HP kernel in flight; false when the snapshot is full (HP backlog set).
bool add_hp_kernel(Snapshot* out, const KernelInfo& info) {
    if (out->hp_in_flight == kMaxHpInspected) {
        out->hp_backlog = true;
        return false;
    }
    out->hp_kernels[out->hp_in_flight++] = info;
    return true;
}

// An HP graph in flight, as the kernels of its profiled timeline expected to run between now and
// now + horizon. The graph's start is estimated from its expected end (launch or the end of the
// work queued before it, plus its profiled span); if it has run past its profiled end and the GPU
// has not written its completion, nothing about it is predictable any more: all SMs, unknown.
// Returns false when the snapshot filled up.
bool add_hp_graph(const RunView& view, std::uint32_t client, const InflightLaunch& launch,
                  std::uint64_t now_ns, std::uint64_t horizon_ns, Snapshot* out) {
    const GraphEntry* graph = view.find_graph(client, launch.key);
    if (graph == nullptr || graph->timeline_count == 0 || graph->duration_ns == 0) {
        KernelInfo whole;
        whole.known = launch.known;
        whole.sm_needed = launch.sm_needed;
        whole.kernel_class = static_cast<KernelClass>(launch.kernel_class);
        whole.duration_ns = launch.duration_ns;
        return add_hp_kernel(out, whole);
    }
    const std::uint64_t start =
        launch.expected_end_ns > graph->duration_ns ? launch.expected_end_ns - graph->duration_ns : 0;
    const std::uint64_t from = now_ns > start ? now_ns - start : 0;
    if (from >= graph->duration_ns) {
        KernelInfo overran;
        overran.sm_needed = view.decisions().sm_count;
        overran.duration_ns = view.decisions().unknown_duration_ns;
        return add_hp_kernel(out, overran);
    }
    const std::uint64_t to = from + horizon_ns;
    const TimelineNode* nodes = view.timeline(client) + graph->timeline_first;
    for (std::uint32_t i = 0; i < graph->timeline_count; ++i) {
        const TimelineNode& node = nodes[i];
        if (node.end_ns <= from || node.start_ns > to) continue;  // not running in [from, to]
        KernelInfo info;
        info.known = node.known != 0;
        info.sm_needed = node.sm_needed;
        info.kernel_class = static_cast<KernelClass>(node.kernel_class);
        info.duration_ns = node.end_ns - node.start_ns;
        // A waiting BE client should look again when this kernel ends, not when the graph does.
        if (start + node.end_ns < out->earliest_end_ns || out->earliest_end_ns == 0) {
            out->earliest_end_ns = start + node.end_ns;
        }
        if (!add_hp_kernel(out, info)) return false;
    }
    return true;
}

}  // namespace

void gather_snapshot(const RunView& view, std::uint64_t now_ns, std::uint64_t horizon_ns,
                     Snapshot* out) {
    const RunDecisions& decisions = view.decisions();
    out->sm_count = decisions.sm_count;
    out->queue_limit_ns = decisions.queue_limit_ns;
    out->be_outstanding_ns = 0;
    out->hp_in_flight = 0;
    out->hp_backlog = false;
    out->earliest_end_ns = 0;
    out->sampling_hold = sampling_hold_in_force(view.header(), now_ns);
    out->hp_quiet_until_ns = hp_quiet_until_ns(view, now_ns);
    for (std::uint32_t client = 0; client < decisions.client_count && client < kMaxClients;
         ++client) {
        const ClientSlot& slot = view.client(client);
        if (!client_participates(slot)) continue;
        const bool is_hp = view.role(client) == Role::kHighPriority;
        const std::uint64_t low = advance_low_water(view, client, now_ns);
        const std::uint64_t published = slot.published_seq.load(std::memory_order_acquire);
        if (published <= low) continue;
        if (published - low > kMaxScan) {
            if (is_hp) {
                out->hp_backlog = true;
            } else {
                out->be_outstanding_ns = ~0ULL >> 1;
            }
            continue;
        }
        const InflightEntry* ring = view.inflight(client);
        for (std::uint64_t seq = low + 1; seq <= published; ++seq) {
            if (launch_finished(view, client, seq, now_ns)) continue;
            InflightLaunch launch;
            KernelInfo info;
            const bool consistent = read_inflight(ring[seq & kRingMask], seq, &launch) == seq;
            if (!consistent) {
                info.duration_ns = decisions.unknown_duration_ns;  // being rewritten: the worst case
                info.sm_needed = decisions.sm_count;
            } else {
                info.known = launch.known;
                info.sm_needed = launch.sm_needed;
                info.kernel_class = static_cast<KernelClass>(launch.kernel_class);
                info.duration_ns = launch.duration_ns;
                if (out->earliest_end_ns == 0 || launch.expected_end_ns < out->earliest_end_ns) {
                    out->earliest_end_ns = launch.expected_end_ns;
                }
            }
            if (is_hp) {
                const bool room = consistent && launch.graph && launch.known
                                      ? add_hp_graph(view, client, launch, now_ns, horizon_ns, out)
                                      : add_hp_kernel(out, info);
                if (!room) break;
            } else {
                out->be_outstanding_ns += info.duration_ns;
            }
        }
    }
    // Nothing changes for a held BE launch before the hold and the HP's quiet spell end (an HP
    // launch meanwhile only makes the spell longer): it sleeps until then.
    if (out->sampling_hold || out->hp_quiet_until_ns != 0) {
        const std::uint64_t hold_end =
            out->sampling_hold ? view.header().sampling_hold_until_ns.load(std::memory_order_acquire) : 0;
        out->earliest_end_ns = std::max(hold_end, out->hp_quiet_until_ns);
    }
}

bool client_has_work(const RunView& view, std::uint32_t client, std::uint64_t now_ns) {
    const ClientSlot& slot = view.client(client);
    const std::uint64_t published = slot.published_seq.load(std::memory_order_acquire);
    if (published == 0) return false;
    if (slot.completion_mode.load(std::memory_order_acquire) ==
        static_cast<std::uint32_t>(CompletionMode::kGpuWrite)) {
        // Launches finish in order per stream, not across streams: the newest one being done
        // says little about the others, so ask the low-water mark too, without staleness.
        if (view.completion(client)[published & kRingMask].load(std::memory_order_acquire) !=
            published) {
            return true;
        }
    }
    return published > advance_low_water(view, client, now_ns);
}

bool is_attached_best_effort(const RunView& view, std::uint32_t client) {
    const RunDecisions& decisions = view.decisions();
    const bool best_effort =
        decisions.open_slots != 0
            ? (decisions.be_mask.load(std::memory_order_acquire) & (1U << client)) != 0
            : view.role(client) == Role::kBestEffort;
    return best_effort && client_participates(view.client(client));
}

bool be_may_run(const RunView& view, std::uint64_t now_ns) {
    const RunDecisions& decisions = view.decisions();
    for (std::uint32_t client = 0; client < decisions.client_count && client < kMaxClients;
         ++client) {
        if (!is_attached_best_effort(view, client)) continue;
        const ClientSlot& slot = view.client(client);
        const std::uint64_t low = advance_low_water(view, client, now_ns);
        const std::uint64_t published = slot.published_seq.load(std::memory_order_acquire);
        if (published <= low) continue;
        if (published - low > kMaxScan) return true;  // too much to look at: assume it runs
        const InflightEntry* ring = view.inflight(client);
        for (std::uint64_t seq = low + 1; seq <= published; ++seq) {
            if (launch_finished(view, client, seq, now_ns)) continue;
            InflightLaunch launch;
            if (read_inflight(ring[seq & kRingMask], seq, &launch) != seq) return true;
            if (launch.guard_seq == 0 || launch.guard_seq > seq) return true;
            // Its guard's word: the guard's started mark or finish, or a later launch's number
            // (the ring wrapped: the guard is long done), means the wait was passed.
            const std::uint64_t word =
                view.completion(client)[launch.guard_seq & kRingMask].load(std::memory_order_acquire);
            if ((word & ~kStartedMark) >= launch.guard_seq) return true;
        }
    }
    return false;
}

namespace {

// When the newest published launch of `client` was made (monotonic ns), 0 if none.
std::uint64_t newest_launch_ns(const RunView& view, std::uint32_t client) {
    const std::uint64_t seq = view.client(client).published_seq.load(std::memory_order_acquire);
    InflightLaunch launch;
    if (seq != 0 && read_inflight(view.inflight(client)[seq & kRingMask], seq, &launch) == seq) {
        return launch.launch_ns;
    }
    return 0;
}

}  // namespace

std::uint64_t hp_last_launch_ns(const RunView& view) {
    const RunDecisions& decisions = view.decisions();
    std::uint64_t newest = 0;
    for (std::uint32_t client = 0; client < decisions.client_count && client < kMaxClients;
         ++client) {
        if (view.role(client) != Role::kHighPriority || !client_participates(view.client(client))) {
            continue;
        }
        newest = std::max(newest, newest_launch_ns(view, client));
    }
    return newest;
}

std::uint64_t be_last_launch_ns(const RunView& view) {
    const RunDecisions& decisions = view.decisions();
    std::uint64_t newest = 0;
    for (std::uint32_t client = 0; client < decisions.client_count && client < kMaxClients;
         ++client) {
        if (is_attached_best_effort(view, client)) {
            newest = std::max(newest, newest_launch_ns(view, client));
        }
    }
    return newest;
}

KernelInfo next_be_batch(const RunView& view, std::uint32_t client, std::uint64_t now_ns) {
    const RunDecisions& decisions = view.decisions();
    KernelInfo batch;
    const ClientSlot& slot = view.client(client);
    const std::uint64_t low = client_participates(slot) ? advance_low_water(view, client, now_ns) : 0;
    const std::uint64_t published = slot.published_seq.load(std::memory_order_acquire);
    const InflightEntry* ring = view.inflight(client);
    bool first = true;
    for (std::uint64_t seq = low + 1; client_participates(slot) && seq <= published &&
                                      seq - low <= kMaxScan;
         ++seq) {
        if (!first && batch.duration_ns >= decisions.queue_limit_ns) break;
        if (launch_finished(view, client, seq, now_ns)) continue;
        InflightLaunch launch;
        if (read_inflight(ring[seq & kRingMask], seq, &launch) != seq) {
            launch = InflightLaunch{};  // being rewritten: the worst case
            launch.sm_needed = decisions.sm_count;
            launch.duration_ns = decisions.unknown_duration_ns;
        }
        const auto kernel_class = static_cast<KernelClass>(launch.kernel_class);
        batch.known = first ? launch.known : batch.known && launch.known;
        batch.sm_needed = std::max(batch.sm_needed, launch.sm_needed);
        batch.kernel_class = first || batch.kernel_class == kernel_class ? kernel_class
                                                                         : KernelClass::kUnknown;
        batch.duration_ns += launch.duration_ns;
        first = false;
    }
    if (first) {
        batch.known = false;
        batch.sm_needed = decisions.sm_count;
        batch.duration_ns = decisions.unknown_duration_ns;
    }
    return batch;
}

bool process_is_gone(int pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    // A killed child stays a zombie until its parent reaps it; it will never finish anything.
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    char buffer[512];
    const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
    close(fd);
    if (n <= 0) return false;
    buffer[n] = '\0';
    const char* close_paren = std::strrchr(buffer, ')');
    if (close_paren == nullptr || close_paren[1] == '\0' || close_paren[2] == '\0') return false;
    const char state = close_paren[2];
    return state == 'Z' || state == 'X';
}

void reap_dead_peers(const RunView& view, std::uint32_t self) {
    const RunDecisions& decisions = view.decisions();
    for (std::uint32_t client = 0; client < decisions.client_count && client < kMaxClients;
         ++client) {
        if (client == self) continue;
        ClientSlot& slot = view.client(client);
        if (!client_participates(slot)) continue;
        if (process_is_gone(slot.pid.load(std::memory_order_relaxed))) {
            auto expected = static_cast<std::uint32_t>(ClientState::kAttached);
            if (slot.state.compare_exchange_strong(expected,
                                                   static_cast<std::uint32_t>(ClientState::kDead),
                                                   std::memory_order_acq_rel)) {
                slot.memory.used.store(0, std::memory_order_release);  // died with it
            }
        }
    }
}

}  // namespace orion
