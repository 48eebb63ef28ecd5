#include "settings.h"

#include <cstdlib>

#include "../wire/limits.h"
#include "boolean_setting.h"

namespace hmr::nccl {

namespace {

// A number of seconds (fractions allowed) in (0, 86400], as milliseconds; with `zero_allowed`
// also 0 (no deadline, stored as 0).
bool read_seconds(const char* name, int* out_ms, std::string* why, bool zero_allowed = false) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0 || (zero_allowed && seconds == 0)) ||
      seconds > 86400) {
    *why = std::string(name) + "='" + text + "' is not a number of seconds between 0 and 86400";
    if (zero_allowed) *why += " (0: no deadline)";
    return false;
  }
  if (seconds == 0) {
    *out_ms = 0;
    return true;
  }
  *out_ms = seconds * 1000 < 1 ? 1 : static_cast<int>(seconds * 1000);
  return true;
}

// A boolean variable: 1/0, yes/no, true/false, on/off, y/n (any case), as hmr's own reader.
bool read_bool(const char* name, bool* out, std::string* why) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  if (const std::optional<bool> value = parse_boolean_setting(text)) {
    *out = *value;
    return true;
  }
  *why = std::string(name) + "='" + text + "' is not a boolean (1/0, yes/no, true/false, on/off, y/n)";
  return false;
}

// A whole number in [0, max], into *out; unset leaves *out as it is.
bool read_count(const char* name, long max, long* out, std::string* why) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || n < 0 || n > max) {
    *why = std::string(name) + "='" + text + "' is not a count (0 to " + std::to_string(max) + ")";
    return false;
  }
  *out = n;
  return true;
}

}  // namespace

std::optional<Settings> read_settings(std::string* why) {
  Settings settings;
  if (const char* provider = std::getenv("HMR_NCCL_PROVIDER")) settings.provider = provider;
  if (const char* interfaces = std::getenv("HMR_NCCL_IFNAME")) {
    settings.interfaces = InterfaceFilter::parse(interfaces, why);
    if (!settings.interfaces) return std::nullopt;
  }
  if (!read_seconds("HMR_NCCL_CONNECT_TIMEOUT", &settings.connect_timeout_ms, why,
                    /*zero_allowed=*/true) ||
      !read_seconds("HMR_NCCL_WRITE_TIMEOUT", &settings.write_timeout_ms, why)) {
    return std::nullopt;
  }
  long flush_eagain = settings.flush_eagain;
  long eager_max = settings.eager_max;
  if (!read_count("HMR_NCCL_TEST_FLUSH_EAGAIN", 1000000, &flush_eagain, why) ||
      !read_count("HMR_NCCL_EAGER_MAX", kMaxEagerSize, &eager_max, why)) {
    return std::nullopt;
  }
  settings.flush_eagain = static_cast<int>(flush_eagain);
  settings.eager_max = static_cast<uint32_t>(eager_max);
  if (!read_bool("HMR_NCCL_FORCE_FLUSH", &settings.force_flush, why) ||
      !read_bool("HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS", &settings.reorder_announcements, why) ||
      !read_bool("HMR_NCCL_TEST_EAGER_THROUGH_NIC", &settings.eager_through_nic, why) ||
      !read_bool("HMR_NCCL_TEST_FLUSH_HOST_MEMORY", &settings.flush_host_memory, why) ||
      !read_bool("HMR_NCCL_CHECK_LANDED", &settings.check_landed, why)) {
    return std::nullopt;
  }
  return settings;
}

void apply_libfabric_defaults() {
  setenv("FI_OFI_RXM_MSG_RX_SIZE", "128", 0);
}

}  // namespace hmr::nccl
