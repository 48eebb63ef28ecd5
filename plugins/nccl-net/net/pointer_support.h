// What the plugin tells NCCL it may hand regMr for one NIC (ncclNetProperties_t.ptrSupport),
// from what hmr says reaches that NIC (hmr_md_query).
//
// NCCL 2.28 turns GPU Direct RDMA on for a NIC when ptrSupport has NCCL_PTR_CUDA, or has
// NCCL_PTR_DMABUF and NCCL itself can export dma-bufs of the GPU (NCCL_DMABUF_ENABLE and
// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; src/graph/topo.cc, the "gdr" attribute of each NIC).
// It then hands regMrDmaBuf its own dma-buf where it exported one, and otherwise regMr a bare
// device pointer as NCCL_PTR_CUDA (src/transport/net.cc, the proxy connects and proxyRegBuffer),
// which hmr must register itself.  With GPU Direct RDMA off, NCCL stages through host memory.
#pragma once

#include <hmr/hmr.h>

namespace hmr::nccl {

// NCCL_PTR_HOST always.  NCCL_PTR_CUDA where hmr registers a bare CUDA pointer on this NIC on
// every device: peer-direct, or a dma-buf of hmr's own export, which `nccl_dmabuf_enabled`
// false (NCCL_DMABUF_ENABLE=0) rules out as it rules out NCCL's.  It was said wherever the NIC
// imported dma-bufs, so a GPU without dma-buf export (and no nvidia-peermem) failed NCCL's
// first registration, and the communicator, where NCCL would have staged through host memory.
// NCCL_PTR_DMABUF where the NIC imports dma-bufs and CUDA is loaded: NCCL checks its own
// export before it uses it.
int pointer_support(const hmr_md_attr& md, bool nccl_dmabuf_enabled);

// NCCL_DMABUF_ENABLE as NCCL reads it (its ncclParamDmaBufEnable): a number, 0 turns dma-buf
// off; unset or not a number keeps NCCL's default, on.  (Not from an nccl.conf file, which
// NCCL also reads.)
bool nccl_dmabuf_enabled();

}  // namespace hmr::nccl
