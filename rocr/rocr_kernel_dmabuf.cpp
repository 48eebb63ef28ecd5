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

KernelOption option_from_config(std::ifstream& config, const std::string& path,
                                std::string_view name) {
  const std::string set_prefix = std::string(name) + "=";
  const std::string unset_line = "# " + std::string(name) + " is not set";
  config.clear();
  config.seekg(0);
  for (std::string line; std::getline(config, line);) {
    if (line.rfind(set_prefix, 0) == 0) return {line.substr(set_prefix.size()), path + ": " + line};
    if (line == unset_line) return {"n", path + ": " + line};
  }
  return {"n", path + " does not mention " + std::string(name) + " (its dependencies are off)"};
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

KernelDmabufOptions read_kernel_dmabuf_options(const KernelConfigSources& sources) {
  KernelDmabufOptions options;
  std::ifstream config(sources.config_path);
  if (config.is_open()) {
    options.source = sources.config_path;
    options.move_notify = option_from_config(config, sources.config_path, kMoveNotify);
    options.p2pdma = option_from_config(config, sources.config_path, kP2pdma);
    return options;
  }
  const std::string no_config = sources.config_path + " cannot be read";
  std::ifstream kallsyms(sources.kallsyms_path);
  if (!kallsyms.is_open()) {
    const std::string why = no_config + ", nor " + sources.kallsyms_path;
    options.move_notify = options.p2pdma = {"unknown", why};
    return options;
  }
  options.source = sources.kallsyms_path;
  options.move_notify = {"unknown", no_config + "; " + sources.kallsyms_path +
                                        " cannot tell (dma_buf_move_notify exists in every kernel "
                                        "with dma-buf, whatever the option says)"};
  options.p2pdma = kallsyms_has_p2pdma(kallsyms)
                       ? KernelOption{"y", sources.kallsyms_path + " has pci_p2pdma_add_resource"}
                       : KernelOption{"n", sources.kallsyms_path +
                                               " has no pci_p2pdma_add_resource (p2pdma.c is not "
                                               "built)"};
  return options;
}

hmem::Capability kernel_dmabuf_capability(const KernelConfigSources& sources) {
  const KernelDmabufOptions options = read_kernel_dmabuf_options(sources);
  if (options.source == sources.config_path) {
    const bool move_notify = options.move_notify.value == "y";
    const bool p2pdma = options.p2pdma.value == "y";
    if (move_notify && p2pdma) return hmem::Capability::yes();
    std::string missing;
    if (!move_notify) missing += std::string(kMoveNotify) + "=y";
    if (!p2pdma) missing += (missing.empty() ? "" : " and ") + std::string(kP2pdma) + "=y";
    return hmem::Capability::no("the kernel configuration " + sources.config_path + " lacks " +
                                missing + kConsequence);
  }
  if (options.source.empty()) {
    return hmem::Capability::no(
        "cannot read the kernel configuration (" + sources.config_path + " or " +
        sources.kallsyms_path + ") to confirm " + std::string(kMoveNotify) + "=y and " +
        std::string(kP2pdma) + "=y" + kConsequence);
  }
  if (options.p2pdma.value != "y") {
    return hmem::Capability::no(std::string(kP2pdma) + " is off (" + sources.kallsyms_path +
                                " has no pci_p2pdma_add_resource)" + kConsequence);
  }
  return hmem::Capability::no(std::string(kP2pdma) + " is on (per " + sources.kallsyms_path +
                              ") but " + std::string(kMoveNotify) +
                              " cannot be confirmed without " + sources.config_path +
                              kConsequence);
}

}  // namespace hmr::rocr
