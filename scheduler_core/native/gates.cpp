// Gating a client's launches: the CPU gate (a held launch waits in its thread until the policy
// admits it), the GPU-side gate (a BE stream waits on the client's gate word every queue limit of
// work), and the HP side that closes every BE gate when it launches.
#include "client_runtime.h"

#include <algorithm>

#include "clock.h"
#include "driver.h"
#include "futex.h"
#include "runtime_support.h"
#include "tracking.h"
#include "wait_pacer.h"

namespace orion {
namespace {

// A held launch's thread has nothing else to do: it spins for its first 20 us and around an
// expected end, and sleeps at most 2 ms on one prediction (see wait_pacer.h).
constexpr WaitPacing kLaunchPacing{15'000, 200'000, 2'000'000, 2'000, 50'000, 0, 20'000};
// How often a sleeping BE client checks that the peers it waits on are still alive.
constexpr std::uint64_t kReapIntervalNs = 2'000'000;

}  // namespace

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

bool ClientRuntime::gate_on_gpu(CUstream own_stream, const KernelInfo& kernel,
                                std::uint64_t seq, bool* waited, std::uint64_t* guard_seq) {
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
    *guard_seq = 0;
    // The first launch on a stream, and every launch that would take the work past one gate over
    // the spacing (the queue limit under reef and orion), waits on the gate: an HP request never
    // finds more than the limit of BE work let through by one opening (the same bound the CPU
    // gate keeps).
    const std::uint64_t spacing = gate_spacing();
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
    if (!must_wait) {
        // Behind the stream's last wait: it starts once that one is passed.
        *guard_seq = budget->last_guard.load(std::memory_order_acquire);
        return true;
    }
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
    // The stream marks the launch started as it passes the wait, so an HP client taking samples
    // can tell held BE work from running work (tracking.h, be_may_run). Without the mark the
    // launch counts as running: the safe side.
    if (ensure_completion_words() &&
        driver::helpers().stream_write_value64(
            own_stream, completion_device_base_ + sizeof(std::uint64_t) * (seq & kRingMask),
            seq | kStartedMark, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS) {
        *guard_seq = seq;
    }
    if (budget != nullptr) {
        budget->last_guard.store(*guard_seq, std::memory_order_release);
        budget->since_wait_ns.fetch_and(~kWaitPending, std::memory_order_release);
    }
    slot_->stats.gate_waits.fetch_add(1, std::memory_order_relaxed);
    *waited = true;
    return true;
}

void ClientRuntime::close_be_gates(std::uint64_t now_ns) {
    GateBlock& block = view_.gates();
    const std::uint64_t heartbeat = block.keeper_heartbeat_ns.load(std::memory_order_acquire);
    // Without a live keeper nobody would open what HP closes: leave BE ungated instead.
    const bool keeper_alive = heartbeat != 0 && now_ns < heartbeat + kKeeperStaleNs;
    // Clients of an open run join and leave: the controller keeps the BE set in its decisions.
    const std::uint32_t be_clients = view_.decisions().be_mask.load(std::memory_order_acquire);
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

Reason ClientRuntime::wait_for_turn(const KernelInfo& kernel, bool* waited) {
    const std::uint64_t start = monotonic_ns();
    std::uint64_t now = start;
    std::uint64_t last_reap = start;
    WaitPacer pacer(kLaunchPacing, start);
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
        if (pacer.settled(now) && now - last_reap > kReapIntervalNs) {
            // A peer killed while its launches were in flight must not hold anyone up.
            reap_dead_peers(view_, index_);
            last_reap = now;
        }
        pacer.pause(now, snapshot.earliest_end_ns);
        now = monotonic_ns();
    }
}

}  // namespace orion
