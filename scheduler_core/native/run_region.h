// Creating, attaching to and removing one run's POSIX shared-memory object.
#pragma once

#include <cstdint>
#include <string>

#include "shared_state.h"

namespace orion {

struct RunConfig {
    Policy policy = Policy::kPassthrough;
    std::uint32_t sm_count = 0;
    std::uint64_t queue_limit_ns = 0;
    std::uint64_t unknown_duration_ns = 0;
    std::uint64_t stale_ns = 0;
    std::uint32_t trace_capacity = 0;  // rounded up to a power of two; 0 = off
    CompletionMode hp_completion = CompletionMode::kEstimate;  // kEstimate or kGpuWrite
    BeGate be_gate = BeGate::kCpu;
    bool quotas = false;
    std::uint64_t quota_window_ns = 1'000'000'000;
    bool open_slots = false;  // a daemon's run: clients join and leave after publication
};

// Owns one mapping of a run's shared memory; unmaps on destruction. Movable, not copyable.
class RunMapping {
public:
    RunMapping() = default;
    RunMapping(const RunMapping&) = delete;
    RunMapping& operator=(const RunMapping&) = delete;
    RunMapping(RunMapping&& other) noexcept;
    RunMapping& operator=(RunMapping&& other) noexcept;
    ~RunMapping();

    // Creates a new run (fails if the name exists). The header is filled but not yet `ready`.
    static RunMapping create(const std::string& name, const RunConfig& config, std::string* error);
    // Maps an existing run after checking magic, layout version and size.
    static RunMapping attach(const std::string& name, std::string* error);
    // Removes the name; mappings stay valid until unmapped.
    static bool unlink(const std::string& name, std::string* error);

    bool valid() const { return base_ != nullptr; }
    RunView view() const { return RunView(base_); }
    std::uint64_t size() const { return size_; }

private:
    RunMapping(void* base, std::uint64_t size) : base_(base), size_(size) {}
    void* base_ = nullptr;
    std::uint64_t size_ = 0;
};

}  // namespace orion
