// Whether this kernel can carry ROCm dma-buf memory to a NIC safely.
//
// amdgpu exports VRAM dma-bufs that an RDMA NIC can import only as a dynamic importer (move
// notify) through PCI peer-to-peer DMA.  A kernel built without CONFIG_DMABUF_MOVE_NOTIFY=y and
// CONFIG_PCI_P2PDMA=y may still let ibv_reg_dmabuf_mr succeed, and then the transfers silently
// move the wrong bytes (UCX, libfabric and Mooncake refuse ROCm dma-buf for that reason).  So hmr
// trusts ROCm dma-buf only when both options are known to be on.
#pragma once

#include <string>

#include "hmem/iface.h"

namespace hmr::rocr {

// Where the kernel's build options can be read.
struct KernelConfigSources {
  std::string config_path;    // /boot/config-$(uname -r)
  std::string kallsyms_path;  // /proc/kallsyms
};

KernelConfigSources default_kernel_config_sources();

// One build option as the sources show it: value "y", "m", "n" or "unknown", and the line or
// fact that says so.
struct KernelOption {
  std::string value;
  std::string evidence;
};
struct KernelDmabufOptions {
  std::string source;  // the file the values come from; "" when neither could be read
  KernelOption move_notify;  // CONFIG_DMABUF_MOVE_NOTIFY
  KernelOption p2pdma;       // CONFIG_PCI_P2PDMA
};

// Reads both options once (hmr-info reports them; the verdict below is made from them).  The
// config file decides when it can be read: "NAME=y|m" gives y or m, "# NAME is not set" or no
// mention gives n.  Otherwise /proc/kallsyms can prove CONFIG_PCI_P2PDMA on or off but says
// nothing about CONFIG_DMABUF_MOVE_NOTIFY (unknown).
KernelDmabufOptions read_kernel_dmabuf_options(const KernelConfigSources& sources);

// The verdict, with the evidence for a "no" in its reason.
//
// The config file decides when it can be read.  Without it only /proc/kallsyms is left, and that
// can prove CONFIG_PCI_P2PDMA (its functions, e.g. pci_p2pdma_add_resource, exist only then) but
// never CONFIG_DMABUF_MOVE_NOTIFY: dma_buf_move_notify is built into every kernel with dma-buf
// whatever the option says, so its presence is no evidence.  Without the config file the answer
// is therefore always "no", with the most precise reason the symbols allow.
hmem::Capability kernel_dmabuf_capability(const KernelConfigSources& sources);

}  // namespace hmr::rocr
