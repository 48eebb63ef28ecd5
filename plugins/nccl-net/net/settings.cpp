#include "settings.h"

#include <cstdlib>
#include <strings.h>

namespace hmr::nccl {

std::optional<Settings> read_settings(std::string* why) {
  Settings settings;
  if (const char* provider = std::getenv("HMR_NCCL_PROVIDER")) settings.provider = provider;
  if (const char* timeout = std::getenv("HMR_NCCL_CONNECT_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(timeout, &end);
    if (end == timeout || *end != '\0' || !(seconds > 0) || seconds > 86400) {
      *why = std::string("HMR_NCCL_CONNECT_TIMEOUT='") + timeout +
             "' is not a number of seconds between 0 and 86400";
      return std::nullopt;
    }
    settings.connect_timeout_ms = static_cast<int>(seconds * 1000);
  }
  if (const char* flush = std::getenv("HMR_NCCL_FORCE_FLUSH")) {
    if (strcasecmp(flush, "1") == 0 || strcasecmp(flush, "yes") == 0 ||
        strcasecmp(flush, "true") == 0 || strcasecmp(flush, "on") == 0) {
      settings.force_flush = true;
    } else if (strcasecmp(flush, "0") != 0 && strcasecmp(flush, "no") != 0 &&
               strcasecmp(flush, "false") != 0 && strcasecmp(flush, "off") != 0) {
      *why = std::string("HMR_NCCL_FORCE_FLUSH='") + flush + "' is not a boolean (1/0, yes/no, true/false, on/off)";
      return std::nullopt;
    }
  }
  return settings;
}

void apply_libfabric_defaults() {
  setenv("FI_OFI_RXM_MSG_RX_SIZE", "128", 0);
  setenv("FI_OFI_RXM_BUFFER_SIZE", "4096", 0);
}

}  // namespace hmr::nccl
