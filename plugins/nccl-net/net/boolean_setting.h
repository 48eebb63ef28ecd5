// How the plugin reads a boolean environment variable (net/settings.cpp), in a header of its
// own so a program that drives the plugin (tests/nccl-net/nccl_soak.cpp) reads a value the
// same way the plugin did.
#pragma once

#include <strings.h>

#include <optional>

namespace hmr::nccl {

// 1/0, yes/no, true/false, on/off, y/n (any case), as hmr's own reader; nullopt for anything
// else.
inline std::optional<bool> parse_boolean_setting(const char* text) {
  for (const char* yes : {"1", "yes", "true", "on", "y"}) {
    if (strcasecmp(text, yes) == 0) return true;
  }
  for (const char* no : {"0", "no", "false", "off", "n"}) {
    if (strcasecmp(text, no) == 0) return false;
  }
  return std::nullopt;
}

}  // namespace hmr::nccl
