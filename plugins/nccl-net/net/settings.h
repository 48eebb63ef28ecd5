// The plugin's environment variables (docs/environment.md, "NCCL net plugin"), read once at the
// first init().  A value that does not parse fails init with the variable named.
#pragma once

#include <optional>
#include <string>

namespace hmr::nccl {

struct Settings {
  std::string provider;            // HMR_NCCL_PROVIDER; empty: the default order
  int connect_timeout_ms = 30000;  // HMR_NCCL_CONNECT_TIMEOUT (seconds, may be fractional)
  bool force_flush = false;        // HMR_NCCL_FORCE_FLUSH: iflush reads back host memory too
};

std::optional<Settings> read_settings(std::string* why);

}  // namespace hmr::nccl
