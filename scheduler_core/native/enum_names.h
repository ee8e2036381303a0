// The names of an enum's values, declared once per enum as an array indexed by the value: the
// name printed for a value and the value parsed from a name come from the same table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace orion {

// The name of `value` in `names`; `fallback` for a value past the table.
template <std::size_t N>
const char* name_of(const char* const (&names)[N], std::uint32_t value,
                    const char* fallback = "unknown") {
    return value < N ? names[value] : fallback;
}

// Sets `*out` to the value named `name`, looking from the value `first` on (the ones before it
// have names but are no choice); false when none has that name.
template <typename Enum, std::size_t N>
bool value_named(const char* const (&names)[N], const char* name, Enum* out,
                 std::size_t first = 0) {
    for (std::size_t value = first; value < N; ++value) {
        if (std::strcmp(names[value], name) == 0) {
            *out = static_cast<Enum>(value);
            return true;
        }
    }
    return false;
}

}  // namespace orion
