// C ABI: device memory — UCX-style queries, allocation, explicit invalidation, and the MR
// calls that only device memory needs (which path it took, host-shadow sync).
#include <cstdio>
#include <cstring>

#include "api/api_guard.h"
#include "api/bad_handle.h"
#include "api/extensible_struct.h"
#include "api/mr_handle.h"
#include "core/domain.h"
#include "core/memory_region.h"
#include "hmem/hmem_registry.h"
#include "hmem/system_iface.h"
#include "monitor/device_monitor.h"
#include "registration/memory_resolution.h"
#include "util/enum_bits.h"

using hmr::core::Domain;
using hmr::core::from_handle;
using hmr::core::MemoryRegion;

namespace {

constexpr uint64_t kKnownMemAttrFields = HMR_MEM_ATTR_SYS_DEV | HMR_MEM_ATTR_DMABUF;

hmr::Status check_range(const void* addr, size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  if (addr == nullptr || len == 0 || start + len < start) {
    return hmr::make_error(HMR_EINVAL, "[%p, +%zu) is not a range: NULL, empty or wrapping", addr,
                           len);
  }
  return hmr::ok_status();
}

// Fills `out` from what the registry says [addr, +len) is; the dma-buf, if asked for, last.
hmr::Status query_memory(const void* addr, size_t len, hmr_mem_attr& out) {
  HMR_RETURN_IF_ERROR(check_range(addr, len));
  if (out.field_mask & ~kKnownMemAttrFields) {
    return hmr::make_error(HMR_EBADFLAGS, "unknown hmr_mem_attr.field_mask bits %#llx",
                           static_cast<unsigned long long>(out.field_mask & ~kKnownMemAttrFields));
  }
  hmr::hmem::Registry& registry = hmr::hmem::Registry::global();
  hmr::Result<hmr::hmem::PointerInfo> memory = registry.classify(addr, len);
  if (!memory.ok()) return memory.status();
  out.iface = static_cast<hmr_hmem_iface>(memory->iface);
  out.kind = hmr::core::public_kind(memory->kind);
  out.device = memory->device.value;
  out.base = reinterpret_cast<void*>(static_cast<uintptr_t>(memory->base));
  out.alloc_len = memory->alloc_len;
  out.alloc_id = memory->alloc_id;
  std::memset(out.sys_dev, 0, sizeof out.sys_dev);
  out.numa_node = -1;
  out.dmabuf_fd = -1;
  out.dmabuf_offset = 0;
  if (out.field_mask & HMR_MEM_ATTR_SYS_DEV) {
    std::string where = memory->sys_dev;
    if (memory->iface == HMR_HMEM_SYSTEM) {
      out.numa_node = hmr::hmem::numa_node(addr);  // host memory only: the kernel touches it
      where = hmr::hmem::numa_sys_dev(out.numa_node);
    }
    std::snprintf(out.sys_dev, sizeof out.sys_dev, "%s", where.c_str());
  }
  if ((out.field_mask & HMR_MEM_ATTR_DMABUF) && memory->iface != HMR_HMEM_SYSTEM) {
    hmr::Result<hmr::hmem::Iface*> iface = registry.loaded_iface(memory->iface);
    if (!iface.ok()) return iface.status();
    hmr::Result<hmr::hmem::DmabufExport> exported =
        (*iface)->export_dmabuf(hmr::hmem::MemoryRange{addr, len});
    if (!exported.ok()) return exported.status();
    out.dmabuf_offset = exported->offset;
    out.dmabuf_fd = exported->fd.release();  // the caller's from here on
  }
  return hmr::ok_status();
}

}  // namespace

extern "C" {

HMR_API int hmr_mem_query(const void* addr, size_t len, hmr_mem_attr* attr) {
  return hmr::guarded([&] {
    auto copy = hmr::core::read_extensible(attr, sizeof(hmr_mem_attr), "hmr_mem_attr");
    if (!copy.ok()) return hmr::report(copy.status());
    hmr::Status status = query_memory(addr, len, *copy);
    if (!status.ok()) return hmr::report(status);
    hmr::core::write_extensible(attr, *copy);
    return 0;
  });
}

HMR_API int hmr_detect_memory_type(const void* addr, size_t len, hmr_hmem_iface* iface,
                                   hmr_mem_kind* kind) {
  return hmr::guarded([&] {
    if (iface == nullptr || kind == nullptr) {
      return hmr::report_error(HMR_EINVAL, "iface and kind outputs must not be NULL");
    }
    hmr::Status range = check_range(addr, len);
    if (!range.ok()) return hmr::report(range);
    hmr::Result<hmr::hmem::PointerInfo> memory = hmr::hmem::Registry::global().classify(addr, len);
    if (!memory.ok()) return hmr::report(memory.status());
    *iface = static_cast<hmr_hmem_iface>(memory->iface);
    *kind = hmr::core::public_kind(memory->kind);
    return 0;
  });
}

HMR_API int hmr_mem_alloc(hmr_hmem_iface iface, uint64_t device, size_t len, hmr_mem_kind kind,
                          void** ptr) {
  return hmr::guarded([&] {
    if (ptr == nullptr) return hmr::report_error(HMR_EINVAL, "ptr output must not be NULL");
    if (len == 0) return hmr::report_error(HMR_EINVAL, "cannot allocate 0 bytes");
    const int iface_value = hmr::core::enum_bits(iface);
    hmr::Status syntax = hmr::hmem::check_device_syntax(iface_value, device);
    if (!syntax.ok()) return hmr::report(syntax);
    hmr::Result<hmr::hmem::MemoryKind> wanted = hmr::core::internal_kind(hmr::core::enum_bits(kind));
    if (!wanted.ok()) return hmr::report(wanted.status());
    hmr::Result<hmr::hmem::Iface*> runtime =
        hmr::hmem::Registry::global().loaded_iface(iface_value);
    if (!runtime.ok()) return hmr::report(runtime.status());
    hmr::Result<void*> memory =
        (*runtime)->mem_alloc(hmr::hmem::DeviceId{device}, len, *wanted);
    if (!memory.ok()) return hmr::report(memory.status());
    *ptr = *memory;
    return 0;
  });
}

HMR_API int hmr_mem_free(hmr_hmem_iface iface, void* ptr) {
  return hmr::guarded([&] {
    if (ptr == nullptr) return hmr::report_error(HMR_EINVAL, "ptr must not be NULL");
    const int iface_value = hmr::core::enum_bits(iface);
    hmr::Result<hmr::hmem::Iface*> runtime =
        hmr::hmem::Registry::global().loaded_iface(iface_value);
    if (!runtime.ok()) return hmr::report(runtime.status());
    if (iface_value != HMR_HMEM_SYSTEM) {
      // Host memory leaves through munmap, which the host monitors see; device memory leaves
      // silently, so its registrations are dropped here, before the runtime frees it.
      hmr::Result<hmr::hmem::PointerInfo> memory = (*runtime)->query(ptr, 1);
      if (!memory.ok()) return hmr::report(memory.status());
      hmr::core::DeviceMonitor::instance().invalidate_everywhere(
          memory->base, memory->base + memory->alloc_len);
    }
    return hmr::report((*runtime)->mem_free(ptr));
  });
}

HMR_API int hmr_mem_invalidate(hmr_domain* handle, const void* addr, size_t len) {
  return hmr::guarded([&] {
    Domain* domain = nullptr;
    if (handle != nullptr) {
      domain = from_handle<Domain>(handle);
      if (domain == nullptr) return hmr::report_bad_handle(handle, "not a domain handle");
    }
    hmr::Status range = check_range(addr, len);
    if (!range.ok()) return hmr::report(range);
    const auto start = reinterpret_cast<uintptr_t>(addr);
    if (domain != nullptr) {
      domain->invalidate(start, start + len);
    } else {
      hmr::core::DeviceMonitor::instance().invalidate_everywhere(start, start + len);
    }
    return 0;
  });
}

HMR_API int hmr_mr_query(hmr_mr* handle, hmr_mr_info* info) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      auto copy = hmr::core::read_extensible(info, sizeof(hmr_mr_info), "hmr_mr_info");
      if (!copy.ok()) return hmr::report(copy.status());
      hmr::Status status = region.query(*copy);
      if (!status.ok()) return hmr::report(status);
      hmr::core::write_extensible(info, *copy);
      return 0;
    });
  });
}

HMR_API int hmr_mr_sync(hmr_mr* handle, uint64_t offset, size_t len, uint64_t flags) {
  return hmr::guarded([&] {
    return hmr::with_memory_region(handle, [&](MemoryRegion& region) {
      return hmr::report(region.sync(offset, len, flags));
    });
  });
}

}  // extern "C"
