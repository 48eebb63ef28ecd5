#include "registration/device_registration.h"

#include <new>

#include "hmem/hmem_registry.h"
#include "util/descriptor_table.h"

namespace hmr::core {
namespace {

// Idle device registrations given back at a time while an export finds the descriptor table
// full (as many as for a NIC's refusal), and how often an export is tried again only because
// other threads let descriptors go meanwhile (which may have been why it failed): bounded, as
// a NIC's refusal is (NicRegistrar::kRetriesOnOthers), since a thread exporting and closing
// over and over lets one go during every look.
constexpr size_t kExportsReleasedPerTry = 8;
constexpr int kRetriesAfterOthersCloses = 8;          // with room in the table
constexpr int kRetriesAfterOthersClosesWhenFull = 64;  // threads at the bound together

// The export of the allocation `memory` describes (shared with every registration inside
// it), giving back idle device registrations while the driver cannot make it for want of
// file descriptors: each cached dma-buf registration keeps its allocation's export, an fd,
// open, and a KV-cache or NCCL buffer pool of many allocations can fill a 1024-entry table.
// Whether the table is full is asked of the table (util/descriptor_table.h), not read from
// the driver's code: CUDA documents none for it (the fake says out of memory; the ifaces
// that dup an fd say so for EMFILE).  A failure with room in the table is the driver's,
// unless descriptors were let go since the attempt began (another thread's giving back, or
// its probe of the table holding a slot for a moment): then it is tried again, a few times.
// With the table full, idle registrations are given back and the export tried again as long
// as any were, or as another thread closed an export meanwhile; with neither, HMR_ENOMEM
// marked as a descriptor shortage, which still lets peer-direct be tried but no host shadow
// (core/memory_region.cpp).
Result<std::shared_ptr<const SharedExport>> acquire_export(NicRegistrar& registrar,
                                                           hmem::Iface& iface,
                                                           const hmem::PointerInfo& memory,
                                                           bool shareable) {
  DmabufShares& shares = DmabufShares::instance();
  size_t released = 0;
  int retries_after_others = 0;
  for (;;) {
    const uint64_t closed = shares.closed_descriptors();
    Result<std::shared_ptr<const SharedExport>> share = shares.acquire(iface, memory, shareable);
    if (share.ok()) return share;
    const int shortage = shares.descriptor_shortage();
    if (shortage == 0) {
      if (shares.settled_closed_descriptors() != closed &&
          ++retries_after_others <= kRetriesAfterOthersCloses) {
        continue;
      }
      return share;  // the driver's own failure
    }
    const size_t given = registrar.give_back_exports(kExportsReleasedPerTry);
    if (given != 0) {
      released += given;
      continue;
    }
    // (Only exports' closes move the count while the table is full: each retry follows one.)
    if (shares.settled_closed_descriptors() != closed &&
        ++retries_after_others <= kRetriesAfterOthersClosesWhenFull) {
      continue;
    }
    Status refused = make_error(
        HMR_ENOMEM, "%s: %s; hmr holds %zu dma-buf exports (one per allocation registered) and "
        "gave back %zu idle device registrations for this one, with none left: close MRs",
        share.status().reason().c_str(), describe_descriptor_shortage(shortage).c_str(),
        shares.live_exports(), released);
    return refused.mark_descriptor_shortage();
  }
}

}  // namespace

Result<nic::Registration> register_device_range(NicRegistrar& registrar, nic::RegistrationRequest request,
                                                const hmem::PointerInfo& memory,
                                                hmem::Iface& iface, const iovec& segment,
                                                ExportMode mode, DeviceHold& hold,
                                                bool share_export) {
  constexpr uint64_t kKindFlags = HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC;
  request.iface = static_cast<hmr_hmem_iface>(memory.iface);
  request.device = memory.device.value;
  request.flags &= ~kKindFlags;
  request.dmabuf = nullptr;
  request.segments = {&segment, 1};
  DeviceHold made;
  made.mode = mode;
  hmr_mr_dmabuf dmabuf{};
  iovec shadow_segment{};
  switch (mode) {
    case ExportMode::host_va:
      // Runtime memory the CPU can reach: registered by address, and the NIC told what it is.
      if (memory.kind == hmem::MemoryKind::host_alloc) request.flags |= HMR_HMEM_HOST_ALLOC;
      break;
    case ExportMode::dmabuf: {
      Result<std::shared_ptr<const SharedExport>> share =
          acquire_export(registrar, iface, memory, share_export);
      if (!share.ok()) return share.status();
      made.dmabuf = std::move(*share);
      made.dmabuf_offset = made.dmabuf->offset_of(reinterpret_cast<uintptr_t>(segment.iov_base));
      // The NIC maps [offset, offset + len) of the fd; past its end a real NIC refuses
      // (ib_umem_dmabuf_get: -EINVAL) and a mapping faults.
      if (made.dmabuf_offset > made.dmabuf->exported_len() ||
          segment.iov_len > made.dmabuf->exported_len() - made.dmabuf_offset) {
        return make_error(HMR_EINVAL, "[%p, +%zu) is not inside the %s dma-buf export it belongs "
                          "to (offset %llu, %zu bytes exported)", segment.iov_base,
                          segment.iov_len, hmem::iface_name(memory.iface),
                          static_cast<unsigned long long>(made.dmabuf_offset),
                          made.dmabuf->exported_len());
      }
      dmabuf.fd = made.dmabuf->fd();
      dmabuf.offset = made.dmabuf_offset;
      dmabuf.len = segment.iov_len;
      dmabuf.base_addr = segment.iov_base;
      request.dmabuf = &dmabuf;
      request.segments = {};
      request.flags |= HMR_HMEM_DEVICE_ONLY;
      break;
    }
    case ExportMode::peer_direct:
      request.flags |= HMR_HMEM_DEVICE_ONLY;
      break;
    case ExportMode::host_shadow: {
      // Over the pinned bound on its own: refused before a shadow is mapped and filled (it
      // was copied whole, then refused).
      HMR_RETURN_IF_ERROR(registrar.admits_pinned(segment.iov_len, "host shadow"));
      Result<std::unique_ptr<ShadowBuffer>> shadow =
          ShadowBuffer::create(iface, segment.iov_base, segment.iov_len);
      if (!shadow.ok()) return shadow.status();
      made.shadow = std::move(*shadow);
      shadow_segment = {made.shadow->host(), segment.iov_len};
      // The NIC sees host memory: the shadow, not the device.
      request.iface = HMR_HMEM_SYSTEM;
      request.device = 0;
      request.segments = {&shadow_segment, 1};
      break;
    }
  }
  // Synchronous copies into memory the NIC reaches itself must be done when they return.
  if (mode == ExportMode::dmabuf || mode == ExportMode::peer_direct) iface.order_copies_for_nic(memory);
  Result<nic::Registration> registered = registrar.register_memory(request);
  if (registered.ok()) {
    made.pinned_bytes = registered->pinned_bytes;
    hold = std::move(made);
  }
  return registered;  // (a NIC's refusal for resources comes marked: Status::nic_refusal)
}

Result<nic::Registration> DeviceCacheBackend::register_range(uintptr_t start, uint64_t len,
                                                             const CacheKey& key) {
  hmem::Registry& registry = hmem::Registry::global();
  Result<hmem::Iface*> iface = registry.loaded_iface(key.iface);
  if (!iface.ok()) return iface.status();
  const iovec segment = {reinterpret_cast<void*>(start), len};
  Result<hmem::PointerInfo> memory = registry.verify(
      key.iface, static_cast<uint64_t>(static_cast<uint32_t>(key.device)), segment.iov_base, len);
  if (!memory.ok()) return memory.status();
  if (memory->alloc_id != key.alloc_id) {
    return make_error(HMR_EAGAIN, "%s memory at %p was freed and allocated again while it was "
                      "being registered", hmem::iface_name(key.iface), segment.iov_base);
  }
  DeviceHold hold;
  Result<nic::Registration> registered =
      register_device_range(registrar_, registrar_.request_for({&segment, 1}, key.access), *memory,
                            **iface, segment, static_cast<ExportMode>(key.export_mode), hold,
                            /*share_export=*/true);  // (cached: told apart, or not cached)
  if (!registered.ok()) return registered;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    // (try_emplace first, then the move: emplace moved the hold into a node it then freed when
    // the table could not grow, closing the export while the NIC still held it.)
    auto [record, inserted] = holds_.try_emplace(registered->handle);
    if (inserted) record->second = std::move(hold);
  } catch (const std::bad_alloc&) {
    // No memory for the record: the NIC lets go first, then `hold` (untouched) closes the
    // export or unmaps the shadow; the call fails as out of memory does anywhere, and no other
    // path is tried for it (an exception out of here had left the registration at the NIC).
    (void)registrar_.deregister_memory(*registered);
    throw;
  }
  return registered;
}

void DeviceCacheBackend::deregister(nic::Registration& registration, uintptr_t /*start*/,
                                    uint64_t /*len*/) noexcept {
  // The hold closes its export or unmaps its shadow after the NIC let go, outside the lock.
  DeviceHold released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = holds_.find(registration.handle);
    if (found != holds_.end()) {
      released = std::move(found->second);
      holds_.erase(found);
    }
  }
  registration.pinned_bytes = released.pinned_bytes;  // (the entry does not keep it)
  (void)registrar_.deregister_memory(registration);  // logged there
}

DeviceCacheBackend::ExportHolding DeviceCacheBackend::export_holding(
    const nic::Registration& registration) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = holds_.find(registration.handle);
  if (found == holds_.end() || !found->second.dmabuf) return ExportHolding::none;
  return found->second.dmabuf.use_count() == 1 ? ExportHolding::sole : ExportHolding::shared;
}

bool DeviceCacheBackend::pins_host_memory(const nic::Registration& registration) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = holds_.find(registration.handle);
  return found != holds_.end() && found->second.pinned_bytes != 0;
}

std::optional<DeviceCacheBackend::ExportView> DeviceCacheBackend::view(
    const nic::Registration& registration) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = holds_.find(registration.handle);
  if (found == holds_.end()) return std::nullopt;
  ExportView view;
  view.mode = found->second.mode;
  if (found->second.dmabuf) {
    view.dmabuf_fd = found->second.dmabuf->fd();
    view.dmabuf_offset = found->second.dmabuf_offset;
  }
  view.shadow = found->second.shadow.get();
  return view;
}

}  // namespace hmr::core
