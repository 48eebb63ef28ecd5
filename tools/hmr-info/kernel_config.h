// The two kernel build options that decide whether device memory can safely travel to a NIC
// as a dma-buf: CONFIG_DMABUF_MOVE_NOTIFY (importers that follow moves, which amdgpu VRAM
// exports need) and CONFIG_PCI_P2PDMA (PCI peer-to-peer DMA between GPU and NIC).
#pragma once

#include "json_value.h"
#include "rocr/rocr_kernel_dmabuf.h"

namespace hmr::info {

// {"source", "CONFIG_DMABUF_MOVE_NOTIFY": {"value", "evidence"}, "CONFIG_PCI_P2PDMA": {...}}:
// value is "y", "m", "n" or "unknown".  The sources are the ones the ROCr iface reads.
// The config file (sources.config_path) decides when readable; otherwise /proc/kallsyms can
// prove P2PDMA on or off but says nothing about MOVE_NOTIFY (see rocr_kernel_dmabuf.h).
JsonValue kernel_config_json(const rocr::KernelConfigSources& sources);

}  // namespace hmr::info
