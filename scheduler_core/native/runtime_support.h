// Small helpers shared by the files that implement ClientRuntime (client_runtime.h): its log
// line and its reading of boolean environment variables. Internal to the preload library.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shared_state.h"

namespace orion {

// A launch's slot in its client's in-flight ring and completion words.
constexpr std::uint64_t kRingMask = kInflightSlots - 1;

// One line on stderr, prefixed "orion: ", written with one call so that the messages of
// concurrent processes do not interleave mid-line.
inline void log_message(const char* text) {
    std::string line = std::string("orion: ") + text + "\n";
    [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
}

// Set, non-empty and not "0".
inline bool env_flag(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace orion
