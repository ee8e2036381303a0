#include "memory_ledger.h"

#include <algorithm>

namespace orion {
namespace {

// The size remembered for `key`, forgotten; 0 for a key never recorded (nothing to give back).
template <typename Key>
std::uint64_t take_size(std::unordered_map<Key, std::uint64_t>& sizes, Key key) {
    const auto found = sizes.find(key);
    if (found == sizes.end()) return 0;
    const std::uint64_t bytes = found->second;
    sizes.erase(found);
    return bytes;
}

}  // namespace

bool MemoryLedger::reserve(std::uint64_t bytes) {
    const std::uint64_t limit = slot_->memory.limit.load(std::memory_order_acquire);
    const std::uint64_t after = slot_->memory.used.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
    if (limit != 0 && after > limit) {
        slot_->memory.used.fetch_sub(bytes, std::memory_order_acq_rel);
        slot_->memory.refused.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    std::uint64_t peak = slot_->memory.peak.load(std::memory_order_relaxed);
    while (after > peak && !slot_->memory.peak.compare_exchange_weak(peak, after,
                                                                     std::memory_order_relaxed)) {
    }
    return true;
}

void MemoryLedger::unreserve(std::uint64_t bytes) {
    slot_->memory.used.fetch_sub(bytes, std::memory_order_acq_rel);
}

void MemoryLedger::record_pointer(CUdeviceptr pointer, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    pointers_[pointer] = bytes;
}

void MemoryLedger::record_handle(CUmemGenericAllocationHandle handle, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    handles_[handle] = bytes;
}

void MemoryLedger::record_array(const void* array, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    arrays_[array] = bytes;
}

void MemoryLedger::forget_array(const void* array) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t bytes = take_size(arrays_, array);
    lock.unlock();
    unreserve(bytes);
}

void MemoryLedger::forget_pointer(CUdeviceptr pointer) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t bytes = take_size(pointers_, pointer);
    lock.unlock();
    unreserve(bytes);
}

void MemoryLedger::forget_handle(CUmemGenericAllocationHandle handle) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t bytes = take_size(handles_, handle);
    lock.unlock();
    unreserve(bytes);
}

std::uint64_t MemoryLedger::limit() const {
    return slot_->memory.limit.load(std::memory_order_acquire);
}

std::uint64_t MemoryLedger::used() const {
    return slot_->memory.used.load(std::memory_order_acquire);
}

void MemoryLedger::adjust_info(std::size_t* free_bytes, std::size_t* total_bytes) const {
    const std::uint64_t cap = limit();
    if (cap == 0) return;
    const std::uint64_t in_use = used();
    const std::uint64_t allowed = cap > in_use ? cap - in_use : 0;
    if (total_bytes != nullptr) *total_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(*total_bytes, cap));
    if (free_bytes != nullptr) *free_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(*free_bytes, allowed));
}

void MemoryLedger::adjust_total(std::size_t* total_bytes) const {
    const std::uint64_t cap = limit();
    if (cap != 0 && total_bytes != nullptr) {
        *total_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(*total_bytes, cap));
    }
}

}  // namespace orion
