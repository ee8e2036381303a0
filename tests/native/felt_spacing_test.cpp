// LaunchSampler::claim_felt on its own: one felt launch at a time, those chosen by count at most
// one in kFeltSpacingNs, a request's first (not spaced) whenever the felt timer is free. Prints
// "ok" or the first failure; exits 1 on one.
#include "launch_sampler.h"

#include <cstdint>
#include <cstdio>

namespace {

int failures = 0;
void check(bool ok, const char* what) {
    if (!ok && failures++ == 0) std::printf("FAILED: %s\n", what);
}

}  // namespace

int main() {
    using orion::LaunchSampler;
    constexpr std::uint64_t spacing = LaunchSampler::kFeltSpacingNs;
    constexpr std::uint64_t start = 5'000'000'000;
    LaunchSampler sampler;
    check(sampler.claim_felt(start, true), "the first felt launch is claimed");
    check(!sampler.claim_felt(start + 2 * spacing, false), "one felt launch at a time");
    sampler.unclaim_felt();
    check(!sampler.claim_felt(start + spacing / 2, true),
          "a launch chosen by count within the spacing is not timed as felt");
    check(sampler.claim_felt(start + spacing / 2, false),
          "a request's first is timed whenever the felt timer is free");
    sampler.unclaim_felt();
    check(!sampler.claim_felt(start + spacing, true),
          "the spacing counts from the last felt launch claimed, a request's first included");
    check(sampler.claim_felt(start + spacing / 2 + spacing, true),
          "a launch chosen by count a spacing after the last felt one is timed");
    sampler.unclaim_felt();
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
}
