#include "core/environment.h"

#include <strings.h>

#include <cstdlib>

namespace hmr::core {

Result<bool> env_bool(const char* name, bool default_value) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return default_value;
  for (const char* yes : {"1", "yes", "true", "on", "y"}) {
    if (strcasecmp(value, yes) == 0) return true;
  }
  for (const char* no : {"0", "no", "false", "off", "n"}) {
    if (strcasecmp(value, no) == 0) return false;
  }
  return make_error(HMR_EINVAL, "%s='%s' is not a boolean (use 1/0, yes/no, true/false, on/off)",
                    name, value);
}

Result<Environment> read_environment() {
  Environment environment;
  Result<bool> disable_p2p = env_bool("FI_HMEM_DISABLE_P2P", false);
  if (!disable_p2p.ok()) return disable_p2p.status();
  environment.disable_p2p = *disable_p2p;
  return environment;
}

}  // namespace hmr::core
