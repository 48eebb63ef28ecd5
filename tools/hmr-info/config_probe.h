// The "config" section: every environment variable hmr reads, the value in force (set or
// default) and what was set, each parsed the way hmr parses it, so a bad value shows here
// with the error hmr_domain_open would give.
#pragma once

#include "core/environment.h"
#include "json_value.h"

namespace hmr::info {

JsonValue config_section(const Result<core::Environment>& environment);

}  // namespace hmr::info
