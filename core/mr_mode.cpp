#include "core/mr_mode.h"

#include <strings.h>

#include <array>

namespace hmr::core {
namespace {

struct ModeName {
  uint64_t bit;
  const char* name;
};
constexpr std::array<ModeName, 12> kModeNames = {{
    {HMR_MR_BASIC, "BASIC"},         {HMR_MR_SCALABLE, "SCALABLE"},
    {HMR_MR_LOCAL, "LOCAL"},         {HMR_MR_RAW, "RAW"},
    {HMR_MR_VIRT_ADDR, "VIRT_ADDR"}, {HMR_MR_ALLOCATED, "ALLOCATED"},
    {HMR_MR_PROV_KEY, "PROV_KEY"},   {HMR_MR_MMU_NOTIFY, "MMU_NOTIFY"},
    {HMR_MR_RMA_EVENT, "RMA_EVENT"}, {HMR_MR_ENDPOINT, "ENDPOINT"},
    {HMR_MR_HMEM, "HMEM"},           {HMR_MR_COLLECTIVE, "COLLECTIVE"},
}};

}  // namespace

Result<uint64_t> expand_legacy_mode(uint64_t mode) {
  if ((mode & ~kKnownModeBits) != 0) {
    return make_error(HMR_EINVAL, "mr_mode 0x%llx has unknown bits 0x%llx",
                      static_cast<unsigned long long>(mode),
                      static_cast<unsigned long long>(mode & ~kKnownModeBits));
  }
  if ((mode & HMR_MR_BASIC) && (mode & HMR_MR_SCALABLE)) {
    return make_error(HMR_EINVAL, "mr_mode cannot be both BASIC and SCALABLE");
  }
  if (mode & HMR_MR_BASIC) mode |= HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;
  return mode & ~(HMR_MR_BASIC | HMR_MR_SCALABLE);
}

Result<uint64_t> negotiate_mr_mode(uint64_t app_supported, uint64_t nic_required,
                                   uint64_t nic_optional) {
  Result<uint64_t> app = expand_legacy_mode(app_supported);
  if (!app.ok()) return app.status();
  const uint64_t missing = nic_required & ~*app & ~kEmulatedModeBits;
  if (missing != 0) {
    return make_error(HMR_ENODATA,
                      "the NIC requires mr_mode %s, which the application does not support "
                      "(it supports %s) and hmr cannot emulate",
                      mode_names(missing).c_str(), mode_names(*app).c_str());
  }
  return (nic_required | (kSharingModeBits & nic_optional)) & *app & ~kEmulatedModeBits;
}

std::string mode_names(uint64_t mode) {
  std::string names;
  for (const ModeName& entry : kModeNames) {
    if ((mode & entry.bit) == 0) continue;
    if (!names.empty()) names += '|';
    names += entry.name;
  }
  return names.empty() ? "none" : names;
}

Result<uint64_t> parse_mode_names(std::string_view names) {
  uint64_t mode = 0;
  while (!names.empty()) {
    const size_t end = names.find_first_of("|,");
    const std::string word(names.substr(0, end));
    names = end == std::string_view::npos ? std::string_view() : names.substr(end + 1);
    if (word.empty() || strcasecmp(word.c_str(), "none") == 0) continue;
    bool found = false;
    for (const ModeName& entry : kModeNames) {
      if (strcasecmp(word.c_str(), entry.name) == 0) {
        mode |= entry.bit;
        found = true;
      }
    }
    if (!found) return make_error(HMR_EINVAL, "unknown mr_mode name '%s'", word.c_str());
  }
  return mode;
}

}  // namespace hmr::core
