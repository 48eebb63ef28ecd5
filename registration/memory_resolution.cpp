#include "registration/memory_resolution.h"

namespace hmr::core {
namespace {

using hmem::MemoryKind;
using ull = unsigned long long;

// HMR_HMEM_DEVICE_ONLY / HMR_HMEM_HOST_ALLOC are statements about the memory too.
Status check_declared_kind(const MrRequest& request, const hmem::PointerInfo& memory) {
  const char* flag = nullptr;
  MemoryKind expected = MemoryKind::host;
  if (request.flags & HMR_HMEM_DEVICE_ONLY) {
    flag = "HMR_HMEM_DEVICE_ONLY";
    expected = MemoryKind::device_only;
  } else if (request.flags & HMR_HMEM_HOST_ALLOC) {
    flag = "HMR_HMEM_HOST_ALLOC";
    expected = MemoryKind::host_alloc;
  }
  if (flag == nullptr || memory.kind == expected) return ok_status();
  return make_error(HMR_EINVAL, "registration flag %s contradicts the %s runtime, which reports "
                    "%s memory at 0x%llx", flag, hmem::iface_name(memory.iface),
                    hmem::memory_kind_name(memory.kind), static_cast<ull>(memory.base));
}

}  // namespace

Status resolve_memory(MrRequest& request, bool declared, hmem::Registry& registry) {
  if (request.dmabuf) {
    // The caller's dma-buf reaches the NIC without its runtime (its fd may come from another
    // process), but FI_HMEM=^<name> is the caller's word that no such memory is here.
    if (request.iface != HMR_HMEM_SYSTEM && request.iface >= 0 &&
        request.iface < HMR_HMEM_IFACE_COUNT && !registry.selection().is_enabled(request.iface)) {
      return make_error(HMR_ENOSYS, "a dma-buf declared as %s memory: the %s memory interface is "
                        "disabled by FI_HMEM='%s'", hmem::iface_name(request.iface),
                        hmem::iface_name(request.iface), registry.selection().text.c_str());
    }
    request.memory = hmem::PointerInfo{};
    request.memory.iface = request.iface;
    request.memory.device = hmem::DeviceId{request.device};
    request.memory.base = reinterpret_cast<uintptr_t>(request.dmabuf->base_addr);
    request.memory.alloc_len = request.dmabuf->len;
    request.memory.kind =
        request.iface == HMR_HMEM_SYSTEM ? MemoryKind::host : MemoryKind::device_only;
    return ok_status();
  }
  if (request.implicit_odp()) {
    // The whole address space is nobody's allocation: it is host memory the NIC maps on demand.
    request.memory = hmem::PointerInfo{};
    request.memory.kind = MemoryKind::host;
    return ok_status();
  }
  if (request.length() == 0 && request.iface == HMR_HMEM_SYSTEM) {
    // Zero bytes are nobody's allocation (and may be at any address, NULL included): host
    // memory, registered as libfabric registers it, with nothing to classify or verify (an
    // HMR_MR_HMEM domain's declared SYSTEM was refused as an empty range).
    request.memory = hmem::PointerInfo{};
    request.memory.kind = MemoryKind::host;
    return ok_status();
  }
  const bool verify = declared || request.iface != HMR_HMEM_SYSTEM;
  bool classified = false;
  for (size_t i = 0; i < request.segments.size(); ++i) {
    const iovec& segment = request.segments[i];
    // A zero-byte segment beside others names no memory (and may be at any address): nothing
    // to ask about.  It was refused as an empty range, the whole registration with it.  (All
    // of them empty reach here only declared as a device's: refused as an empty range.)
    if (segment.iov_len == 0 && request.length() != 0) continue;
    Result<hmem::PointerInfo> memory =
        verify ? registry.verify(request.iface, request.device, segment.iov_base, segment.iov_len)
               : registry.classify(segment.iov_base, segment.iov_len);
    if (!memory.ok()) return memory.status();
    if (memory->iface != HMR_HMEM_SYSTEM && request.segments.size() != 1) {
      return make_error(HMR_EOPNOTSUPP,
                        "segment %zu [%p, +%zu) is %s memory: device memory is registered one "
                        "segment per MR",
                        i, segment.iov_base, segment.iov_len, hmem::iface_name(memory->iface));
    }
    if (!classified) request.memory = std::move(*memory);
    classified = true;
  }
  HMR_RETURN_IF_ERROR(check_declared_kind(request, request.memory));
  if (request.on_demand_paging() && request.memory.iface != HMR_HMEM_SYSTEM) {
    return make_error(HMR_EOPNOTSUPP, "[%p, +%zu) is %s memory; on-demand paging (HMR_MR_ODP) "
                      "follows the CPU's page tables and is for host memory",
                      request.segments[0].iov_base, request.segments[0].iov_len,
                      hmem::iface_name(request.memory.iface));
  }
  request.iface = static_cast<hmr_hmem_iface>(request.memory.iface);
  request.device = request.memory.device.value;
  return ok_status();
}

hmr_mem_kind public_kind(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::host: return HMR_MEM_HOST;
    case MemoryKind::host_alloc: return HMR_MEM_HOST_ALLOC;
    case MemoryKind::device_only: return HMR_MEM_DEVICE_ONLY;
    case MemoryKind::managed: return HMR_MEM_MANAGED;
  }
  return HMR_MEM_HOST;
}

Result<MemoryKind> internal_kind(int kind) {
  switch (kind) {
    case HMR_MEM_HOST: return MemoryKind::host;
    case HMR_MEM_HOST_ALLOC: return MemoryKind::host_alloc;
    case HMR_MEM_DEVICE_ONLY: return MemoryKind::device_only;
    case HMR_MEM_MANAGED: return MemoryKind::managed;
  }
  return make_error(HMR_EINVAL, "memory kind %d is not an hmr_mem_kind (0..3)", kind);
}

}  // namespace hmr::core
