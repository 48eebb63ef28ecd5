// The "config" section: every environment variable hmr reads, the value in force (set or
// default) and what was set, each parsed the way hmr parses it, so a bad value shows here
// with the error hmr_domain_open would give.
#pragma once

#include "json_value.h"
#include "util/environment.h"

namespace hmr::info {

JsonValue config_section(const Result<core::Environment>& environment);

}  // namespace hmr::info
