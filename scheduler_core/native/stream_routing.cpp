// Streams by role: the priority a client's new streams get, and an HP launch on the legacy default
// stream moved to a private high-priority stream with every ordering the program wrote kept.
#include "client_runtime.h"

#include "driver.h"
#include "hooked_symbols.h"

namespace orion {

int ClientRuntime::stream_priority(int requested) {
    if (!sets_priorities()) return requested;
    std::call_once(priority_once_, [this] {
        const auto fn = driver::helpers().ctx_get_stream_priority_range;
        priority_known_ =
            fn != nullptr && fn(&least_priority_, &greatest_priority_) == CUDA_SUCCESS;
    });
    if (!priority_known_) return requested;
    return role_ == Role::kHighPriority ? greatest_priority_ : least_priority_;
}

void ClientRuntime::count_prioritised_stream() {
    if (slot_ != nullptr) slot_->stats.streams_prioritised.fetch_add(1, std::memory_order_relaxed);
}

CUstream ClientRuntime::redirect_legacy_launch() {
    if (redirect_failed_.load(std::memory_order_relaxed)) return nullptr;
    const driver::Helpers& h = driver::helpers();
    if (!redirect_ready_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(redirect_mutex_);
        if (!redirect_ready_.load(std::memory_order_relaxed)) {
            auto create = hooks::real_cuStreamCreateWithPriority(hooks::kLegacy);
            CUcontext context = nullptr;
            // A blocking stream: the legacy default stream's implicit synchronisation keeps
            // every later legacy-stream operation ordered after the moved launches.
            if (create == nullptr || h.ctx_get_current == nullptr || h.event_record == nullptr ||
                h.stream_wait_event == nullptr || h.event_create == nullptr ||
                h.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr ||
                create(&redirect_stream_, CU_STREAM_DEFAULT, stream_priority(0)) != CUDA_SUCCESS) {
                redirect_failed_.store(true, std::memory_order_relaxed);
                return nullptr;
            }
            redirect_context_ = context;
            redirect_ready_.store(true, std::memory_order_release);
        }
    }
    CUcontext context = nullptr;
    if (h.ctx_get_current(&context) != CUDA_SUCCESS || context != redirect_context_) return nullptr;
    // Each thread records its own event, so concurrent launches need no lock.
    thread_local CUevent thread_event = nullptr;
    CUevent event = thread_event;  // read once: each use of a thread_local costs a __tls_get_addr
    if (event == nullptr) {
        if (h.event_create(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
        thread_event = event;
    }
    // The launch must still wait for everything the legacy stream would have waited for.
    if (h.event_record(event, cu_stream_legacy()) != CUDA_SUCCESS ||
        h.stream_wait_event(redirect_stream_, event, 0) != CUDA_SUCCESS) {
        return nullptr;
    }
    redirect_used_.store(true, std::memory_order_release);
    slot_->stats.redirected_launches.fetch_add(1, std::memory_order_relaxed);
    return redirect_stream_;
}

void ClientRuntime::join_legacy_stream() {
    const driver::Helpers& h = driver::helpers();
    // Blocking streams wait for earlier legacy-stream work, but not for each other: without this,
    // work the program then puts on a blocking stream of its own (CuPy's default Stream(), say)
    // would no longer wait for the moved kernel. Making the legacy stream wait for the moved
    // launch keeps every ordering the program wrote: later legacy work, and through the legacy
    // stream's implicit synchronisation every later blocking-stream launch, comes after it.
    thread_local CUevent thread_done = nullptr;
    CUevent done = thread_done;  // read once: each use of a thread_local costs a __tls_get_addr
    if (done == nullptr) {
        if (h.event_create(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
        thread_done = done;
    }
    if (h.event_record(done, redirect_stream_) == CUDA_SUCCESS) {
        h.stream_wait_event(cu_stream_legacy(), done, 0);
    }
}

}  // namespace orion
