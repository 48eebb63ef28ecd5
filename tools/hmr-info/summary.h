// The plain-language lines at the top of the text report ("No GPU: ...", "No RDMA device:
// ..."), read from the finished report tree so they can never disagree with it.
#pragma once

#include <string>
#include <vector>

#include "json_value.h"

namespace hmr::info {

// A line may hold '\n': its continuation lines, each to be indented under it.
std::vector<std::string> summary_lines(const JsonValue& report);

}  // namespace hmr::info
