// A host-shadow registration's host side: a buffer hmr owns that stands in for device memory
// the NIC may not reach (FI_HMEM_DISABLE_P2P, or no dma-buf / peer-direct path).  The NIC
// registers the shadow; hmr_mr_sync copies between it and the device memory through the
// iface's copy engine.  The CPU never touches the device memory itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "hmem/iface.h"
#include "util/status.h"

namespace hmr::core {

class ShadowBuffer {
 public:
  // Allocates the shadow of [device, device + len), pins it for the runtime's copy engine
  // where the runtime can (best effort: copies work without it), and fills it from the device,
  // so a peer reading the registration sees the device's bytes as they were at registration.
  static Result<std::unique_ptr<ShadowBuffer>> create(hmem::Iface& iface, void* device, size_t len);
  ~ShadowBuffer();
  ShadowBuffer(const ShadowBuffer&) = delete;
  ShadowBuffer& operator=(const ShadowBuffer&) = delete;

  void* host() const { return host_; }
  void* device() const { return device_; }
  size_t length() const { return length_; }

  // Copies [offset, offset + len) of the registration one way.
  Status copy_to_device(uint64_t offset, size_t len);
  Status copy_from_device(uint64_t offset, size_t len);

 private:
  ShadowBuffer(hmem::Iface& iface, void* device, void* host, size_t length, size_t mapped);

  hmem::Iface& iface_;
  void* device_;
  void* host_;
  size_t length_;
  size_t mapped_;              // page-rounded length of the host mapping
  bool host_registered_ = false;
};

}  // namespace hmr::core
