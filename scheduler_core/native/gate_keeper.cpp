#include "gate_keeper.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>

#include "clock.h"
#include "futex.h"
#include "policy.h"
#include "tracking.h"

namespace orion {
namespace {

// While HP work is in flight the keeper sleeps until shortly before it is expected to end, then
// polls finely (a gate opened late leaves the GPU idle), backing off once the prediction has
// clearly failed; while HP is idle and every gate is open it sleeps on the futex HP launches wake.
constexpr std::uint64_t kLeadNs = 15'000;
constexpr std::uint64_t kFinePollNs = 2'000;
constexpr std::uint64_t kFineWindowNs = 200'000;
constexpr std::uint64_t kMaxPollNs = 50'000;
constexpr std::uint64_t kMaxSleepNs = 1'000'000;
constexpr std::uint64_t kIdleSleepNs = 5'000'000;  // bounds how late a dead HP is noticed
constexpr std::uint64_t kReapIntervalNs = 2'000'000;

void sleep_ns(std::uint64_t ns) {
    timespec ts{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    nanosleep(&ts, nullptr);
}

bool is_best_effort(const ClientSlot& slot) {
    return slot.role == static_cast<std::uint32_t>(Role::kBestEffort);
}

}  // namespace

void GateKeeper::start() {
    if (thread_.joinable()) return;
    stopping_.store(false, std::memory_order_release);
    // Alive from now: HP launches made before the thread's first pass must already close gates.
    view_.gates().keeper_heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
    thread_ = std::thread([this] { run(); });
}

void GateKeeper::stop() {
    if (thread_.joinable()) {
        stopping_.store(true, std::memory_order_release);
        GateBlock& block = view_.gates();
        block.hp_activity.fetch_add(1, std::memory_order_seq_cst);
        futex_wake_all(block.hp_activity);
        thread_.join();
    }
    if (!view_.valid()) return;
    // Nothing may stay held once nobody is left to open it, and HP stops closing.
    view_.gates().keeper_heartbeat_ns.store(0, std::memory_order_release);
    for (GateWord& gate : view_.gates().gates) {
        gate.word.fetch_or(kGateOpen, std::memory_order_acq_rel);
    }
}

std::uint64_t GateKeeper::step(std::uint64_t now_ns, bool* idle) {
    const RunHeader& header = view_.header();
    const auto policy = static_cast<Policy>(header.policy);
    GateBlock& block = view_.gates();
    std::uint64_t expected_change = 0;
    bool all_idle = true;
    for (std::uint32_t client = 0; client < header.client_count && client < kMaxClients;
         ++client) {
        if (!is_best_effort(view_.client(client))) continue;
        std::atomic<std::uint32_t>& gate = block.gates[client].word;
        // Read the gate before the rings: an HP launch published after this read also closed
        // the gate after it, so the open below fails (see GateBlock).
        const std::uint32_t seen = gate.load(std::memory_order_acquire);
        const KernelInfo batch = next_be_batch(view_, client, now_ns);
        Snapshot snapshot;
        gather_snapshot(view_, now_ns, batch.duration_ns, &snapshot);
        // The queue bound is kept by where the waits sit (one per queue limit of work), not here.
        snapshot.be_outstanding_ns = 0;
        const Decision decision = decide(policy, Role::kBestEffort, batch, snapshot);
        if (snapshot.hp_in_flight != 0 || snapshot.hp_backlog) {
            all_idle = false;
            if (snapshot.earliest_end_ns != 0 &&
                (expected_change == 0 || snapshot.earliest_end_ns < expected_change)) {
                expected_change = snapshot.earliest_end_ns;
            }
        }
        if (decision.launch) {
            if ((seen & kGateOpen) == 0 && open_gate_if_unchanged(gate, seen)) {
                block.opens.fetch_add(1, std::memory_order_relaxed);
            }
        } else {
            all_idle = false;
            if ((seen & kGateOpen) != 0) {
                close_gate(gate);
                block.closes.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }
    *idle = all_idle;
    return expected_change;
}

void GateKeeper::run() {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // wake when asked to (Linux defaults to 50 us)
    GateBlock& block = view_.gates();
    std::uint64_t last_reap = 0;
    std::uint64_t poll = kFinePollNs;
    while (!stopping_.load(std::memory_order_acquire)) {
        const std::uint32_t activity = block.hp_activity.load(std::memory_order_seq_cst);
        std::uint64_t now = monotonic_ns();
        if (now - last_reap > kReapIntervalNs) {
            reap_dead_peers(view_, kMaxClients);  // a dead HP's launches stop holding anyone
            last_reap = now;
        }
        block.wakeups.fetch_add(1, std::memory_order_relaxed);
        block.keeper_heartbeat_ns.store(now, std::memory_order_release);
        bool idle = false;
        const std::uint64_t expected = step(now, &idle);
        if (idle) {
            poll = kFinePollNs;
            // Standard futex hand-shake with the HP side: announce the sleep, then sleep only if
            // no HP launch happened since this pass read `activity` (HP bumps it after closing).
            block.keeper_sleeping.store(1, std::memory_order_seq_cst);
            if (block.hp_activity.load(std::memory_order_seq_cst) == activity &&
                !stopping_.load(std::memory_order_acquire)) {
                futex_wait(block.hp_activity, activity, kIdleSleepNs);
            }
            block.keeper_sleeping.store(0, std::memory_order_seq_cst);
            continue;
        }
        now = monotonic_ns();
        if (expected > now + kLeadNs) {
            sleep_ns(std::min(expected - kLeadNs - now, kMaxSleepNs));
            poll = kFinePollNs;
        } else if (expected != 0 && now < expected + kFineWindowNs) {
            sleep_ns(kFinePollNs);
        } else {
            // Past every prediction (an unprofiled or slow HP kernel): poll, backing off.
            sleep_ns(poll);
            poll = std::min(poll * 2, kMaxPollNs);
        }
    }
}

}  // namespace orion
