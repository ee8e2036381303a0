// The scheduling policies, written once as a pure function of a snapshot.
//
// `decide` knows nothing of shared memory, processes or the GPU: the preload library builds a
// `Snapshot` from the run's shared state and asks; tests and simulators build one by hand. So the
// rule exists in exactly one place.
#pragma once

#include <cstdint>

#include "shared_state.h"

namespace orion {

struct KernelInfo {
    bool known = false;
    std::uint32_t sm_needed = 0;
    KernelClass kernel_class = KernelClass::kUnknown;
    std::uint64_t duration_ns = 0;
};

// How many in-flight HP kernels orion inspects. More than this means HP has a deep queue, and a
// BE kernel would run beside work nobody looked at: it waits (kHpBacklog).
constexpr std::uint32_t kMaxHpInspected = 32;

struct Snapshot {
    std::uint32_t sm_count = 0;
    std::uint64_t queue_limit_ns = 0;
    std::uint64_t be_outstanding_ns = 0;  // profiled work of launched, unfinished BE kernels
    std::uint32_t hp_in_flight = 0;       // HP kernels launched and not finished (inspected ones)
    bool hp_backlog = false;              // more HP kernels in flight than kMaxHpInspected
    KernelInfo hp_kernels[kMaxHpInspected];
    // When the first in-flight launch is expected to finish (profiled durations), 0 if none:
    // not used by the policy, only by a waiting client to decide when to look again.
    std::uint64_t earliest_end_ns = 0;
    // An HP client's sampling hold is in force (RunHeader::sampling_hold_until_ns): BE stands
    // aside so the HP's unlearned work is timed alone. Bounded in time by the HP client.
    bool sampling_hold = false;
    // When the HP's quiet spell ends (RunDecisions::hp_quiet_ns, tracking.h's hp_quiet_until_ns),
    // 0 when none is in force: BE waits while the HP may launch again within the spell.
    std::uint64_t hp_quiet_until_ns = 0;
};

struct Decision {
    bool launch;
    Reason reason;
};

// Complementary classes may share the SMs: compute-bound beside memory-bound. Unknown never pairs.
inline bool classes_complement(KernelClass a, KernelClass b) {
    return (a == KernelClass::kCompute && b == KernelClass::kMemory) ||
           (a == KernelClass::kMemory && b == KernelClass::kCompute);
}

Decision decide(Policy policy, Role role, const KernelInfo& kernel, const Snapshot& snapshot);

// Whether the policy needs the in-flight ring and completion tracking at all.
inline bool policy_tracks_launches(Policy policy) {
    return policy == Policy::kReef || policy == Policy::kOrion || policy == Policy::kQuota;
}

// Whether HP launches close the BE gates (the policies that hold BE work while HP runs).
inline bool policy_holds_be_for_hp(Policy policy) {
    return policy == Policy::kReef || policy == Policy::kOrion;
}

// GPU-time shares (min_util / max_util), decided by the gate keeper from what it measured.
struct QuotaClient {
    bool participates = false;  // attached and alive
    bool has_work = false;      // launches not yet finished on the GPU
    std::uint64_t used_ns = 0;  // GPU time in the last window
    std::uint32_t min_ppm = 0;
    std::uint32_t max_ppm = kFullShare;
};

enum class QuotaVerdict {
    kFree,    // neither cap nor promise applies now: the policy decides
    kCapped,  // used its max share of the window: held, whatever the policy says
    kOwed,    // has work and is below its min share: runs, whatever the policy says
};

QuotaVerdict quota_verdict(const QuotaClient& client, std::uint64_t window_ns);

// Under `quota`, where one client at a time holds the GPU: who holds it next, -1 for nobody.
// A client below its min share (the largest shortfall first) takes the GPU at once from a holder
// that is not itself owed: a promised client whose work comes in bursts (a training step, then a
// synchronisation) would otherwise wait out a whole slice of its greedier neighbour at every step.
// Otherwise the holder keeps the GPU while its slice lasts and it is not capped, then the
// least-served client with work and under its cap holds it (work-conserving). Nobody when every
// client with work is capped.
int quota_holder(const QuotaClient* clients, std::uint32_t count, std::uint64_t window_ns,
                 int current, bool slice_left);

// How long a `quota` holder keeps the GPU before the least-served client may take it: a
// twentieth of the window, at least 2 ms. Every hand-over costs the new holder the old one's
// queued work and the keeper's look; owed clients pre-empt a slice anyway, so a slice only paces
// clients that are both free, and a long one loses less to hand-overs.
inline std::uint64_t quota_slice_ns(std::uint64_t window_ns) {
    constexpr std::uint64_t kMinSliceNs = 2'000'000;
    return window_ns / 20 > kMinSliceNs ? window_ns / 20 : kMinSliceNs;
}

// How much work a client under `quota` enqueues between two waits on its gate (profiled, or as
// its launches measured): a two-thousandth of the window (500 us of a 1-s window), at least
// 100 us. No HP latency rides on it (the queue limit's reason under reef and orion), only how far
// a holder overruns its closed gate, which the next holder, owed a promise maybe, waits behind; a
// wait per tiny kernel would cost the GPU more than the bound is worth.
inline std::uint64_t quota_wait_spacing_ns(std::uint64_t window_ns) {
    constexpr std::uint64_t kMinSpacingNs = 100'000;
    return window_ns / 2000 > kMinSpacingNs ? window_ns / 2000 : kMinSpacingNs;
}

// Whether the policy sets stream priorities by role.
inline bool policy_sets_priorities(Policy policy) { return policy != Policy::kPassthrough; }

const char* policy_name(Policy policy);
bool parse_policy(const char* name, Policy* out);
const char* reason_name(Reason reason);

}  // namespace orion
