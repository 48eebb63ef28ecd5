#include "synapseai/hlthunk_device.h"

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdlib>
#include <optional>

#include "synapseai/synapseai_error.h"

namespace hmr::synapseai {
namespace {

// SynapseAI's own variable, read where it is used: a decimal module id, or absent.
Result<std::optional<uint32_t>> named_module() {
  const char* value = std::getenv("HLS_MODULE_ID");
  if (value == nullptr || value[0] == '\0') return std::optional<uint32_t>();
  char* end = nullptr;
  errno = 0;
  const unsigned long id = std::strtoul(value, &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '-' || id > UINT32_MAX) {
    return make_error(HMR_EINVAL, "HLS_MODULE_ID='%s' is not a Gaudi module id", value);
  }
  return std::optional<uint32_t>(static_cast<uint32_t>(id));
}

}  // namespace

Result<int> open_own_device(const HlthunkSymbols& symbols, const std::string& library,
                            int device_count) {
  Result<std::optional<uint32_t>> module = named_module();
  if (!module.ok()) return module.status();

  if (module->has_value()) {
    const uint32_t id = **module;
    if (symbols.hlthunk_open_by_module_id == nullptr) {
      return make_error(HMR_EOPNOTSUPP,
                        "HLS_MODULE_ID=%" PRIu32 " names a Gaudi device, but '%s' lacks "
                        "hlthunk_open_by_module_id to open it by",
                        id, library.c_str());
    }
    errno = 0;
    const int fd = symbols.hlthunk_open_by_module_id(id);
    if (fd >= 0) return fd;
    if (fd == -1 && errno == 0) {
      return make_error(HMR_ENODEV, "no Gaudi device has module id %" PRIu32 " (HLS_MODULE_ID)",
                        id);
    }
    const int error = hlthunk_errno(fd, errno);
    return make_error(hmr_code_for_errno(error),
                      "hlthunk_open_by_module_id(%" PRIu32 ") in '%s' failed: %s%s", id,
                      library.c_str(), describe_errno(error).c_str(),
                      error == EBUSY ? " (Gaudi devices are exclusive: one acquired through "
                                       "SynapseAI, by this process or another, cannot also be "
                                       "opened for hmr's own allocations)"
                                     : "");
  }

  if (device_count != 1) {
    return make_error(HMR_EINVAL,
                      "this host has %d Gaudi devices and none is named for hmr's own "
                      "allocations: set HLS_MODULE_ID to this rank's module id (hmr will not open "
                      "the first free device: it may be another rank's)",
                      device_count);
  }
  errno = 0;
  const int fd = symbols.hlthunk_open(HLTHUNK_DEVICE_DONT_CARE, nullptr);
  if (fd >= 0) return fd;
  const int error = hlthunk_errno(fd, errno);
  return make_error(hmr_code_for_errno(error),
                    "hlthunk_open(DONT_CARE) in '%s' failed: %s (Gaudi devices are exclusive: one "
                    "acquired through SynapseAI cannot also be opened for hmr's own allocations)",
                    library.c_str(), describe_errno(error).c_str());
}

}  // namespace hmr::synapseai
