// probe_table.h on its own: finds what was claimed, misses what was not, wraps around the end of
// the table, gives up after `limit` slots, and hands every thread racing to claim one key the same
// slot while distinct keys get distinct slots. Prints "ok" or the first failure; exits 1 on one.
#include "probe_table.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

struct Slot {
    std::atomic<std::uint64_t> key{0};
    std::atomic<int> owner{0};
};
constexpr std::uint32_t kSize = 64;
auto key_of = [](auto& slot) -> auto& { return slot.key; };

int failures = 0;
void check(bool ok, const char* what) {
    if (!ok && failures++ == 0) std::printf("FAILED: %s\n", what);
}

}  // namespace

int main() {
    using orion::find_or_claim_slot;
    using orion::find_slot;
    {
        Slot table[kSize];
        bool claimed = false;
        Slot* a = find_or_claim_slot(table, kSize, kSize, 5, std::uint64_t{5}, key_of, &claimed);
        check(a == &table[5] && claimed, "a key is claimed at its start slot");
        claimed = false;
        Slot* again = find_or_claim_slot(table, kSize, kSize, 5, std::uint64_t{5}, key_of, &claimed);
        check(again == a && !claimed, "claiming a present key finds it");
        Slot* b = find_or_claim_slot(table, kSize, kSize, 5, std::uint64_t{69}, key_of);
        check(b == &table[6], "a collision takes the next slot");
        check(find_slot(table, kSize, kSize, 5, std::uint64_t{69}, key_of) == b, "found past a collision");
        check(find_slot(table, kSize, kSize, 5, std::uint64_t{133}, key_of) == nullptr,
              "an absent key stops at the first empty slot");
        Slot* wrap = find_or_claim_slot(table, kSize, kSize, 63, std::uint64_t{63}, key_of);
        Slot* wrapped = find_or_claim_slot(table, kSize, kSize, 63, std::uint64_t{127}, key_of);
        check(wrap == &table[63] && wrapped == &table[0], "probing wraps around the end");
        const Slot* constant = find_slot(static_cast<const Slot*>(table), kSize, kSize, 63,
                                         std::uint64_t{127}, key_of);
        check(constant == wrapped, "a const table is searched the same way");
    }
    {
        Slot table[kSize];
        for (std::uint64_t key = 1; key <= 4; ++key) {
            find_or_claim_slot(table, kSize, 4, 0, key, key_of);
        }
        check(find_or_claim_slot(table, kSize, 4, 0, std::uint64_t{9}, key_of) == nullptr,
              "a full neighbourhood gives up after limit slots");
        check(find_slot(table, kSize, 4, 0, std::uint64_t{9}, key_of) == nullptr,
              "and finds nothing there");
    }
    for (int round = 0; round < 200; ++round) {
        Slot table[kSize];
        std::vector<std::thread> threads;
        std::atomic<int> claims{0};
        Slot* seen[8] = {};
        for (int t = 0; t < 8; ++t) {
            threads.emplace_back([&, t] {
                // Threads 0-3 race for key 7, threads 4-7 each claim a key of their own, all
                // starting at slot 7.
                const std::uint64_t key = t < 4 ? 7 : 100 + t;
                bool claimed = false;
                seen[t] = find_or_claim_slot(table, kSize, kSize, 7, key, key_of, &claimed);
                if (claimed) claims.fetch_add(1);
            });
        }
        for (std::thread& thread : threads) thread.join();
        check(seen[0] == seen[1] && seen[1] == seen[2] && seen[2] == seen[3],
              "threads claiming one key get one slot");
        for (int a = 3; a < 8; ++a) {
            for (int b = a + 1; b < 8; ++b) check(seen[a] != seen[b], "distinct keys, distinct slots");
        }
        check(claims.load() == 5, "each key is claimed once");
    }
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
}
