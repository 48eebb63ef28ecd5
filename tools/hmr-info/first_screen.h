// hmr-info's first screen: what works on this machine, what to pass hmr_domain_open, what is
// missing and the one thing to do about each, in lines of at most 100 columns.  Read from the
// finished report tree (so it cannot disagree with it) and stored back into it as "summary",
// so `--json` carries the same words the terminal shows.
#pragma once

#include <string>

#include "json_value.h"

namespace hmr::info {

// {"use", "pass": [...], "memory", "cache", "settings", "missing": [{"what", "why", "fix"}],
//  "lines": [...]} for `report` (whatever "summary" it already has is ignored).
JsonValue first_screen(const JsonValue& report);

// The first screen as printed: report["summary"]["lines"], one per line.
std::string render_first_screen(const JsonValue& report);

}  // namespace hmr::info
