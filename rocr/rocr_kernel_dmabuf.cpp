#include "rocr/rocr_kernel_dmabuf.h"

#include <sys/utsname.h>

#include <fstream>
#include <string_view>

namespace hmr::rocr {
namespace {

constexpr std::string_view kMoveNotify = "CONFIG_DMABUF_MOVE_NOTIFY";
constexpr std::string_view kP2pdma = "CONFIG_PCI_P2PDMA";
constexpr const char* kConsequence =
    "; without both options a NIC may accept ROCm dma-buf memory and then transfer the wrong "
    "bytes, so hmr does not export it";

// "NAME=y" exactly, so "# NAME is not set" and "NAME=m" are both "off".
bool option_is_y(std::string_view line, std::string_view name) {
  return line.size() == name.size() + 2 && line.substr(0, name.size()) == name &&
         line.substr(name.size()) == "=y";
}

hmem::Capability from_config(std::ifstream& config, const std::string& path) {
  bool move_notify = false;
  bool p2pdma = false;
  for (std::string line; std::getline(config, line);) {
    move_notify = move_notify || option_is_y(line, kMoveNotify);
    p2pdma = p2pdma || option_is_y(line, kP2pdma);
  }
  if (move_notify && p2pdma) return hmem::Capability{true, {}};
  std::string missing;
  if (!move_notify) missing += std::string(kMoveNotify) + "=y";
  if (!p2pdma) missing += (missing.empty() ? "" : " and ") + std::string(kP2pdma) + "=y";
  return hmem::Capability{false, "the kernel configuration " + path + " lacks " + missing +
                                     kConsequence};
}

// Any function that exists only when CONFIG_PCI_P2PDMA is on (drivers/pci/p2pdma.c).
bool kallsyms_has_p2pdma(std::ifstream& kallsyms) {
  // Lines are "address type name [module]"; compare the name field exactly, because
  // dma_pci_p2pdma_supported exists in every kernel.
  for (std::string line; std::getline(kallsyms, line);) {
    const size_t type_end = line.find(' ', line.find(' ') + 1);
    if (type_end == std::string::npos) continue;
    std::string_view name = std::string_view(line).substr(type_end + 1);
    name = name.substr(0, name.find_first_of(" \t"));
    if (name == "pci_p2pdma_add_resource" || name == "pci_p2pdma_distance_many") return true;
  }
  return false;
}

}  // namespace

KernelConfigSources default_kernel_config_sources() {
  struct utsname names {};
  std::string release = uname(&names) == 0 ? names.release : "unknown";
  return KernelConfigSources{"/boot/config-" + release, "/proc/kallsyms"};
}

hmem::Capability kernel_dmabuf_capability(const KernelConfigSources& sources) {
  std::ifstream config(sources.config_path);
  if (config.is_open()) return from_config(config, sources.config_path);

  std::ifstream kallsyms(sources.kallsyms_path);
  if (!kallsyms.is_open()) {
    return hmem::Capability{
        false, "cannot read the kernel configuration (" + sources.config_path + " or " +
                   sources.kallsyms_path + ") to confirm " + std::string(kMoveNotify) + "=y and " +
                   std::string(kP2pdma) + "=y" + kConsequence};
  }
  if (!kallsyms_has_p2pdma(kallsyms)) {
    return hmem::Capability{false, std::string(kP2pdma) + " is off (" + sources.kallsyms_path +
                                       " has no pci_p2pdma_add_resource)" + kConsequence};
  }
  return hmem::Capability{
      false, std::string(kP2pdma) + " is on (per " + sources.kallsyms_path + ") but " +
                 std::string(kMoveNotify) + " cannot be confirmed without " + sources.config_path +
                 kConsequence};
}

}  // namespace hmr::rocr
