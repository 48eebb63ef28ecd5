// The "config" section: every environment variable hmr reads, the value in force (set or
// default) and what was set, each parsed the way hmr parses it, so a bad value shows here
// with the error hmr_domain_open would give.
#pragma once

#include <string>

#include "json_value.h"
#include "util/environment.h"

namespace hmr::info {

// `monitor_refusal`: why hmr_domain_open fails for FI_MR_CACHE_MONITOR (a monitor that is not
// built in, or cannot start here), from the monitors section; empty when it does not.  The
// environment parses then, but is not accepted.
JsonValue config_section(const Result<core::Environment>& environment,
                         const std::string& monitor_refusal);

}  // namespace hmr::info
