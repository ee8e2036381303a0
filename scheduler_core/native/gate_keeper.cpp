#include "gate_keeper.h"

#include <algorithm>

#include "clock.h"
#include "futex.h"
#include "policy.h"
#include "tracking.h"
#include "wait_pacer.h"

namespace orion {
namespace {

// While HP work is in flight the keeper waits by the one wait policy (wait_pacer.h), looking
// finely with 2-us sleeps (it is a daemon thread: no spinning); while HP is idle and every gate is
// open it sleeps on the futex HP launches wake.
constexpr WaitPacing kKeeperPacing{15'000, 200'000, 1'000'000, 2'000, 50'000, 2'000, 0};
constexpr std::uint64_t kIdleSleepNs = 5'000'000;  // bounds how late a dead HP is noticed
constexpr std::uint64_t kReapIntervalNs = 2'000'000;
// With GPU-time shares in force the keeper counts time while any client has work: it looks at
// least this often. That is its resolution, and how long a client owed its min share may wait
// between a burst of work arriving at its closed gate and the gate opening.
constexpr std::uint64_t kQuotaPollNs = 100'000;
// How long a `quota` holder keeps the GPU after its work ran out: a training loop's next step
// comes a few tens of microseconds after its synchronisation, and the keeper sees it at its next
// look. Handing the GPU over at every such gap would charge each hand-over's idle look and queued
// work to the clients; the GPU idles this long when the holder has really stopped.
constexpr std::uint64_t kReturnGraceNs = 5 * kQuotaPollNs;
// Under RunDecisions::hold_long_be, BE work longer than the queue limit waits until the HP has
// launched nothing for this long (a quiet spell, tracking.h): the gaps between an eager
// request's launches (its host thread launching the next kernel) are shorter, so a long BE
// kernel never lands inside one.
constexpr std::uint64_t kLongHoldQuietNs = 2'000'000;

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

void GateKeeper::account(std::uint64_t now_ns) {
    const RunDecisions& decisions = view_.decisions();
    const std::uint64_t bucket_ns = std::max<std::uint64_t>(decisions.quota_window_ns / kBuckets, 1);
    const std::uint64_t epoch = now_ns / bucket_ns;
    if (epoch != epoch_) {
        // Slots that passed since the last pass start empty (all of them after a long pause).
        const std::uint64_t passed = std::min<std::uint64_t>(epoch - epoch_, kBuckets);
        for (Usage& usage : usage_) {
            for (std::uint64_t i = 1; i <= passed; ++i) usage.buckets[(epoch_ + i) % kBuckets] = 0;
        }
        epoch_ = epoch;
    }
    const std::uint64_t previous_pass_ns = last_pass_ns_ == 0 ? now_ns : last_pass_ns_;
    const std::uint64_t elapsed = std::min(now_ns - previous_pass_ns, bucket_ns);
    last_pass_ns_ = now_ns;
    const bool time_slices = static_cast<Policy>(decisions.policy) == Policy::kQuota;
    const GateBlock& block = view_.gates();
    const std::uint32_t count = std::min(decisions.client_count, kMaxClients);
    bool drained = false;
    for (std::uint32_t client = 0; client < count; ++client) {
        ClientSlot& slot = view_.client(client);
        Usage& usage = usage_[client];
        usage.has_work = false;
        std::uint64_t low = usage.low_water;
        if (client_participates(slot)) {
            low = advance_low_water(view_, client, now_ns);
            usage.has_work = client_has_work(view_, client, now_ns);
        }
        const bool open = (block.gates[client].word.load(std::memory_order_acquire) & kGateOpen) != 0;
        const std::uint64_t finished = low > usage.low_water ? low - usage.low_water : 0;
        usage.low_water = low;
        // Under `quota` the holder had the GPU to itself since the last pass, and is charged that
        // time, its short gaps between steps included: it runs as it would alone, so a share of
        // the time is that share of its throughput alone. Under the other policies clients run
        // side by side, each charged while its gate is open and it has work, or while work let
        // through before its gate closed keeps finishing.
        const bool charged = time_slices ? static_cast<int>(client) == holder_
                                         : (usage.has_work && open) || finished != 0;
        if (charged) {
            usage.buckets[epoch_ % kBuckets] += elapsed;
            slot.quota.busy_ns.fetch_add(elapsed, std::memory_order_relaxed);
        }
        measure_launches(client, open, finished, previous_pass_ns, now_ns, &drained);
    }
    if (drained) drained_ns_ = now_ns;
    for (std::uint32_t client = 0; client < count; ++client) {
        std::uint64_t used = 0;
        for (const std::uint64_t bucket : usage_[client].buckets) used += bucket;
        view_.client(client).quota.used_ns.store(used, std::memory_order_relaxed);
    }
}

void GateKeeper::measure_launches(std::uint32_t client, bool open, std::uint64_t finished,
                                  std::uint64_t previous_pass_ns, std::uint64_t now_ns,
                                  bool* drained) {
    Usage& usage = usage_[client];
    // Held at a closed gate with nothing finishing, or without work: runs nothing.
    if (!(usage.has_work && open) && finished == 0) {
        usage.runnable_since_ns = 0;
        return;
    }
    if (usage.runnable_since_ns == 0) {
        usage.runnable_since_ns = finished != 0 ? previous_pass_ns : now_ns;
    }
    if (finished == 0) return;  // running; measured when its launches finish
    if (!open) *drained = true;
    // Its launches ran since the latest of: its previous ones finishing, its work becoming able
    // to run, and work let through a neighbour's closed gate finishing (which it queued behind).
    const std::uint64_t since =
        std::min(std::max({usage.finished_ns, usage.runnable_since_ns, drained_ns_}), now_ns);
    usage.finished_ns = now_ns;
    // An average over about its last eight finishing passes.
    const std::uint64_t sample = std::max<std::uint64_t>((now_ns - since) / finished, 1);
    usage.launch_ns =
        usage.launch_ns == 0 ? sample : usage.launch_ns - usage.launch_ns / 8 + sample / 8;
    // Published only when it moved by an eighth: the client reads it on its launch path.
    ClientQuota& quota = view_.client(client).quota;
    const std::uint64_t shown = quota.launch_ns.load(std::memory_order_relaxed);
    const std::uint64_t moved =
        shown > usage.launch_ns ? shown - usage.launch_ns : usage.launch_ns - shown;
    if (shown == 0 || moved > shown / 8) {
        quota.launch_ns.store(usage.launch_ns, std::memory_order_relaxed);
    }
}

void GateKeeper::hold_for_returning_holder(QuotaClient* shares, std::uint32_t count,
                                           std::uint64_t now_ns) {
    if (holder_ < 0 || static_cast<std::uint32_t>(holder_) >= count) return;
    QuotaClient& holder = shares[holder_];
    if (holder.has_work) {
        holder_idle_since_ns_ = 0;
        return;
    }
    if (holder_idle_since_ns_ == 0) holder_idle_since_ns_ = now_ns;
    // As if its next step were here already; a client owed its promise still takes the GPU.
    holder.has_work = now_ns - holder_idle_since_ns_ < kReturnGraceNs && holder.participates;
}

bool GateKeeper::any_work() const {
    for (const Usage& usage : usage_) {
        if (usage.has_work) return true;
    }
    return false;
}

std::uint64_t GateKeeper::step(std::uint64_t now_ns, bool* idle) {
    const RunDecisions& decisions = view_.decisions();
    const auto policy = static_cast<Policy>(decisions.policy);
    const bool quotas = decisions.quotas != 0 || policy == Policy::kQuota;
    GateBlock& block = view_.gates();
    const std::uint32_t count = std::min(decisions.client_count, kMaxClients);
    QuotaClient shares[kMaxClients];
    if (quotas) {
        account(now_ns);
        for (std::uint32_t client = 0; client < count; ++client) {
            const ClientSlot& slot = view_.client(client);
            shares[client].participates = client_participates(slot);
            shares[client].has_work = usage_[client].has_work;
            shares[client].used_ns = slot.quota.used_ns.load(std::memory_order_relaxed);
            shares[client].min_ppm = view_.decision(client).min_ppm.load(std::memory_order_relaxed);
            shares[client].max_ppm = view_.decision(client).max_ppm.load(std::memory_order_relaxed);
        }
    }
    if (policy == Policy::kQuota) {
        const std::uint64_t slice = quota_slice_ns(decisions.quota_window_ns);
        hold_for_returning_holder(shares, count, now_ns);
        const int holder = quota_holder(shares, count, decisions.quota_window_ns, holder_,
                                        now_ns < holder_since_ns_ + slice);
        if (holder != holder_) {
            holder_ = holder;
            holder_since_ns_ = now_ns;
            holder_idle_since_ns_ = 0;
        }
    }
    std::uint64_t expected_change = 0;
    bool all_idle = true;
    // An HP client taking clean samples of its unlearned work: no BE gate opens until the hold
    // ends (the HP bounds it), whatever the policy or a share would say.
    const bool holds_for_hp = policy_holds_be_for_hp(policy);
    const bool hold = holds_for_hp && sampling_hold_in_force(view_.header(), now_ns);
    if (hold) {
        all_idle = false;
        expected_change = view_.header().sampling_hold_until_ns.load(std::memory_order_acquire);
        block.hold_passes.fetch_add(1, std::memory_order_relaxed);
    }
    // The latency controller's strictest step: the end of the HP's quiet spell (tracking.h)
    // long BE work waits out, 0 when not held. (The run's own spell, RunDecisions::hp_quiet_ns,
    // holds all BE work: decide() says kHpNotQuiet.)
    const std::uint64_t long_held_until =
        holds_for_hp && decisions.hold_long_be.load(std::memory_order_acquire) != 0
            ? quiet_spell_end_ns(hp_last_launch_ns(view_), kLongHoldQuietNs, now_ns)
            : 0;
    for (std::uint32_t client = 0; client < count; ++client) {
        const bool gated = policy == Policy::kQuota || view_.role(client) == Role::kBestEffort;
        if (!gated) continue;
        std::atomic<std::uint32_t>& gate = block.gates[client].word;
        // Read the gate before the rings: an HP launch published after this read also closed
        // the gate after it, so the open below fails (see GateBlock).
        const std::uint32_t seen = gate.load(std::memory_order_acquire);
        bool open = false;
        if (policy == Policy::kQuota) {
            // Nobody with work: every gate open, so the keeper may sleep until HP or work comes
            // (the first launches of a client starting then run before its first grant).
            open = static_cast<int>(client) == holder_ || (holder_ < 0 && !any_work());
        } else {
            const KernelInfo batch = next_be_batch(view_, client, now_ns);
            Snapshot snapshot;
            gather_snapshot(view_, now_ns, batch.duration_ns, &snapshot);
            // The queue bound is kept by where the waits sit (one per queue limit of work).
            snapshot.be_outstanding_ns = 0;
            const Decision decision = decide(policy, Role::kBestEffort, batch, snapshot);
            open = decision.launch;
            if (decision.reason == Reason::kHpNotQuiet) {
                // Shut until the spell ends, and the keeper sleeps until then (an HP launch
                // meanwhile closes the gates itself, and only makes the spell longer).
                block.quiet_holds.fetch_add(1, std::memory_order_relaxed);
                if (expected_change == 0 || snapshot.hp_quiet_until_ns < expected_change) {
                    expected_change = snapshot.hp_quiet_until_ns;
                }
            }
            if (quotas) {
                // A cap holds the client back and a promise lets it run, whatever HP does.
                const QuotaVerdict verdict = quota_verdict(shares[client], decisions.quota_window_ns);
                if (verdict == QuotaVerdict::kCapped) open = false;
                if (verdict == QuotaVerdict::kOwed) open = true;
            }
            if (hold) open = false;
            if (open && long_held_until != 0 &&
                (!batch.known || batch.duration_ns > decisions.queue_limit_ns)) {
                open = false;
                block.long_holds.fetch_add(1, std::memory_order_relaxed);
                if (expected_change == 0 || long_held_until < expected_change) {
                    expected_change = long_held_until;
                }
            }
            if (snapshot.hp_in_flight != 0 || snapshot.hp_backlog) {
                all_idle = false;
                if (snapshot.earliest_end_ns != 0 &&
                    (expected_change == 0 || snapshot.earliest_end_ns < expected_change)) {
                    expected_change = snapshot.earliest_end_ns;
                }
            }
        }
        if (open) {
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
    if (quotas && any_work()) {
        // Time is being counted: look again soon, whatever else is expected.
        all_idle = false;
        const std::uint64_t poll = now_ns + kQuotaPollNs;
        if (expected_change == 0 || poll < expected_change) expected_change = poll;
    }
    *idle = all_idle;
    return expected_change;
}

void GateKeeper::run() {
    GateBlock& block = view_.gates();
    std::uint64_t last_reap = 0;
    WaitPacer pacer(kKeeperPacing, monotonic_ns());
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
            // Standard futex hand-shake with the HP side: announce the sleep, then sleep only if
            // no HP launch happened since this pass read `activity` (HP bumps it after closing).
            block.keeper_sleeping.store(1, std::memory_order_seq_cst);
            if (block.hp_activity.load(std::memory_order_seq_cst) == activity &&
                !stopping_.load(std::memory_order_acquire)) {
                futex_wait(block.hp_activity, activity, kIdleSleepNs);
            }
            block.keeper_sleeping.store(0, std::memory_order_seq_cst);
            pacer.restart(monotonic_ns());
            continue;
        }
        pacer.pause(monotonic_ns(), expected);
    }
}

}  // namespace orion
