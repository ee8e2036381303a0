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
    // Charges each client with work on the GPU the time since the last pass, into a sliding
    // window of buckets, and publishes its use of the window (ClientQuota::used_ns).
    void account(std::uint64_t now_ns);
    // Whether any client has launches not yet finished (as of the last account()).
    bool any_work() const;

    static constexpr std::uint32_t kBuckets = 20;
    struct Usage {
        std::array<std::uint64_t, kBuckets> buckets{};
        std::uint64_t low_water = 0;  // its finished launches as of the last pass
        bool has_work = false;
    };

    RunView view_;
    std::array<Usage, kMaxClients> usage_{};
    std::uint64_t epoch_ = 0;        // index of the current bucket's time slot
    std::uint64_t last_pass_ns_ = 0;
    int holder_ = -1;                // under `quota`: the client holding the GPU
    std::uint64_t holder_since_ns_ = 0;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace orion
