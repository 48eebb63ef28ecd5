// The shape every NIC adapter's nic_options text shares: items separated by ';', each
// "name=value".  The adapters differ only in the names they know, so the splitting lives here.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace hmr::nic {

struct OptionItem {
  std::string name;   // the whole item when it has no '='
  std::string value;  // everything after the first '=' (may itself hold '=')
  bool has_value = false;
};

// Splits `text` (nullptr: no options) at ';', dropping empty items.  Items without '=' come
// back with has_value false: ofi reads them as the rest of a layered provider ("tcp;ofi_rxm").
std::vector<OptionItem> split_option_list(const char* text);

// split_option_list, but every item must be name=value; `adapter` ("verbs", "sim") names the
// adapter in the error.
Result<std::vector<OptionItem>> parse_option_list(const char* text, const char* adapter);

}  // namespace hmr::nic
