// What a client publishes about its launches: each tracked launch in its in-flight ring, its
// completion written by the GPU (or estimated from profiled durations), and the trace ring.
#include "client_runtime.h"

#include <algorithm>

#include "driver.h"
#include "runtime_support.h"

namespace orion {

bool ClientRuntime::ensure_completion_words() {
    std::call_once(words_once_, [this] {
        const driver::Helpers& h = driver::helpers();
        void* words = view_.completion(index_);
        // Register just this client's page-aligned block of completion words, so the GPU can
        // write a launch's sequence number into shared memory the moment the launch finishes.
        const std::size_t bytes = sizeof(std::uint64_t) * kInflightSlots;
        words_mapped_ =
            h.mem_host_register != nullptr && h.mem_host_get_device_pointer != nullptr &&
            h.stream_write_value64 != nullptr &&
            h.mem_host_register(words, bytes,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
                CUDA_SUCCESS &&
            h.mem_host_get_device_pointer(&completion_device_base_, words, 0) == CUDA_SUCCESS;
    });
    return words_mapped_;
}

void ClientRuntime::ensure_completion_tracking() {
    // Every tracked launch comes here: after the first, one acquire load instead of a
    // std::call_once (in a shared library two thread-local writes through __tls_get_addr each).
    if (completion_ready_.load(std::memory_order_acquire)) return;
    std::call_once(completion_once_, [this] {
        // The HP client estimates its finish times unless the run asks for GPU writes: a write is
        // one more driver call after every HP launch, on the path whose latency the scheduler is
        // there to protect. BE clients always ask for writes (exact BE queue accounting). Graph
        // launches get a written completion in either mode (see track_graph below).
        // Under `quota` every client's work is timed by its written completions.
        const bool gpu_writes =
            role_ != Role::kHighPriority || policy_ == Policy::kQuota ||
            view_.decisions().hp_completion != static_cast<std::uint32_t>(CompletionMode::kEstimate);
        CompletionMode mode = CompletionMode::kEstimate;
        if (gpu_writes) {
            if (ensure_completion_words()) {
                mode = CompletionMode::kGpuWrite;
            } else {
                log_message("cannot map completion words for the GPU; estimating finish times");
            }
        }
        completion_mode_.store(static_cast<std::uint32_t>(mode), std::memory_order_release);
        slot_->completion_mode.store(static_cast<std::uint32_t>(mode), std::memory_order_release);
    });
    completion_ready_.store(true, std::memory_order_release);  // after the call: all it did is seen
}

std::uint64_t ClientRuntime::track_launch(const KernelInfo& kernel, std::uint64_t key,
                                          std::uint64_t now_ns, bool gpu_written, bool graph,
                                          std::uint64_t seq, std::uint64_t guard_seq) {
    ensure_completion_tracking();
    if (seq == 0) seq = slot_->next_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    InflightEntry& entry = view_.inflight(index_)[seq & kRingMask];
    std::uint64_t previous_end = slot_->last_expected_end_ns.load(std::memory_order_relaxed);
    std::uint64_t expected_end = 0;
    do {
        expected_end = std::max(now_ns, previous_end) + kernel.duration_ns;
    } while (!slot_->last_expected_end_ns.compare_exchange_weak(previous_end, expected_end,
                                                                std::memory_order_relaxed));
    InflightLaunch launch;
    launch.key = key;
    launch.launch_ns = now_ns;
    launch.expected_end_ns = expected_end;
    launch.duration_ns = kernel.duration_ns;
    launch.sm_needed = kernel.sm_needed;
    launch.kernel_class = static_cast<std::uint8_t>(kernel.kernel_class);
    launch.known = kernel.known;
    launch.gpu_written = gpu_written;
    launch.graph = graph;
    launch.guard_seq = guard_seq;
    write_inflight(entry, seq, launch);
    std::uint64_t published = slot_->published_seq.load(std::memory_order_relaxed);
    while (published < seq && !slot_->published_seq.compare_exchange_weak(
                                  published, seq, std::memory_order_release,
                                  std::memory_order_relaxed)) {
    }
    slot_->stats.tracked_launches.fetch_add(1, std::memory_order_relaxed);
    return seq;
}

void ClientRuntime::mark_finished_by_cpu(std::uint64_t seq) {
    view_.completion(index_)[seq & kRingMask].store(seq, std::memory_order_release);
}

void ClientRuntime::write_trace(const LaunchTicket& ticket) {
    const std::uint64_t index = slot_->trace_head.fetch_add(1, std::memory_order_acq_rel);
    TraceRecord& record = view_.trace(index_)[index & (view_.trace_capacity() - 1)];
    // The seqlock of shared_state.h: invalidate, fence, fields, publish.
    record.seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    record.key.store(ticket.key, std::memory_order_relaxed);
    record.enqueue_ns.store(ticket.enqueue_ns, std::memory_order_relaxed);
    record.launch_ns.store(ticket.launch_ns, std::memory_order_relaxed);
    record.duration_ns.store(ticket.kernel.duration_ns, std::memory_order_relaxed);
    record.sm_needed.store(ticket.kernel.sm_needed, std::memory_order_relaxed);
    record.kernel_class.store(static_cast<std::uint8_t>(ticket.kernel.kernel_class),
                              std::memory_order_relaxed);
    record.reason.store(static_cast<std::uint8_t>(ticket.reason), std::memory_order_relaxed);
    record.known.store(ticket.kernel.known ? 1 : 0, std::memory_order_relaxed);
    record.seq.store(index + 1, std::memory_order_release);
}

}  // namespace orion
