#include "nic/mr_mode_names.h"

#include <strings.h>

#include <array>

namespace hmr::nic {
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

}  // namespace hmr::nic
