// Reading the in-flight state of every client: which launches have finished, how much BE work is
// queued on the GPU, which HP kernels are running. Used by a waiting BE client to build the
// `Snapshot` the policy decides on, and by the controller to report.
#pragma once

#include <cstdint>

#include "policy.h"
#include "shared_state.h"

namespace orion {

// Whether launch `seq` of `client` has finished: the GPU wrote its sequence number, or (estimating
// clients, launches not marked `gpu_written`) its estimated end passed, or it is older than the
// run's staleness bound.
bool launch_finished(const RunView& view, std::uint32_t client, std::uint64_t seq,
                     std::uint64_t now_ns);

// Moves the client's low-water mark past every finished launch; returns the new mark.
std::uint64_t advance_low_water(const RunView& view, std::uint32_t client, std::uint64_t now_ns);

// Fills `out` for a BE decision: HP kernels in flight and BE work outstanding, over all live clients.
// `horizon_ns` is how long the BE kernel being decided would run: an HP graph with a profiled
// timeline contributes the kernels expected to run within that time from now, not the graph whole.
void gather_snapshot(const RunView& view, std::uint64_t now_ns, std::uint64_t horizon_ns,
                     Snapshot* out);

// The BE work a GPU-side gate of `client` is about to let through: its unfinished launches in
// launch order, up to the run's queue limit of profiled work (at least one), summed into one
// kernel: known if all are, the SMs of the widest, their common class (else unknown), the sum of
// their durations. With nothing queued, an unknown kernel of the run's unknown duration: the
// gate then opens only when HP is idle, for whatever the client launches next.
KernelInfo next_be_batch(const RunView& view, std::uint32_t client, std::uint64_t now_ns);

// Whether an HP client's sampling hold is in force at `now_ns` (RunHeader::sampling_hold_until_ns).
// The word is a client's report: a hold ending further ahead than any client asks for
// (kMaxSamplingHoldNs) is not believed, so a word written wrong cannot hold BE work for good.
inline bool sampling_hold_in_force(const RunHeader& header, std::uint64_t now_ns) {
    const std::uint64_t until = header.sampling_hold_until_ns.load(std::memory_order_acquire);
    return now_ns < until && until - now_ns <= kMaxSamplingHoldNs;
}

// Whether BE work may be running on the GPU, as an HP client asks before taking a sample to
// learn from: some BE client has an unfinished launch whose guarding gate wait the GPU may have
// passed (InflightEntry::guard_seq: the guard's completion word carries neither its started mark
// nor a later launch's number). Under the CPU gate every published launch was admitted, so any
// unfinished one counts.
bool be_may_run(const RunView& view, std::uint64_t now_ns);

// Whether `client` is an attached best-effort client: the run's BE mask where the daemon keeps
// one (open slots), else the role written in its slot.
bool is_attached_best_effort(const RunView& view, std::uint32_t client);

// When the newest launch of any HP client was made (monotonic ns), 0 if none.
std::uint64_t hp_last_launch_ns(const RunView& view);

// When the newest launch of any attached BE client was made (monotonic ns), 0 if none: how an
// HP launch timed as felt knows that no BE work ran shortly before it or during it.
std::uint64_t be_last_launch_ns(const RunView& view);

// The HP's quiet spell, the one rule of both gates (the CPU gate's decide() through
// Snapshot::hp_quiet_until_ns, the gate keeper's pass) and of the keeper's long hold: BE work
// waits until the HP has launched nothing for `quiet_ns` since its newest launch at
// `last_launch_ns`. Returns when the spell ends (monotonic ns), 0 when none is in force at
// `now_ns`: no spell asked for, no HP launch yet, or the spell is over.
inline std::uint64_t quiet_spell_end_ns(std::uint64_t last_launch_ns, std::uint64_t quiet_ns,
                                        std::uint64_t now_ns) {
    if (quiet_ns == 0 || last_launch_ns == 0) return 0;
    const std::uint64_t end = last_launch_ns + quiet_ns;
    return now_ns < end ? end : 0;
}

// The end of the run's HP quiet spell (RunDecisions::hp_quiet_ns) in force at `now_ns`, 0 if none
// (always 0 under a policy that does not hold BE for HP). The rings are not read while the
// setting is off.
inline std::uint64_t hp_quiet_until_ns(const RunView& view, std::uint64_t now_ns) {
    const RunDecisions& decisions = view.decisions();
    if (decisions.hp_quiet_ns == 0 || !policy_holds_be_for_hp(static_cast<Policy>(decisions.policy))) {
        return 0;
    }
    return quiet_spell_end_ns(hp_last_launch_ns(view), decisions.hp_quiet_ns, now_ns);
}

// Whether `client` has launches the GPU has not finished. For a client whose completions the GPU
// writes this is exact however long its work waits (behind a closed gate, say): the newest
// launch's word is checked, never the staleness bound. Otherwise its estimated ends decide.
bool client_has_work(const RunView& view, std::uint32_t client, std::uint64_t now_ns);

// Whether a client counts for scheduling: attached and its process still alive as far as we know.
inline bool client_participates(const ClientSlot& slot) {
    return slot.state.load(std::memory_order_acquire) ==
           static_cast<std::uint32_t>(ClientState::kAttached);
}

// Checks the processes of attached peers and marks the ones that died (SIGKILL included) as dead,
// so nobody waits on their launches. Cheap enough to call every few milliseconds while waiting.
void reap_dead_peers(const RunView& view, std::uint32_t self);

// True when the process `pid` is gone or a zombie.
bool process_is_gone(int pid);

}  // namespace orion
