#include "hmem/system_iface.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hmem/page_range.h"

namespace hmr::hmem {
namespace {

// From <numaif.h>, declared here so hmr needs no libnuma.
constexpr unsigned long kMpolFNode = 1UL << 0;
constexpr unsigned long kMpolFAddr = 1UL << 1;

Status check_range(const void* ptr, size_t len, const char* what) {
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || len == 0 || start + len < start) {
    return make_error(HMR_EINVAL, "system %s of [%p, +%zu): NULL, empty or wrapping range", what,
                      ptr, len);
  }
  return ok_status();
}

}  // namespace

Result<PointerInfo> SystemIface::query(const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_range(ptr, len, "query"));
  return host_pointer_info(ptr, len);
}

Result<DeviceCapabilities> SystemIface::capabilities(DeviceId device) {
  if (device.value != 0) {
    return make_error(HMR_EINVAL, "system memory has device 0 only (got %llu)",
                      static_cast<unsigned long long>(device.value));
  }
  DeviceCapabilities caps;
  caps.device = device;
  caps.dmabuf = Capability::no("host memory is registered by its address, not exported");
  caps.peer_direct = Capability::no("host memory needs no peer-direct path");
  caps.ipc = Capability::no("host memory is shared between processes by the application "
                            "(shared memory), not by hmr");
  return caps;
}

Status SystemIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  if (device_dst == nullptr || host_src == nullptr) {
    return make_error(HMR_EINVAL, "system copy with a NULL buffer");
  }
  std::memmove(device_dst, host_src, len);
  return ok_status();
}

Status SystemIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  return copy_to_device(host_dst, device_src, len);
}

Result<void*> SystemIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  if (device.value != 0) {
    return make_error(HMR_EINVAL, "system memory has device 0 only (got %llu)",
                      static_cast<unsigned long long>(device.value));
  }
  if (kind != MemoryKind::host) {
    return make_error(HMR_EINVAL, "system memory is host memory; it cannot be %s",
                      memory_kind_name(kind));
  }
  const size_t page = host_page_size();
  if (len == 0 || len > SIZE_MAX - page) {
    return make_error(HMR_EINVAL, "system allocation of %zu bytes", len);
  }
  const size_t mapped = (len + page - 1) / page * page;
  void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    const int err = errno;
    return make_error(HMR_ENOMEM, "no host memory for %zu bytes: mmap: %s", len,
                      std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  mappings_.emplace(reinterpret_cast<uintptr_t>(memory), mapped);
  return memory;
}

Status SystemIface::mem_free(void* ptr) {
  size_t mapped = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = mappings_.find(reinterpret_cast<uintptr_t>(ptr));
    if (found == mappings_.end()) {
      return make_error(HMR_EINVAL, "%p was not allocated by hmr_mem_alloc(HMR_HMEM_SYSTEM)", ptr);
    }
    mapped = found->second;
    mappings_.erase(found);
  }
  munmap(ptr, mapped);  // unlocked: a monitor may block the unmapping until it has read it
  return ok_status();
}

int numa_node(const void* ptr) {
  int node = -1;
  const long rc = syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(ptr),
                          kMpolFNode | kMpolFAddr);
  return rc == 0 ? node : -1;
}

std::string numa_sys_dev(int node) {
  return node < 0 ? std::string() : "numa:" + std::to_string(node);
}

}  // namespace hmr::hmem
