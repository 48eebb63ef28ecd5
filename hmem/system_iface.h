// The system memory interface: ordinary host memory, always present.
//
// Classification must stay cheap (it runs before every cache lookup when no device runtime is
// loaded): query() makes no system call and touches nothing.  Where the memory sits (its NUMA
// node) costs a system call and is asked for only on demand, through numa_node().
#pragma once

#include <map>
#include <mutex>

#include "hmem/iface.h"

namespace hmr::hmem {

class SystemIface final : public Iface {
 public:
  int iface() const override { return HMR_HMEM_SYSTEM; }
  const char* name() const override { return "system"; }

  Status init() override { return ok_status(); }
  Result<int> device_count() override { return 1; }
  // Host memory as hmr sees it: hmr does not know malloc's allocations, so the "allocation" is
  // the whole pages that cover the range; alloc_id is 0 (host monitors track host memory).
  Result<PointerInfo> query(const void* ptr, size_t len) override;
  Result<DeviceCapabilities> capabilities(DeviceId device) override;

  // Copies between host buffers (the "device" of this iface is the host).
  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;

  // Page-aligned anonymous mappings (kind host only), so that mem_free's munmap is seen by
  // the host cache monitors like any other unmapping.
  Result<void*> mem_alloc(DeviceId device, size_t len, MemoryKind kind) override;
  Status mem_free(void* ptr) override;

  std::string runtime_version() const override { return "host"; }

 private:
  std::mutex mutex_;
  std::map<uintptr_t, size_t> mappings_;  // what mem_alloc handed out: address -> length
};

// The host-memory answer for [ptr, ptr + len), which must not wrap.  Inline: it is the whole
// of classification when no device runtime is loaded.
inline PointerInfo host_pointer_info(const void* ptr, size_t len) {
  constexpr uintptr_t kPageMask = 4095;
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  PointerInfo info;
  info.base = start & ~kPageMask;
  info.alloc_len = static_cast<size_t>(((start + len + kPageMask) & ~kPageMask) - info.base);
  return info;
}

// The NUMA node holding the page at `ptr` (get_mempolicy MPOL_F_NODE | MPOL_F_ADDR; the
// kernel faults the page in to answer, so only ever ask about host memory), or -1 when the
// kernel cannot say (no NUMA support, unmapped page).
int numa_node(const void* ptr);

// sys_dev text for a NUMA node: "numa:<node>", or "" for -1.
std::string numa_sys_dev(int node);

}  // namespace hmr::hmem
