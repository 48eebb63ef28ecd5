// The oneAPI Level Zero memory interface (libze_loader.so.1), dlopen'ed at init.
//
// Devices are named as libfabric's fi_hmem_ze_device names them: driver index << 16 | device
// index, in zeDriverGet and zeDeviceGet order (hmem/ze_device.h).  hmr creates one context per
// driver; the driver answers pointer queries for allocations of any of its contexts, so memory
// the application allocated in its own context is recognised too.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hmem/iface.h"
#include "hmem/symbol_table.h"
#include "ze/ze_copy_engine.h"
#include "ze/ze_symbols.h"
#include "util/retried_answer.h"

namespace hmr::ze {

// HMR_ZE_LIBRARY overrides it.
inline constexpr const char* kZeDefaultLibrary = "libze_loader.so.1";

// What hmr knows about one device, for diagnostics (hmr-info).
struct ZeDeviceInfo {
  hmem::DeviceId device;    // driver << 16 | device
  int driver_index = 0;
  int device_index = 0;
  std::string name;         // as the driver names it
  std::string uuid;         // 32 hex digits in 8-4-4-4-12 groups
  std::string pci_bus_id;   // "" without zeDevicePciGetPropertiesExt
};

class ZeIface final : public hmem::Iface {
 public:
  ZeIface() = default;
  // Destroys hmr's command lists and contexts.
  ~ZeIface() override;
  ZeIface(const ZeIface&) = delete;
  ZeIface& operator=(const ZeIface&) = delete;

  int iface() const override { return HMR_HMEM_ZE; }
  const char* name() const override { return "ze"; }

  Status init() override;
  // All devices of all drivers.  Their ids are encoded, not 0..count-1: see devices().
  Result<int> device_count() override;
  Result<std::vector<hmem::DeviceId>> device_ids() override;
  Result<hmem::PointerInfo> query(const void* ptr, size_t len) override;
  // The device hit path's question: one zeMemGetAllocProperties (per driver until one owns
  // the pointer) for the allocation's id, kind and device; no address range, no system call.
  Status identify(const void* ptr, size_t len, hmem::AllocationIdentity& out) override;
  // Exports the whole allocation (Level Zero exports allocations, not ranges); the offset is
  // where the range starts in it.
  Result<hmem::DmabufExport> export_dmabuf(hmem::MemoryRange range) override;
  Result<hmem::DeviceCapabilities> capabilities(hmem::DeviceId device) override;

  Status copy_to_device(void* device_dst, const void* host_src, size_t len) override;
  Status copy_from_device(void* host_dst, const void* device_src, size_t len) override;
  // Level Zero cannot pin memory it did not allocate: always HMR_EOPNOTSUPP, saying what to use.
  Status host_register(void* ptr, size_t len) override;
  Status host_unregister(void* ptr) override;

  // device_only: zeMemAllocDevice, exportable as dma-buf where the device can export;
  // host_alloc: zeMemAllocHost; managed: zeMemAllocShared, bound to the device.
  Result<void*> mem_alloc(hmem::DeviceId device, size_t len, hmem::MemoryKind kind) override;
  Status mem_free(void* ptr) override;

  FreeTracking free_tracking() const override { return FreeTracking::alloc_id; }

  std::string library_path() const override;
  // "Level Zero API 1.4" (driver 0's API version).
  std::string runtime_version() const override;

  Result<std::vector<ZeDeviceInfo>> devices() const;

 private:
  // A device's tiles (COMPOSITE hierarchy): memory placed on one reports the tile's handle,
  // which zeDeviceGet does not list.  Handles, and UUIDs for handles hmr never saw ("" for a
  // tile the driver would not describe).
  struct Tiles {
    std::vector<ze_device_handle_t> handles;
    std::vector<std::string> uuids;
    // Whether `handle` is one of them, or (where given) `uuid` one of theirs.
    bool holds(ze_device_handle_t handle, std::string_view uuid = {}) const;
  };
  struct Device {
    ZeDeviceInfo info;
    ze_device_handle_t handle = nullptr;
    // Whether it exports dma-bufs.  Not known when the driver would not say at init
    // (zeDeviceGetExternalMemoryProperties refused): asked again by dmabuf_of until it does.
    // Mutable, as tiles: a cache of the driver's answer, filled in by const lookups.
    mutable RetriedAnswer<hmem::Capability> dmabuf;
    // Its tiles.  Not known when zeDeviceGetSubDevices was refused at init: asked again when
    // memory reports a device handle hmr does not know, until the driver answers.
    mutable RetriedAnswer<Tiles> tiles;
  };
  struct Driver {
    ze_driver_handle_t handle = nullptr;
    ze_context_handle_t context = nullptr;
    std::vector<size_t> devices;  // indices into devices_
  };
  // A pointer the driver recognised: which driver, which device (nullptr: none) and its kind.
  struct Owner {
    size_t driver = 0;
    std::optional<size_t> device;  // index into devices_
    int type = ZE_MEMORY_TYPE_UNKNOWN;
    uint64_t id = 0;
  };

  Status check_initialized() const;
  Status discover(const ZeSymbols& symbols, const char* path, std::vector<Driver>& drivers,
                  std::vector<Device>& devices) const;
  Result<Device> describe_device(const ZeSymbols& symbols, ze_device_handle_t handle,
                                 int driver_index, int device_index) const;
  static void destroy_contexts(const ZeSymbols& symbols, std::vector<Driver>& drivers);
  Result<size_t> find_device(hmem::DeviceId device, const char* what) const;
  // Which listed device of driver `driver` a handle zeMemGetAllocProperties reported is, or
  // holds as a tile: by handle, then by UUID (libfabric matches by UUID too), then among the
  // tiles init could not list; nullopt for none, an error naming the call the driver refused.
  Result<std::optional<size_t>> device_of_handle(size_t driver, ze_device_handle_t handle) const;
  // The tiles of a device, or the refusal of zeDeviceGetSubDevices (none if the driver has no
  // such call).
  static Result<Tiles> list_tiles(const ZeSymbols& symbols, ze_device_handle_t handle);
  // Whether a device exports dma-bufs: its answer at init, or asked again if there was none.
  static hmem::Capability dmabuf_capability(const ZeSymbols& symbols, ze_device_handle_t handle,
                                            const std::string& name, int encoded, bool& known);
  hmem::Capability dmabuf_of(size_t device) const;
  // Which driver owns ptr, or HMR_ENOENT; other failures are final.
  Result<Owner> owner_of(const void* ptr) const;
  // What kind of memory an owner's pointer is, or why hmr does not take it (a type it does not
  // know, device memory without a device, device memory in a forked child): query()'s and
  // identify()'s common checks.
  Result<hmem::MemoryKind> kind_of(const Owner& owner, const void* ptr) const;
  // The device an owner's pointer belongs to, as PointerInfo::device names it.
  hmem::DeviceId device_id_of(const Owner& owner) const;
  // `device_side` is whichever of dst and src is this iface's memory.
  Status copy(const void* device_side, void* dst, const void* src, size_t len, const char* what);

  std::optional<hmem::SymbolTable> library_;  // set only once init has fully succeeded
  ZeSymbols symbols_;
  std::vector<Driver> drivers_;
  std::vector<Device> devices_;
  std::string version_;
  std::unique_ptr<ZeCopyEngine> copies_;
  // Whose the fd of a dma-buf export is, per driver, learned at its first export
  // (ze_iface.cpp): the driver's (one per buffer, compute-runtime 22.49 and later) or the
  // caller's (one per export).
  enum class ExportedFdOwner : int { unknown, driver, caller };
  std::unique_ptr<std::atomic<ExportedFdOwner>[]> exported_fd_owners_;  // one per drivers_
  // The fork generation (util/fork_generation.h) of the process that initialised the driver:
  // a child forked from it gets the parent's answers (device memory is refused there).
  uint64_t init_fork_generation_ = 0;
};

}  // namespace hmr::ze
