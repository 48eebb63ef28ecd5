// The two kernel build options that decide whether device memory can safely travel to a NIC
// as a dma-buf: CONFIG_DMABUF_MOVE_NOTIFY (importers that follow moves, which amdgpu VRAM
// exports need) and CONFIG_PCI_P2PDMA (PCI peer-to-peer DMA between GPU and NIC).
#pragma once

#include "json_value.h"
#include "rocr/rocr_kernel_dmabuf.h"

namespace hmr::info {

// {"source", "CONFIG_DMABUF_MOVE_NOTIFY": {"value", "evidence"}, "CONFIG_PCI_P2PDMA": {...}}:
// value is "y", "m", "n" or "unknown", as rocr::read_kernel_dmabuf_options reads them (the
// reading the ROCr iface bases its dma-buf verdict on).
JsonValue kernel_config_json(const rocr::KernelConfigSources& sources);

}  // namespace hmr::info
