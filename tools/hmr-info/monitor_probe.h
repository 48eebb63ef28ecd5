// The "monitors" section: which host-memory monitors can start in this process, which one a
// domain gets by default, and how each device runtime's frees reach the registration cache.
#pragma once

#include <vector>

#include "hmem/hmem_registry.h"
#include "json_value.h"
#include "util/environment.h"

namespace hmr::info {

// Starts each built-in host monitor once to see whether it can (memhooks is stopped again,
// so libc is left as it was; the userfaultfd thread stays until the process exits).
JsonValue monitors_section(const std::vector<hmem::IfaceReport>& reports,
                           const Result<core::Environment>& environment);

}  // namespace hmr::info
