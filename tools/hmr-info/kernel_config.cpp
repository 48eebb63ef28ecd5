#include "kernel_config.h"

#include <fstream>
#include <string>
#include <string_view>

namespace hmr::info {
namespace {

constexpr const char* kMoveNotify = "CONFIG_DMABUF_MOVE_NOTIFY";
constexpr const char* kP2pdma = "CONFIG_PCI_P2PDMA";

JsonValue option(std::string value, std::string evidence) {
  JsonValue entry = JsonValue::object();
  entry.set("value", std::move(value));
  entry.set("evidence", std::move(evidence));
  return entry;
}

// "y" / "m" from "NAME=y|m"; "n" from "# NAME is not set" or when the option is absent (its
// dependencies are off, so it cannot be on).
JsonValue option_from_config(std::ifstream& config, const std::string& path,
                             std::string_view name) {
  const std::string set_prefix = std::string(name) + "=";
  const std::string unset_line = "# " + std::string(name) + " is not set";
  config.clear();
  config.seekg(0);
  for (std::string line; std::getline(config, line);) {
    if (line.rfind(set_prefix, 0) == 0) {
      return option(line.substr(set_prefix.size()), path + ": " + line);
    }
    if (line == unset_line) return option("n", path + ": " + line);
  }
  return option("n", path + " does not mention " + std::string(name) +
                         " (its dependencies are off)");
}

// Whether /proc/kallsyms names a function that exists only with CONFIG_PCI_P2PDMA.  The name
// field is compared exactly: dma_pci_p2pdma_supported exists in every kernel.
bool kallsyms_has_p2pdma(std::ifstream& kallsyms) {
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

JsonValue kernel_config_json(const rocr::KernelConfigSources& sources) {
  JsonValue config_json = JsonValue::object();
  std::ifstream config(sources.config_path);
  if (config.is_open()) {
    config_json.set("source", sources.config_path);
    config_json.set(kMoveNotify, option_from_config(config, sources.config_path, kMoveNotify));
    config_json.set(kP2pdma, option_from_config(config, sources.config_path, kP2pdma));
  } else {
    std::ifstream kallsyms(sources.kallsyms_path);
    const std::string no_config = sources.config_path + " cannot be read";
    if (!kallsyms.is_open()) {
      config_json.set("source", JsonValue());
      const std::string why = no_config + ", nor " + sources.kallsyms_path;
      config_json.set(kMoveNotify, option("unknown", why));
      config_json.set(kP2pdma, option("unknown", why));
    } else {
      config_json.set("source", sources.kallsyms_path);
      config_json.set(kMoveNotify,
                      option("unknown", no_config + "; " + sources.kallsyms_path +
                                            " cannot tell (dma_buf_move_notify exists in every "
                                            "kernel with dma-buf, whatever the option says)"));
      config_json.set(kP2pdma,
                      kallsyms_has_p2pdma(kallsyms)
                          ? option("y", sources.kallsyms_path + " has pci_p2pdma_add_resource")
                          : option("n", sources.kallsyms_path +
                                            " has no pci_p2pdma_add_resource (p2pdma.c is "
                                            "not built)"));
    }
  }
  // The ROCr iface turns these into its verdict on ROCm dma-buf (its devices' dmabuf answer);
  // asking it here would read /proc/kallsyms a second time (~0.2 s).
  return config_json;
}

}  // namespace hmr::info
