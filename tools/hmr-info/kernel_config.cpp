#include "kernel_config.h"

namespace hmr::info {
namespace {

JsonValue option(const rocr::KernelOption& value) {
  JsonValue entry = JsonValue::object();
  entry.set("value", value.value);
  entry.set("evidence", value.evidence);
  return entry;
}

}  // namespace

JsonValue kernel_config_json(const rocr::KernelConfigSources& sources) {
  // The same reading the ROCr iface makes its dma-buf verdict from (one reader, one meaning).
  const rocr::KernelDmabufOptions options = rocr::read_kernel_dmabuf_options(sources);
  JsonValue config_json = JsonValue::object();
  config_json.set("source", options.source.empty() ? JsonValue() : JsonValue(options.source));
  config_json.set("CONFIG_DMABUF_MOVE_NOTIFY", option(options.move_notify));
  config_json.set("CONFIG_PCI_P2PDMA", option(options.p2pdma));
  return config_json;
}

}  // namespace hmr::info
