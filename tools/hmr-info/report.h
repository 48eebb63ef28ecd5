// The whole hmr-info report as one tree: {"hmr", "ifaces", "devices", "nics", "monitors",
// "config"}.  Building it loads the memory runtimes, libibverbs and libfabric the way hmr
// does, and starts the host monitors once; every failure becomes a reason in the tree.
#pragma once

#include "json_value.h"

namespace hmr::info {

JsonValue build_report();

}  // namespace hmr::info
