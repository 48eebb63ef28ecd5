// Registering device memory (and runtime memory the CPU can reach) on the NIC through one
// export path, and what such a registration keeps alive: the shared dma-buf export it points
// into, or the host shadow the NIC registered instead of the device memory.
#pragma once

#include <sys/uio.h>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cache/registration_cache.h"
#include "hmem/dmabuf_share.h"
#include "hmem/iface.h"
#include "nic/nic.h"
#include "registration/export_policy.h"
#include "registration/nic_registrar.h"
#include "registration/shadow_buffer.h"

namespace hmr::core {

struct DeviceHold {
  ExportMode mode = ExportMode::host_va;
  std::shared_ptr<const SharedExport> dmabuf;  // dma-buf path: the allocation's export
  uint64_t dmabuf_offset = 0;                  // of the registered range inside it
  std::unique_ptr<ShadowBuffer> shadow;        // host-shadow path
  uint64_t pinned_bytes = 0;                   // what the NIC registration pins (a shadow)
};

// Registers `segment` (inside the allocation `memory` of `iface`) through `mode`, with the
// rest of `request` (access, keys, flags, ...) as given.  On success `hold` owns what the NIC
// registration needs for as long as it lives.  `share_export`: whether the allocation's
// dma-buf export may be shared with other registrations (DmabufShares::acquire), i.e. what
// names the allocation names no later one (Domain::allocation_told_apart).
Result<nic::Registration> register_device_range(NicRegistrar& registrar, nic::RegistrationRequest request,
                                                const hmem::PointerInfo& memory,
                                                hmem::Iface& iface, const iovec& segment,
                                                ExportMode mode, DeviceHold& hold,
                                                bool share_export);

// The backend of a domain's device-memory cache: entries are keyed by iface, device,
// allocation id and export mode; a miss re-resolves the range (the allocation must still be
// the one the key names) and registers it through the key's export mode.
class DeviceCacheBackend final : public CacheBackend {
 public:
  explicit DeviceCacheBackend(NicRegistrar& registrar) : registrar_(registrar) {}
  Result<nic::Registration> register_range(uintptr_t start, uint64_t len,
                                           const CacheKey& key) override;
  void deregister(nic::Registration& registration, uintptr_t start, uint64_t len) noexcept override;
  // (Its driver calls, an export's close or a shadow's unmap, need nothing from the application.)
  bool deregistration_may_wait_for_application() const override {
    return registrar_.deregistration_may_wait_for_application();
  }

  // The export of a cached registration (for hmr_mr_query and hmr_mr_sync): fd and offset of
  // its first byte, or its host shadow, which every MR inside the entry shares (valid while
  // the caller holds the entry).
  struct ExportView {
    ExportMode mode = ExportMode::host_va;
    int dmabuf_fd = -1;
    uint64_t dmabuf_offset = 0;
    ShadowBuffer* shadow = nullptr;
  };
  std::optional<ExportView> view(const nic::Registration& registration);

  // Whether a cached registration holds a dma-buf export, and whether alone: what giving it
  // back does for the file descriptor table (ExportRelief).  "Alone" counts every holder of
  // the export in the process (other entries, other domains, a registration in progress), a
  // moment's answer that only orders the giving back.
  enum class ExportHolding { none, sole, shared };
  ExportHolding export_holding(const nic::Registration& registration);
  // Whether a cached registration pins host pages (a host shadow, or device memory the NIC
  // reaches by address as host memory): what giving it back does for the pinned-byte bound
  // (Shortage::pinned_host_memory).
  bool pins_host_memory(const nic::Registration& registration);

 private:
  NicRegistrar& registrar_;
  std::mutex mutex_;  // holds_ only; never held across a NIC or driver call
  std::unordered_map<void*, DeviceHold> holds_;  // by NIC registration handle
};

}  // namespace hmr::core
