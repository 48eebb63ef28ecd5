#include "ze/ze_iface.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "hmem/page_range.h"
#include "hmem/ze_device.h"
#include "util/fork_generation.h"
#include "util/log.h"
#include "ze/ze_error.h"
#include "ze/ze_export_base.h"

namespace hmr::ze {

using hmem::Capability;
using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::DmabufFd;
using hmem::MemoryKind;
using hmem::MemoryRange;
using hmem::PointerInfo;

namespace {

std::string format_uuid(const ze_device_uuid_t& uuid) {
  std::string text;
  for (size_t i = 0; i < sizeof uuid.id; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char byte[3];
    std::snprintf(byte, sizeof byte, "%02x", uuid.id[i]);
    text += byte;
  }
  return text;
}

}  // namespace

ZeIface::~ZeIface() {
  if (!library_.has_value()) return;
  copies_.reset();  // command lists before the contexts they belong to
  destroy_contexts(symbols_, drivers_);
}

void ZeIface::destroy_contexts(const ZeSymbols& symbols, std::vector<Driver>& drivers) {
  for (size_t d = 0; d < drivers.size(); ++d) {
    Driver& driver = drivers[d];
    if (driver.context == nullptr) continue;
    // Nothing else to do: the driver keeps a context it refuses to destroy until the process
    // ends (HANDLE_OBJECT_IN_USE while a command list of it lives).
    const ze_result_t result = symbols.zeContextDestroy(driver.context);
    if (result != ZE_RESULT_SUCCESS) {
      log_message(LogLevel::warn, "ze iface: zeContextDestroy of hmr's context on ze driver %zu "
                  "failed: %s", d, describe_ze_result(result).c_str());
    }
    driver.context = nullptr;
  }
}

Status ZeIface::init() {
  if (library_.has_value()) return ok_status();

  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load("ZE", kZeDefaultLibrary, ze_symbol_specs());
  if (!table.ok()) {
    return Status(table.status().code(), "ze iface unavailable: " + table.status().reason());
  }
  ZeSymbols symbols;
  bind_ze_symbols(*table, symbols);
  const char* path = table->path().c_str();

  // GPU drivers only: hmr registers GPU memory, and other drivers (VPU) need not be loaded.
  const ze_result_t result = symbols.zeInit(ZE_INIT_FLAG_GPU_ONLY);
  if (result != ZE_RESULT_SUCCESS) {
    // The loader answers UNINITIALIZED when it found no driver to load.
    const bool no_driver = result == ZE_RESULT_ERROR_UNINITIALIZED;
    return make_error(no_driver ? HMR_ENODEV : hmr_code_for(result),
                      "ze iface unavailable: zeInit(ZE_INIT_FLAG_GPU_ONLY) in '%s' failed: %s%s",
                      path, describe_ze_result(result).c_str(),
                      no_driver ? "; the loader found no Level Zero GPU driver (none installed, "
                                  "or no Intel GPU)"
                                : "");
  }
  std::vector<Driver> drivers;
  std::vector<Device> devices;
  Status discovered = discover(symbols, path, drivers, devices);
  if (!discovered.ok()) {
    destroy_contexts(symbols, drivers);
    return discovered;
  }

  uint32_t api = 0;
  std::string version;
  if (symbols.zeDriverGetApiVersion(drivers.front().handle, &api) == ZE_RESULT_SUCCESS) {
    version = "Level Zero API " + std::to_string(api >> 16) + "." + std::to_string(api & 0xffff);
  }
  std::vector<ZeCopyEngine::Target> targets;
  for (const Device& device : devices) {
    targets.push_back({drivers[static_cast<size_t>(device.info.driver_index)].context,
                       device.handle});
  }

  symbols_ = symbols;
  init_fork_generation_ = fork_generation();
  exported_fd_owners_ = std::make_unique<std::atomic<ExportedFdOwner>[]>(drivers.size());
  for (size_t i = 0; i < drivers.size(); ++i) exported_fd_owners_[i] = ExportedFdOwner::unknown;
  drivers_ = std::move(drivers);
  devices_ = std::move(devices);
  version_ = std::move(version);
  copies_ = std::make_unique<ZeCopyEngine>(symbols_, std::move(targets));
  library_ = std::move(*table);
  log_message(LogLevel::debug, "ze iface: '%s', %s, %zu driver(s), %zu device(s)",
              library_->path().c_str(), version_.c_str(), drivers_.size(), devices_.size());
  return ok_status();
}

Status ZeIface::discover(const ZeSymbols& symbols, const char* path, std::vector<Driver>& drivers,
                         std::vector<Device>& devices) const {
  uint32_t driver_count = 0;
  ze_result_t result = symbols.zeDriverGet(&driver_count, nullptr);
  std::vector<ze_driver_handle_t> handles(driver_count);
  if (result == ZE_RESULT_SUCCESS && driver_count > 0) {
    result = symbols.zeDriverGet(&driver_count, handles.data());
    handles.resize(driver_count);
  }
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "ze iface unavailable: zeDriverGet in '%s' failed: %s",
                      path, describe_ze_result(result).c_str());
  }
  if (handles.empty()) {
    return make_error(HMR_ENODEV, "ze iface unavailable: zeDriverGet in '%s' reports no driver",
                      path);
  }
  for (size_t d = 0; d < handles.size(); ++d) {
    Driver& driver = drivers.emplace_back();
    driver.handle = handles[d];
    ze_context_desc_t context_desc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    result = symbols.zeContextCreate(driver.handle, &context_desc, &driver.context);
    if (result != ZE_RESULT_SUCCESS) {
      driver.context = nullptr;
      return make_error(hmr_code_for(result), "ze iface unavailable: zeContextCreate for driver %zu "
                        "failed: %s", d, describe_ze_result(result).c_str());
    }
    uint32_t device_count = 0;
    result = symbols.zeDeviceGet(driver.handle, &device_count, nullptr);
    std::vector<ze_device_handle_t> device_handles(device_count);
    if (result == ZE_RESULT_SUCCESS && device_count > 0) {
      result = symbols.zeDeviceGet(driver.handle, &device_count, device_handles.data());
      device_handles.resize(device_count);
    }
    if (result != ZE_RESULT_SUCCESS) {
      return make_error(hmr_code_for(result), "ze iface unavailable: zeDeviceGet for driver %zu "
                        "failed: %s", d, describe_ze_result(result).c_str());
    }
    for (size_t i = 0; i < device_handles.size(); ++i) {
      Result<Device> device = describe_device(symbols, device_handles[i], static_cast<int>(d),
                                              static_cast<int>(i));
      if (!device.ok()) return device.status();
      driver.devices.push_back(devices.size());
      devices.push_back(std::move(*device));
    }
  }
  if (devices.empty()) {
    return make_error(HMR_ENODEV, "ze iface unavailable: %zu Level Zero driver(s) in '%s' but no "
                      "device", drivers.size(), path);
  }
  return ok_status();
}

Result<ZeIface::Device> ZeIface::describe_device(const ZeSymbols& symbols,
                                                 ze_device_handle_t handle, int driver_index,
                                                 int device_index) const {
  Result<int> encoded = hmem::encode_ze_device(driver_index, device_index);
  if (!encoded.ok()) {
    return Status(encoded.status().code(), "ze iface unavailable: " + encoded.status().reason());
  }
  Device device;
  device.handle = handle;
  device.info.device = DeviceId{static_cast<uint64_t>(*encoded)};
  device.info.driver_index = driver_index;
  device.info.device_index = device_index;

  ze_device_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  ze_result_t result = symbols.zeDeviceGetProperties(handle, &properties);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "ze iface unavailable: zeDeviceGetProperties for ze "
                      "device 0x%x failed: %s", *encoded, describe_ze_result(result).c_str());
  }
  properties.name[sizeof properties.name - 1] = '\0';
  device.info.name = properties.name;
  device.info.uuid = format_uuid(properties.uuid);

  // A device whose location cannot be read still works; it only has no sys_dev.
  if (symbols.zeDevicePciGetPropertiesExt != nullptr) {
    ze_pci_ext_properties_t pci{};
    pci.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES;
    if (symbols.zeDevicePciGetPropertiesExt(handle, &pci) == ZE_RESULT_SUCCESS) {
      char text[32];
      std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", pci.address.domain, pci.address.bus,
                    pci.address.device, pci.address.function);
      device.info.pci_bus_id = text;
    }
  }

  bool dmabuf_known = false;
  Capability dmabuf = dmabuf_capability(symbols, handle, device.info.name, *encoded, dmabuf_known);
  if (dmabuf_known) device.dmabuf.keep(dmabuf);

  // Tiles, so that memory placed on one is known as this device's.  Not fatal: memory on a
  // tile is recognised by asking again (device_of_handle).
  Result<Tiles> tiles = list_tiles(symbols, handle);
  if (tiles.ok()) {
    device.tiles.keep(*tiles);
  } else {
    log_message(LogLevel::warn, "ze iface: the tiles of ze device 0x%x are not known (asked "
                "again when memory on an unknown device is seen): %s", *encoded,
                tiles.status().reason().c_str());
  }
  return device;
}

Result<ZeIface::Tiles> ZeIface::list_tiles(const ZeSymbols& symbols, ze_device_handle_t handle) {
  Tiles tiles;
  if (symbols.zeDeviceGetSubDevices == nullptr) return tiles;
  uint32_t count = 0;
  ze_result_t result = symbols.zeDeviceGetSubDevices(handle, &count, nullptr);
  if (result == ZE_RESULT_SUCCESS && count > 0) {
    tiles.handles.resize(count);
    result = symbols.zeDeviceGetSubDevices(handle, &count, tiles.handles.data());
  }
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeDeviceGetSubDevices of device handle %p failed: "
                      "%s", static_cast<void*>(handle), describe_ze_result(result).c_str());
  }
  tiles.handles.resize(count);
  for (ze_device_handle_t tile : tiles.handles) {
    ze_device_properties_t properties{};
    properties.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    tiles.uuids.push_back(symbols.zeDeviceGetProperties(tile, &properties) == ZE_RESULT_SUCCESS
                              ? format_uuid(properties.uuid)
                              : std::string());
  }
  return tiles;
}

bool ZeIface::Tiles::holds(ze_device_handle_t handle, std::string_view uuid) const {
  return std::find(handles.begin(), handles.end(), handle) != handles.end() ||
         (!uuid.empty() && std::find(uuids.begin(), uuids.end(), uuid) != uuids.end());
}

Capability ZeIface::dmabuf_capability(const ZeSymbols& symbols, ze_device_handle_t handle,
                                      const std::string& device_name, int encoded, bool& known) {
  ze_device_external_memory_properties_t external{};
  external.stype = ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES;
  const ze_result_t result = symbols.zeDeviceGetExternalMemoryProperties(handle, &external);
  char name[32];
  std::snprintf(name, sizeof name, "ze device 0x%x", encoded);
  known = result == ZE_RESULT_SUCCESS;
  if (result != ZE_RESULT_SUCCESS) {
    // Asked again at the next question: a refusal need not last.
    return Capability::no(std::string("zeDeviceGetExternalMemoryProperties for ") + name +
                          " failed: " + describe_ze_result(result) +
                          " (asked again at the next export)");
  }
  if ((external.memoryAllocationExportTypes & ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF) == 0) {
    char flags[16];
    std::snprintf(flags, sizeof flags, "0x%x", external.memoryAllocationExportTypes);
    return Capability::no(std::string(name) + " (" + device_name +
                          ") cannot export allocations as dma-buf (export types " + flags + ")");
  }
  return Capability::yes();
}

Capability ZeIface::dmabuf_of(size_t index) const {
  const Device& device = devices_[index];
  if (const Capability* known = device.dmabuf.get()) return *known;
  bool answered = false;
  Capability answer =
      dmabuf_capability(symbols_, device.handle, device.info.name,
                        static_cast<int>(device.info.device.value), answered);
  if (answered) device.dmabuf.keep(answer);
  return answer;
}

Result<std::optional<size_t>> ZeIface::device_of_handle(size_t driver,
                                                        ze_device_handle_t handle) const {
  for (size_t index : drivers_[driver].devices) {
    const Device& device = devices_[index];
    if (device.handle == handle) return std::optional<size_t>(index);
    const Tiles* tiles = device.tiles.get();
    if (tiles != nullptr && tiles->holds(handle)) {
      return std::optional<size_t>(index);
    }
  }
  ze_device_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  const ze_result_t result = symbols_.zeDeviceGetProperties(handle, &properties);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeDeviceGetProperties of device handle %p, which "
                      "ze driver %zu reported for the memory, failed: %s",
                      static_cast<void*>(handle), driver, describe_ze_result(result).c_str());
  }
  const std::string uuid = format_uuid(properties.uuid);
  for (size_t index : drivers_[driver].devices) {
    const Device& device = devices_[index];
    if (device.info.uuid == uuid) return std::optional<size_t>(index);
    const Tiles* tiles = device.tiles.get();
    if (tiles != nullptr && tiles->holds(handle, uuid)) return std::optional<size_t>(index);
  }
  // Tiles init could not list: asked again, and kept once the driver answers.
  for (size_t index : drivers_[driver].devices) {
    const Device& device = devices_[index];
    if (device.tiles.get() != nullptr) continue;
    Result<Tiles> tiles = list_tiles(symbols_, device.handle);
    if (!tiles.ok()) {
      return make_error(tiles.status().code(), "%s (ze device 0x%" PRIx64 ", refused at init "
                        "too, looking for the device of handle %p)",
                        tiles.status().reason().c_str(), device.info.device.value,
                        static_cast<void*>(handle));
    }
    device.tiles.keep(*tiles);
    if (tiles->holds(handle, uuid)) return std::optional<size_t>(index);
  }
  return std::optional<size_t>();
}

std::string ZeIface::library_path() const {
  return library_.has_value() ? library_->path() : std::string();
}

std::string ZeIface::runtime_version() const {
  return library_.has_value() ? version_ : std::string();
}

Status ZeIface::check_initialized() const {
  if (library_.has_value()) return ok_status();
  return make_error(HMR_EINVAL, "ze iface used before a successful init()");
}

Result<int> ZeIface::device_count() {
  HMR_RETURN_IF_ERROR(check_initialized());
  return static_cast<int>(devices_.size());
}

Result<std::vector<hmem::DeviceId>> ZeIface::device_ids() {
  HMR_RETURN_IF_ERROR(check_initialized());
  std::vector<hmem::DeviceId> ids;
  for (const Device& device : devices_) ids.push_back(device.info.device);
  return ids;
}

Result<std::vector<ZeDeviceInfo>> ZeIface::devices() const {
  HMR_RETURN_IF_ERROR(check_initialized());
  std::vector<ZeDeviceInfo> infos;
  for (const Device& device : devices_) infos.push_back(device.info);
  return infos;
}

Result<size_t> ZeIface::find_device(DeviceId device, const char* what) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].info.device == device) return i;
  }
  Result<hmem::ZeDeviceIndex> decoded =
      hmem::decode_ze_device(device.value > INT32_MAX ? -1 : static_cast<int>(device.value));
  if (!decoded.ok()) {
    return make_error(HMR_EINVAL, "%s: ze device 0x%" PRIx64 " is not a driver << 16 | device "
                      "encoding", what, device.value);
  }
  return make_error(HMR_EINVAL, "%s: ze device 0x%" PRIx64 " (driver %d, device %d) does not "
                    "exist (%zu driver(s), %zu device(s))", what, device.value, decoded->driver,
                    decoded->device, drivers_.size(), devices_.size());
}

Result<ZeIface::Owner> ZeIface::owner_of(const void* ptr) const {
  for (size_t d = 0; d < drivers_.size(); ++d) {
    ze_memory_allocation_properties_t properties{};
    properties.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
    ze_device_handle_t device = nullptr;
    const ze_result_t result =
        symbols_.zeMemGetAllocProperties(drivers_[d].context, ptr, &properties, &device);
    if (result != ZE_RESULT_SUCCESS) {
      // Fail closed: an unanswered question is not "host memory".
      return make_error(hmr_code_for(result), "zeMemGetAllocProperties(%p) on ze driver %zu "
                        "failed: %s", ptr, d, describe_ze_result(result).c_str());
    }
    if (properties.type == ZE_MEMORY_TYPE_UNKNOWN) continue;
    Owner owner;
    owner.driver = d;
    owner.type = properties.type;
    owner.id = properties.id;
    if (device != nullptr) {
      Result<std::optional<size_t>> found = device_of_handle(d, device);
      if (!found.ok()) {
        return make_error(found.status().code(), "the device of Level Zero memory %p is not "
                          "known: %s", ptr, found.status().reason().c_str());
      }
      owner.device = *found;
      if (!owner.device.has_value()) {
        return make_error(HMR_EIO, "%p is Level Zero memory of a device ze driver %zu did not "
                          "list at init", ptr, d);
      }
    }
    return owner;
  }
  return not_its_memory("not Level Zero memory");
}

Result<MemoryKind> ZeIface::kind_of(const Owner& owner, const void* ptr) const {
  MemoryKind kind = MemoryKind::device_only;
  switch (owner.type) {
    case ZE_MEMORY_TYPE_HOST: kind = MemoryKind::host_alloc; break;
    case ZE_MEMORY_TYPE_DEVICE: kind = MemoryKind::device_only; break;
    case ZE_MEMORY_TYPE_SHARED: kind = MemoryKind::managed; break;
    default:
      return make_error(HMR_EOPNOTSUPP, "%p is Level Zero memory of type %d, which hmr does not "
                        "know", ptr, owner.type);
  }
  if (kind == MemoryKind::device_only && !owner.device.has_value()) {
    return make_error(HMR_EIO, "%p is Level Zero device memory without a device", ptr);
  }
  // In a child forked from the process that initialised the driver, the Intel driver answers
  // from the parent's allocation table as it stood at fork(): it keeps the table in process
  // memory (Context::getMemAllocProperties, getMemAddressRange: svmAllocsManager) and handles
  // no fork, and the buffer handles its exports name live in the DRM file the child shares with
  // the parent, which frees and reuses them without the child knowing.  Device memory is
  // never the child's to register.  Host and shared memory is mapped in the child, which
  // inherits those mappings, and registers as it does in the parent.
  if (kind == MemoryKind::device_only && fork_generation() != init_fork_generation_) {
    return make_error(HMR_EOPNOTSUPP, "%p is Level Zero device memory of the process this one "
                      "was forked from: the driver answers a forked child from the parent's "
                      "allocations as they were at fork() and shares the parent's buffer "
                      "handles, so hmr does not register it here; register it in the parent",
                      ptr);
  }
  return kind;
}

DeviceId ZeIface::device_id_of(const Owner& owner) const {
  // Host memory (and shared memory bound to no device) belongs to the driver, not a device:
  // it reports the driver's device 0, as libfabric does.
  return owner.device.has_value() ? devices_[*owner.device].info.device
                                  : DeviceId{static_cast<uint64_t>(owner.driver) << 16};
}

Status ZeIface::identify(const void* ptr, size_t len, hmem::AllocationIdentity& out) {
  HMR_RETURN_IF_ERROR(check_initialized());
  (void)len;  // (the cache entry a hit is matched against was checked whole when it was made)
  Result<Owner> owner = owner_of(ptr);
  if (!owner.ok()) return owner.status();
  Result<MemoryKind> kind = kind_of(*owner, ptr);
  if (!kind.ok()) return kind.status();
  out = {HMR_HMEM_ZE, device_id_of(*owner).value, owner->id, *kind};
  return ok_status();
}

Result<PointerInfo> ZeIface::query(const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (len == 0 || address + len < address) {
    return make_error(HMR_EINVAL, "ze query of [%p, +%zu): empty or wrapping range", ptr, len);
  }
  Result<Owner> owner = owner_of(ptr);
  if (!owner.ok()) return owner.status();
  Result<MemoryKind> kind = kind_of(*owner, ptr);
  if (!kind.ok()) return kind.status();

  const Driver& driver = drivers_[owner->driver];
  void* base = nullptr;
  size_t size = 0;
  const ze_result_t result = symbols_.zeMemGetAddressRange(driver.context, ptr, &base, &size);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result),
                      "zeMemGetAddressRange(%p) on ze driver %zu failed: %s%s", ptr,
                      owner->driver, describe_ze_result(result).c_str(),
                      result == ZE_RESULT_ERROR_ADDRESS_NOT_FOUND
                          ? " (the address lies in Level Zero device memory but in no live "
                            "allocation: a freed allocation, or the free space of a memory pool)"
                          : "");
  }
  const auto start = reinterpret_cast<uintptr_t>(base);
  if (address < start || address - start >= size || len > size - (address - start)) {
    return make_error(HMR_EINVAL, "[%p, +%zu) is not inside one Level Zero allocation: the "
                      "allocation is [%p, +%zu)", ptr, len, base, size);
  }

  PointerInfo info;
  info.iface = HMR_HMEM_ZE;
  info.base = start;
  info.alloc_len = size;
  info.kind = *kind;
  info.alloc_id = owner->id;
  info.device = device_id_of(*owner);
  if (owner->device.has_value()) info.sys_dev = devices_[*owner->device].info.pci_bus_id;
  return info;
}

Result<DmabufExport> ZeIface::export_dmabuf(MemoryRange range) {
  HMR_RETURN_IF_ERROR(check_initialized());
  Result<PointerInfo> info = query(range.address, range.length);
  if (!info.ok()) return info.status();
  if (info->kind != MemoryKind::device_only) {
    return make_error(HMR_EOPNOTSUPP, "%p is Level Zero %s memory: only device memory is exported "
                      "as dma-buf (shared pages migrate; host memory is registered by address)",
                      range.address, hmem::memory_kind_name(info->kind));
  }
  Result<size_t> device = find_device(info->device, "ze dma-buf export");
  if (!device.ok()) return device.status();
  const Device& owner = devices_[*device];
  const Capability dmabuf = dmabuf_of(*device);
  if (!dmabuf.supported) {
    return make_error(HMR_EOPNOTSUPP, "ze dma-buf export of %p unavailable: %s", range.address,
                      dmabuf.reason.c_str());
  }

  ze_external_memory_export_fd_t export_fd{};
  export_fd.stype = ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD;
  export_fd.flags = ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF;
  export_fd.fd = -1;
  ze_memory_allocation_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
  properties.pNext = &export_fd;
  const void* base = reinterpret_cast<const void*>(static_cast<uintptr_t>(info->base));
  ze_context_handle_t context = drivers_[static_cast<size_t>(owner.info.driver_index)].context;
  // A pooled allocation exports the pool: the offset counts from the pool's start.
  Result<uintptr_t> buffer_start = exported_buffer_start(
      symbols_, context, static_cast<uintptr_t>(info->base), info->alloc_id,
      hmem::host_page_size());
  if (!buffer_start.ok()) return buffer_start.status();
  const ze_result_t result = symbols_.zeMemGetAllocProperties(context, base, &properties, nullptr);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeMemGetAllocProperties(%p) with a dma-buf export "
                      "request on ze device 0x%" PRIx64 " failed: %s", base, info->device.value,
                      describe_ze_result(result).c_str());
  }
  if (properties.type == ZE_MEMORY_TYPE_UNKNOWN) {
    // compute-runtime answers memory it does not know with SUCCESS and type UNKNOWN, before
    // it looks at the export request: the memory was freed after it was identified.
    return make_error(HMR_EFAULT, "ze dma-buf export of %p: the driver no longer knows the "
                      "allocation at %p (freed after it was identified)", range.address, base);
  }
  if (export_fd.fd < 0) {
    return make_error(HMR_EIO, "zeMemGetAllocProperties(%p) succeeded but exported fd %d", base,
                      export_fd.fd);
  }
  // Whose the fd is depends on the driver.  compute-runtime 22.49 and later cache one per
  // buffer, hand the same number to every export and close it when the memory is freed
  // (DrmAllocation::peekInternalHandle's handles[]): hmr takes a descriptor of its own and
  // never closes the driver's.  Before 22.49 every export made a new fd (a PRIME handle-to-fd
  // each call) that nobody else closes: taken as hmr's, since a duplicate leaked it and the
  // buffer behind it for ever (found by a review).  Asked once per driver: a second export
  // gives the same number where the driver keeps it, and another fd of the same dma-buf (the
  // same inode) where each export is a new one.  Anything else (the buffer freed and another
  // exported in between) decides nothing, and the fd is duplicated as before.
  std::atomic<ExportedFdOwner>& known_owner =
      exported_fd_owners_[static_cast<size_t>(owner.info.driver_index)];
  ExportedFdOwner fd_owner = known_owner.load(std::memory_order_acquire);
  if (fd_owner == ExportedFdOwner::unknown) {
    ze_external_memory_export_fd_t again = export_fd;
    again.fd = -1;
    ze_memory_allocation_properties_t asked_again = properties;
    asked_again.pNext = &again;
    if (symbols_.zeMemGetAllocProperties(context, base, &asked_again, nullptr) ==
            ZE_RESULT_SUCCESS &&
        again.fd >= 0) {
      struct stat first {};
      struct stat second {};
      if (again.fd == export_fd.fd) {
        fd_owner = ExportedFdOwner::driver;
      } else if (fstat(export_fd.fd, &first) == 0 && fstat(again.fd, &second) == 0 &&
                 first.st_dev == second.st_dev && first.st_ino == second.st_ino) {
        fd_owner = ExportedFdOwner::caller;
      }
      if (again.fd != export_fd.fd) ::close(again.fd);  // another export's: never the driver's
      if (fd_owner != ExportedFdOwner::unknown) {
        known_owner.store(fd_owner, std::memory_order_release);
      }
    }
  }
  DmabufExport exported;
  exported.fd = fd_owner == ExportedFdOwner::caller
                    ? DmabufFd(export_fd.fd)
                    : DmabufFd(fcntl(export_fd.fd, F_DUPFD_CLOEXEC, 0));
  if (!exported.fd.valid()) {
    const int error = errno;
    return make_error(error == EMFILE || error == ENFILE ? HMR_ENOMEM : HMR_EIO,
                      "duplicating the Level Zero driver's dma-buf fd %d of %p failed: %s",
                      export_fd.fd, base, std::strerror(error));
  }
  // The dma-buf is the whole buffer; a dma-buf reports its size to lseek(SEEK_END).  lseek moves
  // the file position the driver's fd shares with this one; 0 is where the driver left it.
  const off_t size = lseek(exported.fd.get(), 0, SEEK_END);
  (void)lseek(exported.fd.get(), 0, SEEK_SET);
  exported.offset = reinterpret_cast<uintptr_t>(range.address) - *buffer_start;
  exported.len = range.length;
  exported.exported_len =
      size > 0 ? static_cast<size_t>(size)
               : hmem::page_round(0, info->alloc_len + (info->base - *buffer_start),
                                  hmem::host_page_size()).length;
  if (exported.offset + exported.len > exported.exported_len) {
    return make_error(HMR_EIO, "ze dma-buf of %p covers %zu bytes, fewer than the allocation "
                      "needs", base, exported.exported_len);
  }
  return exported;
}

Result<DeviceCapabilities> ZeIface::capabilities(DeviceId device) {
  HMR_RETURN_IF_ERROR(check_initialized());
  Result<size_t> index = find_device(device, "ze capabilities");
  if (!index.ok()) return index.status();
  DeviceCapabilities caps;
  caps.device = device;
  caps.sys_dev = devices_[*index].info.pci_bus_id;
  caps.dmabuf = dmabuf_of(*index);
  caps.peer_direct = Capability::no(
      "Level Zero memory reaches NICs through dma-buf; there is no "
      "peer-memory path for it");
  caps.ipc = Capability::no("Level Zero IPC export is not implemented in this hmr build");
  return caps;
}

Status ZeIface::copy(const void* device_side, void* dst, const void* src, size_t len, const char* what) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (dst == nullptr || src == nullptr || len == 0) {
    return make_error(HMR_EINVAL, "ze copy %s: destination %p, source %p, %zu bytes: null pointer "
                      "or nothing to copy", what, dst, src, len);
  }
  // The copy runs on the engine of the device that owns the memory.
  Result<PointerInfo> info = query(device_side, len);
  if (!info.ok()) {
    return Status(info.status().code(), std::string("ze copy ") + what + ": " +
                                            info.status().reason());
  }
  Result<size_t> device = find_device(info->device, "ze copy");
  if (!device.ok()) return device.status();
  return copies_->copy(*device, dst, src, len, what);
}

Status ZeIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  return copy(device_dst, device_dst, host_src, len, "to the device");
}

Status ZeIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  return copy(device_src, host_dst, device_src, len, "from the device");
}

Status ZeIface::host_register(void* ptr, size_t len) {
  (void)ptr, (void)len;
  return make_error(HMR_EOPNOTSUPP, "Level Zero cannot register host memory it did not allocate; "
                    "allocate it through Level Zero instead (mem_alloc with host_alloc, i.e. "
                    "zeMemAllocHost)");
}

Status ZeIface::host_unregister(void* ptr) {
  (void)ptr;
  return make_error(HMR_EOPNOTSUPP, "Level Zero has no host registration to undo");
}

Result<void*> ZeIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (len == 0) return make_error(HMR_EINVAL, "ze allocation of 0 bytes");
  Result<size_t> index = find_device(device, "ze allocation");
  if (!index.ok()) return index.status();
  const Device& target = devices_[*index];
  ze_context_handle_t context = drivers_[static_cast<size_t>(target.info.driver_index)].context;

  // The spec wants an allocation's export types declared when it is made.
  ze_external_memory_export_desc_t export_desc{ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC,
                                               nullptr, ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF};
  ze_device_mem_alloc_desc_t device_desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  ze_host_mem_alloc_desc_t host_desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
  void* ptr = nullptr;
  ze_result_t result = ZE_RESULT_SUCCESS;
  const char* call = nullptr;
  switch (kind) {
    case MemoryKind::device_only:
      if (dmabuf_of(*index).supported) device_desc.pNext = &export_desc;
      call = "zeMemAllocDevice";
      result = symbols_.zeMemAllocDevice(context, &device_desc, len, 0, target.handle, &ptr);
      break;
    case MemoryKind::host_alloc:
      call = "zeMemAllocHost";
      result = symbols_.zeMemAllocHost(context, &host_desc, len, 0, &ptr);
      break;
    case MemoryKind::managed:
      call = "zeMemAllocShared";
      result = symbols_.zeMemAllocShared(context, &device_desc, &host_desc, len, 0, target.handle,
                                         &ptr);
      break;
    case MemoryKind::host:
      return make_error(HMR_EINVAL, "ze cannot allocate memory of kind host: it allocates "
                        "device_only, managed or host_alloc memory");
  }
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "%s(%zu bytes) on ze device 0x%" PRIx64 " failed: %s",
                      call, len, device.value, describe_ze_result(result).c_str());
  }
  return ptr;
}

Status ZeIface::mem_free(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (ptr == nullptr) return make_error(HMR_EINVAL, "ze free of a null pointer");
  Result<Owner> owner = owner_of(ptr);
  if (!owner.ok() && owner.status().code() == HMR_ENOENT) {
    return make_error(HMR_EINVAL, "ze free: %p is not Level Zero memory", ptr);
  }
  if (!owner.ok()) return Status(owner.status().code(), "ze free: " + owner.status().reason());
  ze_context_handle_t context = drivers_[owner->driver].context;
  void* base = nullptr;
  size_t size = 0;
  ze_result_t result = symbols_.zeMemGetAddressRange(context, ptr, &base, &size);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "ze free of %p: zeMemGetAddressRange failed: %s", ptr,
                      describe_ze_result(result).c_str());
  }
  if (base != ptr) {
    return make_error(HMR_EINVAL, "ze free of %p: not the start of its allocation [%p, +%zu)", ptr,
                      base, size);
  }
  result = symbols_.zeMemFree(context, ptr);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeMemFree(%p) failed: %s", ptr,
                      describe_ze_result(result).c_str());
  }
  return ok_status();
}

}  // namespace hmr::ze
