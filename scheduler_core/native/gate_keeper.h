// The thread that opens the GPU-side BE gates (be_gate kGpu), run by the controller.
//
// An HP launch closes every BE gate itself (client_runtime.cpp); only this thread opens them, when
// the policy admits the BE work waiting behind each gate. It must live outside every gated
// process: a thread of a BE process may be blocked behind its own closed gate (any call that
// synchronises), so it could never open it. Being in the controller it also outlives a dead HP
// client (whose launches then stop counting) and opens every gate when the run ends or is stopped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <thread>

#include "policy.h"
#include "shared_state.h"

namespace orion {

class GateKeeper {
public:
    explicit GateKeeper(RunView view) : view_(view) {}
    GateKeeper(const GateKeeper&) = delete;
    GateKeeper& operator=(const GateKeeper&) = delete;
    ~GateKeeper() { stop(); }

    void start();
    // Stops the thread and opens every gate. Idempotent.
    void stop();
    bool running() const { return thread_.joinable(); }

    // One pass: decides every BE client's gate from the rings, opens or closes it. Returns the
    // time (monotonic ns) by which something is expected to change, 0 if nothing is expected.
    // Sets *idle when every gate is open and no HP work is in flight (the keeper may then sleep
    // until an HP client launches). Public so tests can drive the keeper step by step.
    std::uint64_t step(std::uint64_t now_ns, bool* idle);

private:
    void run();
    // Charges each client the GPU time it had since the last pass into a sliding window of
    // buckets, and publishes its use of the window (ClientQuota::used_ns).
    void account(std::uint64_t now_ns);
    // Measures a client's GPU time per launch (ClientQuota::launch_ns) when its launches finish:
    // the time since the latest of its previous launches finishing, its work becoming able to run
    // and a neighbour's work let through a closed gate finishing (which it queued behind on the
    // GPU), over how many finished. Sets *drained when work behind its closed gate finished.
    void measure_launches(std::uint32_t client, bool open, std::uint64_t finished,
                          std::uint64_t previous_pass_ns, std::uint64_t now_ns, bool* drained);
    // Under `quota`: a holder that has just run out of work (between two steps of a training
    // loop) keeps the GPU for a short grace, as if its next step were there already.
    void hold_for_returning_holder(QuotaClient* shares, std::uint32_t count,
                                   std::uint64_t now_ns);
    // Whether any client has launches not yet finished (as of the last account()).
    bool any_work() const;

    static constexpr std::uint32_t kBuckets = 20;
    struct Usage {
        std::array<std::uint64_t, kBuckets> buckets{};
        std::uint64_t low_water = 0;  // its finished launches as of the last pass
        std::uint64_t launch_ns = 0;  // measured GPU time per launch (moving average)
        std::uint64_t finished_ns = 0;        // the last pass that saw its launches finish
        std::uint64_t runnable_since_ns = 0;  // since when its work could run, 0: it cannot
        bool has_work = false;
    };

    RunView view_;
    std::array<Usage, kMaxClients> usage_{};
    std::uint64_t epoch_ = 0;        // index of the current bucket's time slot
    std::uint64_t last_pass_ns_ = 0;
    std::uint64_t drained_ns_ = 0;  // the last pass that saw work behind a closed gate finish
    int holder_ = -1;                  // under `quota`: the client holding the GPU
    std::uint64_t holder_since_ns_ = 0;
    std::uint64_t holder_idle_since_ns_ = 0;  // when the holder last ran out of work, 0: it has
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace orion
