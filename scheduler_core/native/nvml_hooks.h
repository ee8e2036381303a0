// NVML's memory query inside a limited client (nvml_hooks.cpp).
#pragma once

namespace orion {

// For dlsym: orion's wrapper for an NVML memory query (`real` remembered as what it calls), or
// `real` itself for any other symbol.
void* intercept_nvml(const char* symbol, void* real);

}  // namespace orion
