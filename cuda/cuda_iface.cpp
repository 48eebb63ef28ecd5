#include "cuda/cuda_iface.h"

#include <cinttypes>
#include <cstdio>
#include <unistd.h>
#include <utility>

#include "cuda/cuda_error.h"
#include "cuda/cuda_mapped_range.h"
#include "hmem/page_range.h"
#include "hmem/peer_direct.h"
#include "util/fork_generation.h"
#include "util/log.h"

namespace hmr::cuda {

using hmem::Capability;
using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::DmabufFd;
using hmem::MemoryKind;
using hmem::MemoryRange;
using hmem::PointerInfo;

Status CudaIface::init() {
  if (library_.has_value()) return ok_status();

  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load("CUDA", kCudaDefaultLibrary, cuda_symbol_specs());
  if (!table.ok()) {
    // The table classified (and logged) the failure; say which iface it disables.
    return Status(table.status().code(), "cuda iface unavailable: " + table.status().reason());
  }
  CudaSymbols symbols;
  bind_cuda_symbols(*table, symbols);
  const char* path = table->path().c_str();

  CUresult result = symbols.cuInit(0);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result), "cuda iface unavailable: cuInit(0) in '%s' failed: %s",
                      path, describe_cuda_error(symbols, result).c_str());
  }
  int version = 0;
  result = symbols.cuDriverGetVersion(&version);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result),
                      "cuda iface unavailable: cuDriverGetVersion in '%s' failed: %s", path,
                      describe_cuda_error(symbols, result).c_str());
  }
  int count = 0;
  result = symbols.cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result),
                      "cuda iface unavailable: cuDeviceGetCount in '%s' failed: %s", path,
                      describe_cuda_error(symbols, result).c_str());
  }

  symbols_ = symbols;
  init_fork_generation_ = fork_generation();
  device_count_ = count;
  driver_version_ = version;
  bus_ids_.clear();
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    // A device whose identity cannot be read still works; it only has no sys_dev.
    bus_ids_.push_back(symbols_.cuDeviceGet(&device, ordinal) == CUDA_SUCCESS ? pci_bus_id(device)
                                                                               : std::string());
  }
  library_ = std::move(*table);
  contexts_.reset(&symbols_, count);
  log_message(LogLevel::debug, "cuda iface: '%s', driver %d, %d device(s)",
              library_->path().c_str(), version, count);
  return ok_status();
}

std::string CudaIface::library_path() const {
  return library_.has_value() ? library_->path() : std::string();
}

std::string CudaIface::runtime_version() const {
  if (!library_.has_value()) return {};
  // cuDriverGetVersion reports 1000 * major + 10 * minor.
  return std::to_string(driver_version_ / 1000) + "." + std::to_string(driver_version_ % 1000 / 10);
}

Status CudaIface::check_initialized() const {
  if (library_.has_value()) return ok_status();
  return make_error(HMR_EINVAL, "cuda iface used before a successful init()");
}

Result<int> CudaIface::device_count() {
  HMR_RETURN_IF_ERROR(check_initialized());
  return device_count_;
}

std::string CudaIface::pci_bus_id(CUdevice device) const {
  int domain = 0;
  int bus = 0;
  int slot = 0;
  if (symbols_.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device) !=
          CUDA_SUCCESS ||
      symbols_.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device) != CUDA_SUCCESS ||
      symbols_.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device) !=
          CUDA_SUCCESS) {
    return {};
  }
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", static_cast<unsigned>(domain),
                static_cast<unsigned>(bus), static_cast<unsigned>(slot));
  return text;
}

Status CudaIface::identity_at(const void* ptr, size_t len, Identity& found) {
  if (!library_.has_value()) return check_initialized();
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (len == 0 || address + len < address) {
    return make_error(HMR_EINVAL, "cuda query of [%p, +%zu): empty or wrapping range", ptr, len);
  }

  // One call for every attribute: it reports "not CUDA memory" as memory type 0 instead of an
  // error, so a host pointer costs no error path in the driver.
  unsigned int is_managed = 0;  // the driver writes a bool; zeroed so any width reads right
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* data[] = {&found.memory_type, &found.ordinal, &found.buffer_id, &is_managed};
  CUresult result = symbols_.cuPointerGetAttributes(4, attributes, data, address);
  if (result != CUDA_SUCCESS) {
    // A child forked from the process that initialised the driver (a data loader's worker):
    // the driver answers nothing there, and nothing in the child is CUDA memory it could
    // use, so every pointer is someone else's (host memory, to the system iface).
    if (result == CUDA_ERROR_NOT_INITIALIZED && fork_generation() != init_fork_generation_) {
      return not_its_memory("the CUDA driver belongs to the parent of this forked process");
    }
    // Otherwise fail closed: an unanswered question is not "host memory".
    return make_error(hmr_code_for(result), "cuPointerGetAttributes(%p) failed: %s", ptr,
                      describe_cuda_error(symbols_, result).c_str());
  }
  if (found.memory_type == 0) return not_its_memory("not CUDA memory");

  found.kind = MemoryKind::device_only;
  if (is_managed != 0 || found.memory_type == CU_MEMORYTYPE_UNIFIED) {
    found.kind = MemoryKind::managed;
  } else if (found.memory_type == CU_MEMORYTYPE_HOST) {
    found.kind = MemoryKind::host_alloc;
  } else if (found.memory_type != CU_MEMORYTYPE_DEVICE) {
    return make_error(HMR_EOPNOTSUPP, "%p is CUDA memory of type %u (array), which hmr cannot "
                      "register", ptr, found.memory_type);
  }
  if (found.ordinal < 0 || found.ordinal >= device_count_) {
    return make_error(HMR_EIO, "%p is CUDA memory but the driver names device %d of %d", ptr,
                      found.ordinal, device_count_);
  }
  return ok_status();
}

Status CudaIface::identify(const void* ptr, size_t len, hmem::AllocationIdentity& out) {
  Identity found;
  Status asked = identity_at(ptr, len, found);
  if (!asked.ok()) return asked;
  // The BUFFER_ID of the segment at ptr: query()'s alloc_id for a range in one segment.
  out = {HMR_HMEM_CUDA, static_cast<uint64_t>(found.ordinal), found.buffer_id, found.kind};
  return asked;
}

Result<PointerInfo> CudaIface::query(const void* ptr, size_t len) {
  Identity found;
  HMR_RETURN_IF_ERROR(identity_at(ptr, len, found));
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const MemoryKind kind = found.kind;
  const int ordinal = found.ordinal;
  CUresult result = CUDA_SUCCESS;

  FirstSegment first;
  first.memory_type = found.memory_type;
  first.managed = kind == MemoryKind::managed;
  first.ordinal = ordinal;
  first.buffer_id = found.buffer_id;
  SegmentLookup lookup = mapping_attributes_.load(std::memory_order_relaxed)
                             ? SegmentLookup::attributes
                             : SegmentLookup::address_range;
  if (lookup == SegmentLookup::attributes) {
    result = segment_at(symbols_, lookup, address, &first.base, &first.size);
    if (result == CUDA_ERROR_INVALID_VALUE) {
      // A driver without the mapping attributes: cuMemGetAddressRange from now on.
      mapping_attributes_.store(false, std::memory_order_relaxed);
      log_message(LogLevel::debug, "cuda: the driver refuses the MAPPING_BASE_ADDR/SIZE pointer "
                  "attributes; segments are found with cuMemGetAddressRange");
      lookup = SegmentLookup::address_range;
    }
  }
  // cuMemGetAddressRange needs a current context: the caller's, or the device's primary one for
  // the rest of the query (the walk over VMM segments uses it too).
  std::optional<ScopedCurrentContext> context;
  if (lookup == SegmentLookup::address_range) {
    Result<ScopedCurrentContext> entered = any_current_context(ordinal);
    if (!entered.ok()) return entered.status();
    context.emplace(std::move(*entered));
    result = segment_at(symbols_, lookup, address, &first.base, &first.size);
  }
  if (result != CUDA_SUCCESS) {
    // (Named: with the attributes refused, this is cuMemGetAddressRange's failure.)
    return make_error(hmr_code_for(result), "finding the cuda segment of %p (device %d): %s "
                      "failed: %s", ptr, ordinal, lookup_name(lookup),
                      describe_cuda_error(symbols_, result).c_str());
  }
  // For VMM memory the segment may be only part of the range; cover it segment by segment.
  Result<MappedRange> mapped = cover_requested_range(symbols_, lookup, address, len, first);
  if (!mapped.ok()) return mapped.status();

  PointerInfo info;
  info.iface = HMR_HMEM_CUDA;
  info.device = DeviceId{static_cast<uint64_t>(ordinal)};
  info.base = mapped->base;
  info.alloc_len = mapped->length;
  info.kind = kind;
  info.alloc_id = mapped->alloc_id;
  info.pieces = std::move(mapped->pieces);
  info.sys_dev = bus_ids_[static_cast<size_t>(ordinal)];
  return info;
}

Result<ScopedCurrentContext> CudaIface::any_current_context(int ordinal) {
  return ScopedCurrentContext::ensure(symbols_, [&] { return contexts_.get(ordinal); });
}

void CudaIface::order_copies_for_nic(const PointerInfo& memory) {
  if (symbols_.cuPointerSetAttribute == nullptr || memory.kind == MemoryKind::managed ||
      !check_initialized().ok()) {
    return;
  }
  const int ordinal = static_cast<int>(memory.device.value);
  Result<ScopedCurrentContext> context = any_current_context(ordinal);  // (INVALID_CONTEXT else)
  if (!context.ok()) return;
  const unsigned int sync = 1;
  const CUresult result = symbols_.cuPointerSetAttribute(
      &sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, static_cast<CUdeviceptr>(memory.base));
  if (result != CUDA_SUCCESS) {
    log_message(LogLevel::debug,
                "cuda: SYNC_MEMOPS not set on %p (%s): a synchronous copy into it may return "
                "before its bytes are there for the NIC",
                reinterpret_cast<void*>(memory.base), describe_cuda_error(symbols_, result).c_str());
  }
}

Result<DmabufExport> CudaIface::export_dmabuf(MemoryRange range) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (symbols_.cuMemGetHandleForAddressRange == nullptr) {
    return make_error(HMR_EOPNOTSUPP,
                      "cuda dma-buf export unavailable: '%s' has no "
                      "cuMemGetHandleForAddressRange (needs a CUDA 11.7 or newer driver)",
                      library_->path().c_str());
  }
  Result<PointerInfo> info = query(range.address, range.length);
  if (!info.ok()) return info.status();
  if (info->kind == MemoryKind::managed) {
    return make_error(HMR_EOPNOTSUPP,
                      "%p is CUDA managed memory: its pages migrate, so it is never exported as "
                      "dma-buf",
                      range.address);
  }

  // The driver wants host-page-aligned address and size; the NIC gets the offset of the
  // requested bytes inside the exported pages.
  const hmem::PageRange pages =
      hmem::page_round(reinterpret_cast<uintptr_t>(range.address), range.length,
                       hmem::host_page_size());
  Result<ScopedCurrentContext> context =
      any_current_context(static_cast<int>(info->device.value));
  if (!context.ok()) return context.status();
  int fd = -1;
  unsigned long long flags = CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE;
  CUresult result = symbols_.cuMemGetHandleForAddressRange(
      &fd, pages.start, pages.length, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, flags);
  if (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_NOT_SUPPORTED) {
    // Drivers before 12.8 do not know the PCIe mapping flag, and some systems refuse it.
    log_message(LogLevel::debug,
                "cuda dma-buf export of [0x%" PRIxPTR ", +%zu) with the PCIe mapping flag "
                "failed (%s); retrying without it",
                pages.start, pages.length, describe_cuda_error(symbols_, result).c_str());
    flags = 0;
    fd = -1;
    result = symbols_.cuMemGetHandleForAddressRange(&fd, pages.start, pages.length,
                                                    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, flags);
  }
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result),
                      "cuMemGetHandleForAddressRange(0x%" PRIxPTR
                      ", %zu, DMA_BUF_FD, flags 0x%llx) on cuda device %llu failed: %s",
                      pages.start, pages.length, flags,
                      static_cast<unsigned long long>(info->device.value),
                      describe_cuda_error(symbols_, result).c_str());
  }
  if (fd < 0) {
    return make_error(HMR_EIO, "cuMemGetHandleForAddressRange succeeded but gave fd %d", fd);
  }

  DmabufExport exported;
  exported.fd = DmabufFd(fd);
  exported.offset = pages.offset;
  exported.len = range.length;
  exported.exported_len = pages.length;
  return exported;
}

Capability CudaIface::dmabuf_capability(int ordinal, CUdevice device) const {
  if (symbols_.cuMemGetHandleForAddressRange == nullptr) {
    return Capability::no("the driver '" + library_->path() +
                          "' has no cuMemGetHandleForAddressRange (needs CUDA 11.7 or newer)");
  }
  int supported = 0;
  CUresult result =
      symbols_.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device);
  if (result != CUDA_SUCCESS) {
    return Capability::no("cuDeviceGetAttribute(DMA_BUF_SUPPORTED) for device " +
                          std::to_string(ordinal) +
                          " failed: " + describe_cuda_error(symbols_, result));
  }
  if (supported == 0) {
    return Capability::no(
        "device " + std::to_string(ordinal) +
        " reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0 (dma-buf needs the open "
        "kernel module and a kernel with dma-buf support)");
  }
  return Capability::yes();
}

Capability CudaIface::peer_direct_capability(int ordinal, CUdevice device) const {
  int supported = 0;
  CUresult result = symbols_.cuDeviceGetAttribute(
      &supported, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, device);
  if (result != CUDA_SUCCESS) {
    return Capability::no("cuDeviceGetAttribute(GPU_DIRECT_RDMA_SUPPORTED) for device " +
                          std::to_string(ordinal) +
                          " failed: " + describe_cuda_error(symbols_, result));
  }
  if (supported == 0) {
    return Capability::no("device " + std::to_string(ordinal) +
                          " reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 0");
  }
  // The device can; the NIC can reach its memory by VA only through a kernel peer-memory
  // client.  Whether a given NIC and GPU share a PCIe path is for the NIC's own probe.
  hmem::PeerDirectReport clients = hmem::probe_peer_direct(sysfs_root_);
  if (!clients.available) {
    return Capability::no("device " + std::to_string(ordinal) + " supports GPUDirect RDMA, but " +
                          clients.reason);
  }
  return Capability::yes();
}

Result<DeviceCapabilities> CudaIface::capabilities(DeviceId device) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL, "cuda device %llu does not exist (this process sees %d)",
                      static_cast<unsigned long long>(device.value), device_count_);
  }
  const int ordinal = static_cast<int>(device.value);
  CUdevice handle = 0;
  CUresult result = symbols_.cuDeviceGet(&handle, ordinal);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result), "cuDeviceGet(%d) failed: %s", ordinal,
                      describe_cuda_error(symbols_, result).c_str());
  }
  DeviceCapabilities caps;
  caps.device = device;
  caps.dmabuf = dmabuf_capability(ordinal, handle);
  caps.peer_direct = peer_direct_capability(ordinal, handle);
  caps.ipc = Capability::no("CUDA IPC export is not implemented in this hmr build");
  caps.sys_dev = bus_ids_[static_cast<size_t>(ordinal)];
  return caps;
}

}  // namespace hmr::cuda
