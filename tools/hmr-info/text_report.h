// The full human report (hmr-info --full): the first screen, the summary lines with every
// reason in full, then one section per part of the tree, each an
// aligned "key: value" block.  Generic over the tree: a {supported, reason} pair prints as
// "yes: why" / "no: why", an array of objects as one titled block per element (titled by its
// "name"), null as "-".
#pragma once

#include <string>

#include "json_value.h"

namespace hmr::info {

std::string render_text(const JsonValue& report);

}  // namespace hmr::info
