#include "policy.h"

#include <iterator>

#include "enum_names.h"

namespace orion {
namespace {

// The BE queue bound, common to REEF and Orion: an arriving HP request never waits behind more
// than `queue_limit_ns` of BE work. An empty queue always admits one kernel, or a kernel longer
// than the limit could never run.
bool queue_admits(const KernelInfo& kernel, const Snapshot& snapshot) {
    if (snapshot.be_outstanding_ns == 0) return true;
    return snapshot.be_outstanding_ns + kernel.duration_ns <= snapshot.queue_limit_ns;
}

Decision orion_decide(const KernelInfo& kernel, const Snapshot& snapshot) {
    if (!queue_admits(kernel, snapshot)) return {false, Reason::kQueueFull};
    if (snapshot.hp_in_flight == 0 && !snapshot.hp_backlog) return {true, Reason::kHpIdle};
    if (snapshot.hp_backlog) return {false, Reason::kHpBacklog};
    if (!kernel.known) return {false, Reason::kUnknownBesideHp};
    for (std::uint32_t i = 0; i < snapshot.hp_in_flight; ++i) {
        const KernelInfo& hp = snapshot.hp_kernels[i];
        if (!hp.known) return {false, Reason::kHpKernelUnknown};
        const std::uint32_t hp_sms = hp.sm_needed < snapshot.sm_count ? hp.sm_needed
                                                                       : snapshot.sm_count;
        if (kernel.sm_needed > snapshot.sm_count - hp_sms) return {false, Reason::kNotEnoughSms};
        if (!classes_complement(kernel.kernel_class, hp.kernel_class)) {
            return {false, Reason::kClassClash};
        }
    }
    return {true, Reason::kFitsBeside};
}

Decision reef_decide(const KernelInfo& kernel, const Snapshot& snapshot) {
    if (!queue_admits(kernel, snapshot)) return {false, Reason::kQueueFull};
    if (snapshot.hp_in_flight != 0 || snapshot.hp_backlog) return {false, Reason::kHpBusy};
    return {true, Reason::kHpIdle};
}

}  // namespace

Decision decide(Policy policy, Role role, const KernelInfo& kernel, const Snapshot& snapshot) {
    if (role == Role::kHighPriority) return {true, Reason::kHighPriority};
    // A sampling hold is short and bounded, and without it an HP client that joins beside busy
    // BE work is never learned: it comes first.
    if (snapshot.sampling_hold && policy_holds_be_for_hp(policy)) {
        return {false, Reason::kSamplingHold};
    }
    // Time-sliced, every gap of the HP's work BE gets into costs the HP two context switches:
    // BE waits until the HP has been quiet for the run's spell, whatever fits beside it.
    if (snapshot.hp_quiet_until_ns != 0 && policy_holds_be_for_hp(policy)) {
        return {false, Reason::kHpNotQuiet};
    }
    switch (policy) {
        case Policy::kReef:
            return reef_decide(kernel, snapshot);
        case Policy::kOrion:
            return orion_decide(kernel, snapshot);
        case Policy::kPassthrough:
        case Policy::kPriority:
        case Policy::kQuota:  // the gate keeper grants GPU time (quota_holder)
            break;
    }
    return {true, Reason::kNotGated};
}

QuotaVerdict quota_verdict(const QuotaClient& client, std::uint64_t window_ns) {
    const auto share = [window_ns](std::uint32_t ppm) {
        return static_cast<std::uint64_t>(static_cast<double>(window_ns) * ppm / kFullShare);
    };
    if (client.max_ppm < kFullShare && client.used_ns >= share(client.max_ppm)) {
        return QuotaVerdict::kCapped;
    }
    if (client.has_work && client.min_ppm > 0 && client.used_ns < share(client.min_ppm)) {
        return QuotaVerdict::kOwed;
    }
    return QuotaVerdict::kFree;
}

int quota_holder(const QuotaClient* clients, std::uint32_t count, std::uint64_t window_ns,
                 int current, bool slice_left) {
    const auto eligible = [&](std::uint32_t i) {
        return clients[i].participates && clients[i].has_work &&
               quota_verdict(clients[i], window_ns) != QuotaVerdict::kCapped;
    };
    int owed = -1;
    double owed_most = 0;
    int least = -1;
    for (std::uint32_t i = 0; i < count; ++i) {
        if (!eligible(i)) continue;
        if (quota_verdict(clients[i], window_ns) == QuotaVerdict::kOwed) {
            const double shortfall =
                static_cast<double>(window_ns) * clients[i].min_ppm / kFullShare -
                static_cast<double>(clients[i].used_ns);
            if (owed < 0 || shortfall > owed_most) {
                owed = static_cast<int>(i);
                owed_most = shortfall;
            }
        }
        if (least < 0 || clients[i].used_ns < clients[static_cast<std::uint32_t>(least)].used_ns) {
            least = static_cast<int>(i);
        }
    }
    if (current >= 0 && static_cast<std::uint32_t>(current) < count && slice_left &&
        eligible(static_cast<std::uint32_t>(current))) {
        const bool current_owed =
            quota_verdict(clients[current], window_ns) == QuotaVerdict::kOwed;
        if (owed < 0 || current_owed) return current;
    }
    return owed >= 0 ? owed : least;
}

namespace {

const char* const kPolicyNames[] = {"passthrough", "priority", "reef", "orion", "quota"};
static_assert(std::size(kPolicyNames) == static_cast<std::size_t>(Policy::kQuota) + 1);

const char* const kReasonNames[] = {
    "high_priority", "not_gated",       "hp_idle",         "fits_beside",
    "queue_full",    "unknown_beside_hp", "hp_kernel_unknown", "not_enough_sms",
    "class_clash",   "hp_backlog",      "hp_busy",         "gpu_gate",
    "sampling_hold", "hp_not_quiet",
};
static_assert(std::size(kReasonNames) == static_cast<std::size_t>(Reason::kCount));

}  // namespace

const char* policy_name(Policy policy) {
    return name_of(kPolicyNames, static_cast<std::uint32_t>(policy));
}

bool parse_policy(const char* name, Policy* out) { return value_named(kPolicyNames, name, out); }

const char* reason_name(Reason reason) {
    return name_of(kReasonNames, static_cast<std::uint32_t>(reason));
}

}  // namespace orion
