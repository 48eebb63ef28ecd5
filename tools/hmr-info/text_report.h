// The human report: the summary lines, then one section per part of the tree, each an
// aligned "key: value" block.  Generic over the tree: a {supported, reason} pair prints as
// "yes: why" / "no: why", an array of objects as one titled block per element (titled by its
// "name"), null as "-".
#pragma once

#include <string>

#include "json_value.h"

namespace hmr::info {

std::string render_text(const JsonValue& report);

}  // namespace hmr::info
