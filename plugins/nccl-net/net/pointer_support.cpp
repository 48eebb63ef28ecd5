#include "pointer_support.h"

#include <cstdlib>

#include "../abi/nccl_net_common.h"

namespace hmr::nccl {

int pointer_support(const hmr_md_attr& md, bool nccl_dmabuf_enabled) {
  int support = NCCL_PTR_HOST;
  constexpr uint64_t kCuda = HMR_HMEM_IFACE_BIT(HMR_HMEM_CUDA);
  if ((md.reg_mem_types & kCuda) == 0) return support;
  const bool peer_direct = (md.peer_direct_mem_types & kCuda) != 0;
  const bool own_dmabuf = (md.dmabuf_mem_types & kCuda) != 0 && nccl_dmabuf_enabled;
  if (peer_direct || own_dmabuf) support |= NCCL_PTR_CUDA;
  if ((md.flags & HMR_MD_FLAG_DMABUF) != 0) support |= NCCL_PTR_DMABUF;
  return support;
}

bool nccl_dmabuf_enabled() {
  const char* text = std::getenv("NCCL_DMABUF_ENABLE");
  if (text == nullptr || *text == '\0') return true;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 0);
  if (end == text || *end != '\0') return true;  // NCCL warns and keeps its default
  return value != 0;
}

}  // namespace hmr::nccl
