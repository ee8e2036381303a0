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

void raise_peak(ClientMemory& memory, std::uint64_t used) {
    std::uint64_t peak = memory.peak.load(std::memory_order_relaxed);
    while (used > peak &&
           !memory.peak.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
    }
}

}  // namespace

MemoryLedger::Account MemoryLedger::account() const {
    const std::uint32_t holder = decision_->memory_account.load(std::memory_order_acquire);
    if (holder == 0 || holder > kMaxClients) return {&slot_->memory, decision_};
    return {&view_.client(holder - 1).memory, &view_.decision(holder - 1)};
}

bool MemoryLedger::reserve(std::uint64_t bytes) {
    const Account shared = account();
    const std::uint64_t limit = shared.decision->memory_limit.load(std::memory_order_acquire);
    const std::uint64_t after =
        shared.memory->used.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
    if (limit != 0 && after > limit) {
        shared.memory->used.fetch_sub(bytes, std::memory_order_acq_rel);
        slot_->memory.refused.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    raise_peak(*shared.memory, after);
    if (shared.memory != &slot_->memory) {
        raise_peak(slot_->memory,
                   slot_->memory.used.fetch_add(bytes, std::memory_order_acq_rel) + bytes);
    }
    return true;
}

template <typename Key>
void MemoryLedger::give_back(std::unordered_map<Key, std::uint64_t>& sizes, Key key) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t bytes = take_size(sizes, key);
    lock.unlock();
    unreserve(bytes);
}

void MemoryLedger::charge(std::uint64_t bytes) {
    const Account shared = account();
    raise_peak(*shared.memory,
               shared.memory->used.fetch_add(bytes, std::memory_order_acq_rel) + bytes);
    if (shared.memory != &slot_->memory) {
        raise_peak(slot_->memory,
                   slot_->memory.used.fetch_add(bytes, std::memory_order_acq_rel) + bytes);
    }
}

void MemoryLedger::count_context(std::uint64_t bytes) {
    if (slot_ != nullptr && bytes != 0) charge(bytes);
}

void MemoryLedger::drop_all() {
    const Account shared = account();
    const std::uint64_t held = slot_->memory.used.exchange(0, std::memory_order_acq_rel);
    if (shared.memory != &slot_->memory) subtract_at_most(shared.memory->used, held);
}

void MemoryLedger::unreserve(std::uint64_t bytes) {
    const Account shared = account();
    slot_->memory.used.fetch_sub(bytes, std::memory_order_acq_rel);
    // The account's use was reset when its own client ended (its slot is being given back):
    // what is given back there never goes below zero.
    if (shared.memory != &slot_->memory) subtract_at_most(shared.memory->used, bytes);
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
    give_back(arrays_, array);
}

void MemoryLedger::forget_pointer(CUdeviceptr pointer) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto pooled = pool_pointers_.find(pointer);
    if (pooled != pool_pointers_.end()) {
        const PoolPointer freed = pooled->second;
        pool_pointers_.erase(pooled);
        const auto pool = pools_.find(freed.pool);
        if (pool == pools_.end()) {  // its pool was destroyed while it lived
            lock.unlock();
            unreserve(freed.bytes);
            return;
        }
        // The pool may keep the freed memory: it stays counted as long as it may.
        Pool& state = pool->second;
        state.live -= std::min(state.live, freed.bytes);
        state.kept += freed.bytes;
        cap_kept(&state, state.threshold);
        return;
    }
    const std::uint64_t bytes = take_size(pointers_, pointer);
    lock.unlock();
    unreserve(bytes);
}

CUmemoryPool MemoryLedger::pool_key(CUmemoryPool pool) const {
    return pool != nullptr && pool == default_pool_ ? nullptr : pool;
}

void MemoryLedger::cap_kept(Pool* pool, std::uint64_t threshold) {
    const std::uint64_t may_keep = threshold > pool->live ? threshold - pool->live : 0;
    if (pool->kept <= may_keep) return;
    unreserve(pool->kept - may_keep);
    pool->kept = may_keep;
}

void MemoryLedger::note_pool(CUmemoryPool pool, bool on_device) {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_[pool_key(pool)].on_device = on_device;
}

void MemoryLedger::note_default_pool(CUmemoryPool pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool == nullptr || pool == default_pool_) return;
    default_pool_ = pool;
    // What was recorded under the handle before it was known to be the default pool's.
    const auto known = pools_.find(pool);
    if (known != pools_.end()) {
        Pool& merged = pools_[nullptr];
        merged.threshold = std::max(merged.threshold, known->second.threshold);
        merged.live += known->second.live;
        merged.kept += known->second.kept;
        pools_.erase(pool);
    }
    for (auto& [pointer, owner] : pool_pointers_) {
        if (owner.pool == pool) owner.pool = nullptr;
    }
    if (current_pool_ == pool) current_pool_ = nullptr;
}

void MemoryLedger::set_current_pool(CUmemoryPool pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    current_pool_ = pool_key(pool);
}

CUmemoryPool MemoryLedger::current_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_pool_;
}

bool MemoryLedger::pool_on_device(CUmemoryPool pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = pools_.find(pool_key(pool));
    return found == pools_.end() || found->second.on_device;
}

void MemoryLedger::set_pool_threshold(CUmemoryPool pool, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& state = pools_[pool_key(pool)];
    state.threshold = bytes;
    cap_kept(&state, bytes);
}

void MemoryLedger::trim_pool(CUmemoryPool pool, std::uint64_t keep_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = pools_.find(pool_key(pool));
    if (found != pools_.end()) cap_kept(&found->second, keep_bytes);
}

void MemoryLedger::forget_pool(CUmemoryPool pool) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto found = pools_.find(pool_key(pool));
    if (found == pools_.end()) return;
    const std::uint64_t kept = found->second.kept;
    // Allocations still live are given back one by one when freed (their pool is gone).
    pools_.erase(found);
    lock.unlock();
    unreserve(kept);
}

bool MemoryLedger::reserve_from_pool(CUmemoryPool pool, std::uint64_t bytes,
                                     std::uint64_t* from_kept) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& state = pools_[pool_key(pool)];
    *from_kept = std::min(state.kept, bytes);
    if (bytes > *from_kept && !reserve(bytes - *from_kept)) return false;
    state.kept -= *from_kept;
    state.live += bytes;
    cap_kept(&state, state.threshold);
    return true;
}

void MemoryLedger::unreserve_from_pool(CUmemoryPool pool, std::uint64_t bytes,
                                       std::uint64_t from_kept) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& state = pools_[pool_key(pool)];
    state.live -= std::min(state.live, bytes);
    state.kept += from_kept;
    unreserve(bytes - from_kept);
    cap_kept(&state, state.threshold);
}

void MemoryLedger::record_pool_pointer(CUdeviceptr pointer, CUmemoryPool pool,
                                       std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_pointers_[pointer] = PoolPointer{pool_key(pool), bytes};
}

std::uint64_t MemoryLedger::kept_by_pools() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t kept = 0;
    for (const auto& [pool, state] : pools_) kept += state.kept;
    return kept;
}

bool MemoryLedger::set_context_limit(CUlimit limit, std::size_t value) {
    if (limit < CU_LIMIT_STACK_SIZE || limit > CU_LIMIT_MALLOC_HEAP_SIZE) return true;
    constexpr std::uint64_t kDefaults[3] = {1024, 1 << 20, 8 << 20};
    constexpr std::uint64_t kThreadsPerSm = 2048;
    const std::uint64_t beyond = value > kDefaults[limit] ? value - kDefaults[limit] : 0;
    const std::uint64_t bytes =
        limit == CU_LIMIT_STACK_SIZE ? beyond * std::max<std::uint64_t>(sm_count_, 1) * kThreadsPerSm
                                     : beyond;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::uint64_t now = context_bytes_[limit];
    if (bytes > now && !reserve(bytes - now)) return false;
    if (bytes < now) unreserve(now - bytes);
    context_before_[limit] = now;
    context_bytes_[limit] = bytes;
    return true;
}

void MemoryLedger::undo_context_limit(CUlimit limit) {
    if (limit < CU_LIMIT_STACK_SIZE || limit > CU_LIMIT_MALLOC_HEAP_SIZE) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::uint64_t now = context_bytes_[limit];
    const std::uint64_t before = context_before_[limit];
    if (now > before) unreserve(now - before);
    if (before > now) charge(before - now);
    context_bytes_[limit] = before;
}

void MemoryLedger::record_graph(const void* exec, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    graphs_[exec] += bytes;
}

void MemoryLedger::forget_graph(const void* exec) {
    give_back(graphs_, exec);
}

void MemoryLedger::forget_handle(CUmemGenericAllocationHandle handle) {
    give_back(handles_, handle);
}

void MemoryLedger::adopt(MemoryLedger& old) {
    std::scoped_lock lock(old.mutex_, mutex_);
    std::uint64_t held = 0;
    for (const auto& [pointer, bytes] : old.pointers_) held += bytes;
    for (const auto& [handle, bytes] : old.handles_) held += bytes;
    for (const auto& [array, bytes] : old.arrays_) held += bytes;
    for (const auto& [pointer, owner] : old.pool_pointers_) held += owner.bytes;
    for (const auto& [pool, state] : old.pools_) held += state.kept;
    for (const auto& [exec, bytes] : old.graphs_) held += bytes;
    for (int limit = 0; limit < 3; ++limit) {
        held += old.context_bytes_[limit];
        context_bytes_[limit] = context_before_[limit] = old.context_bytes_[limit];
        old.context_bytes_[limit] = old.context_before_[limit] = 0;
    }
    pointers_ = std::move(old.pointers_);
    handles_ = std::move(old.handles_);
    arrays_ = std::move(old.arrays_);
    pools_ = std::move(old.pools_);
    pool_pointers_ = std::move(old.pool_pointers_);
    graphs_ = std::move(old.graphs_);
    default_pool_ = old.default_pool_;
    current_pool_ = old.current_pool_;
    old.pointers_.clear();
    old.handles_.clear();
    old.arrays_.clear();
    old.pools_.clear();
    old.pool_pointers_.clear();
    old.graphs_.clear();
    if (slot_ == nullptr || held == 0) return;
    charge(held);
}

std::uint64_t MemoryLedger::limit() const {
    return account().decision->memory_limit.load(std::memory_order_acquire);
}

std::uint64_t MemoryLedger::used() const {
    return account().memory->used.load(std::memory_order_acquire);
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
