#include "run_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace orion {
namespace {

std::string describe(const char* what, const std::string& name) {
    return std::string(what) + " '" + name + "': " + std::strerror(errno);
}

std::uint32_t round_up_pow2(std::uint32_t value) {
    if (value == 0) return 0;
    std::uint32_t result = 1;
    while (result < value && result < (1U << 30)) result <<= 1;
    return result;
}

}  // namespace

RunMapping::RunMapping(RunMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

RunMapping& RunMapping::operator=(RunMapping&& other) noexcept {
    if (this != &other) {
        if (base_ != nullptr) munmap(base_, size_);
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

RunMapping::~RunMapping() {
    if (base_ != nullptr) munmap(base_, size_);
}

RunMapping RunMapping::create(const std::string& name, const RunConfig& config,
                              std::string* error) {
    const std::uint32_t trace_capacity = round_up_pow2(config.trace_capacity);
    const Layout layout = compute_layout(trace_capacity);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        *error = describe("cannot create shared memory", name);
        return {};
    }
    // The umask may have widened nothing, but make the 0600 promise explicit.
    fchmod(fd, S_IRUSR | S_IWUSR);
    if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
        *error = describe("cannot size shared memory", name);
        close(fd);
        shm_unlink(name.c_str());
        return {};
    }
    void* base = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = describe("cannot map shared memory", name);
        shm_unlink(name.c_str());
        return {};
    }
    // ftruncate zero-fills: every atomic starts at 0, every slot is free.
    auto* header = static_cast<RunHeader*>(base);
    header->magic = kMagic;
    header->layout_version = kLayoutVersion;
    header->header_bytes = sizeof(RunHeader);
    header->total_bytes = layout.total_bytes;
    header->policy = static_cast<std::uint32_t>(config.policy);
    header->sm_count = config.sm_count;
    // An open run counts every slot (free ones take part in nothing); a closed one counts the
    // clients its controller adds before publishing.
    header->open_slots = config.open_slots ? 1 : 0;
    header->client_count = config.open_slots ? kMaxClients : 0;
    header->queue_limit_ns = config.queue_limit_ns;
    header->unknown_duration_ns = config.unknown_duration_ns;
    header->stale_ns = config.stale_ns;
    header->trace_capacity = trace_capacity;
    header->hp_completion = static_cast<std::uint32_t>(config.hp_completion);
    header->clients_offset = layout.clients_offset;
    header->kernels_offset = layout.kernels_offset;
    header->inflight_offset = layout.inflight_offset;
    header->completion_offset = layout.completion_offset;
    header->completion_bytes = layout.completion_bytes;
    header->trace_offset = layout.trace_offset;
    header->graphs_offset = layout.graphs_offset;
    header->timeline_offset = layout.timeline_offset;
    header->gate_offset = layout.gate_offset;
    header->learned_offset = layout.learned_offset;
    header->be_gate = static_cast<std::uint32_t>(config.be_gate);
    header->quotas = config.quotas ? 1 : 0;
    header->quota_window_ns = config.quota_window_ns;
    for (std::uint32_t client = 0; client < kMaxClients; ++client) {
        RunView(base).client(client).quota.max_ppm.store(kFullShare, std::memory_order_relaxed);
    }
    // Every gate starts open: nothing is held until an HP client launches.
    GateBlock& gates = RunView(base).gates();
    for (GateWord& gate : gates.gates) gate.word.store(kGateOpen, std::memory_order_relaxed);
    return RunMapping(base, layout.total_bytes);
}

RunMapping RunMapping::attach(const std::string& name, std::string* error) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
        *error = describe("cannot open shared memory", name);
        return {};
    }
    struct stat info {};
    if (fstat(fd, &info) != 0 || static_cast<std::uint64_t>(info.st_size) < sizeof(RunHeader)) {
        *error = "shared memory '" + name + "' is too small to be an orion run";
        close(fd);
        return {};
    }
    const auto size = static_cast<std::uint64_t>(info.st_size);
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *error = describe("cannot map shared memory", name);
        return {};
    }
    const auto* header = static_cast<const RunHeader*>(base);
    const char* problem = nullptr;
    if (header->magic != kMagic) {
        problem = "is not an orion run (bad magic number)";
    } else if (header->layout_version != kLayoutVersion) {
        problem = "was made by another orion version (layout version differs)";
    } else if (header->header_bytes != sizeof(RunHeader) || header->total_bytes != size) {
        problem = "has an unexpected size (another orion version?)";
    }
    if (problem != nullptr) {
        *error = "shared memory '" + name + "' " + problem;
        munmap(base, size);
        return {};
    }
    return RunMapping(base, size);
}

bool RunMapping::unlink(const std::string& name, std::string* error) {
    if (shm_unlink(name.c_str()) != 0) {
        *error = describe("cannot remove shared memory", name);
        return false;
    }
    return true;
}

}  // namespace orion
