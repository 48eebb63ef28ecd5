#include "synapseai/synapseai_iface.h"

#include <fcntl.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <new>
#include <utility>

#include "hmem/page_range.h"
#include "synapseai/hbm_pool_dmabuf.h"
#include "synapseai/hccl_dmabuf.h"
#include "synapseai/hlthunk_device.h"
#include "synapseai/synapseai_error.h"
#include "util/environment.h"
#include "util/log.h"

namespace hmr::synapseai {

using hmem::Capability;
using hmem::DeviceCapabilities;
using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::DmabufFd;
using hmem::MemoryKind;
using hmem::MemoryRange;
using hmem::PointerInfo;

namespace {

bool empty_or_wrapping(uintptr_t address, size_t len) {
  return len == 0 || address + len < address;
}

// The flags perftest exports Gaudi memory with: the NIC reads and writes it, and the fd must not
// leak into children.
constexpr uint32_t kExportFlags = O_RDWR | O_CLOEXEC;

}  // namespace

SynapseaiIface::~SynapseaiIface() {
  allocations_.clear();  // unmap + free each, while the device is still open
  unfreed_.clear();      // free each again; a refusal is logged (closing the device frees it)
  const int fd = device_fd_.exchange(-1);
  if (fd >= 0) {
    errno = 0;
    const int rc = hlthunk_.hlthunk_close(fd);
    if (rc != 0) {
      const int error = hlthunk_errno(rc, errno);
      log_message(LogLevel::warn, "synapseai iface shutdown: hlthunk_close(%d) failed: %s", fd,
                  describe_errno(error).c_str());
    }
  }
}

Status SynapseaiIface::init() {
  if (synapse_library_.has_value()) return ok_status();

  Result<hmem::SymbolTable> synapse =
      hmem::SymbolTable::load("SYNAPSEAI", kSynapseDefaultLibrary, synapse_symbol_specs());
  if (!synapse.ok()) {
    return Status(synapse.status().code(),
                  "synapseai iface unavailable: " + synapse.status().reason());
  }
  // hl-thunk and SCAL are optional: without hl-thunk hmr_mem_alloc says why it cannot, and
  // without either, memory the application allocated is exported only through HCCL, where
  // the application allows that.
  Result<hmem::SymbolTable> hlthunk =
      hmem::SymbolTable::load("HLTHUNK", kHlthunkDefaultLibrary, hlthunk_symbol_specs());
  Result<hmem::SymbolTable> scal =
      hmem::SymbolTable::load("SCAL", kScalDefaultLibrary, scal_symbol_specs());
  Result<bool> hccl_dmabuf_allowed = core::env_bool(kHcclDmabufVariable, false);
  if (!hccl_dmabuf_allowed.ok()) {
    return Status(hccl_dmabuf_allowed.status().code(),
                  "synapseai iface unavailable: " + hccl_dmabuf_allowed.status().reason());
  }
  SynapseSymbols symbols;
  bind_synapse_symbols(*synapse, symbols);
  const char* path = synapse->path().c_str();

  // A second synInitialize in a process whose application already called it changes nothing
  // and succeeds, or, with HABANA_DISABLE_DOUBLE_SYN_INITIALIZE set, answers
  // synAlreadyInitialized (synapse_api.h): initialised either way.  (That setting also makes
  // the application's own call fail if hmr's came first: docs/vendors.md.)
  synStatus status = symbols.synInitialize();
  if (status != synSuccess && status != synAlreadyInitialized) {
    return make_error(hmr_code_for(status),
                      "synapseai iface unavailable: synInitialize in '%s' failed: %s", path,
                      describe_syn_status(status).c_str());
  }
  uint32_t count = 0;
  status = symbols.synDeviceGetCount(&count);
  if (status != synSuccess) {
    return make_error(hmr_code_for(status),
                      "synapseai iface unavailable: synDeviceGetCount in '%s' failed: %s", path,
                      describe_syn_status(status).c_str());
  }
  if (count > static_cast<uint32_t>(INT_MAX)) {
    return make_error(HMR_EIO, "synapseai iface unavailable: '%s' reports %" PRIu32 " devices",
                      path, count);
  }
  char version[256] = {};
  if (symbols.synDriverGetVersion == nullptr ||
      symbols.synDriverGetVersion(version, static_cast<int>(sizeof version)) != synSuccess) {
    version[0] = '\0';
  }
  version[sizeof version - 1] = '\0';

  synapse_ = symbols;
  device_count_ = static_cast<int>(count);
  version_ = version;
  synapse_library_ = std::move(*synapse);
  if (hlthunk.ok()) {
    bind_hlthunk_symbols(*hlthunk, hlthunk_);
    hlthunk_library_ = std::move(*hlthunk);
  } else {
    hlthunk_missing_ = hlthunk.status();
  }
  if (scal.ok()) {
    bind_scal_symbols(*scal, scal_);
    scal_library_ = std::move(*scal);
  } else {
    scal_missing_ = scal.status();
  }
  hccl_dmabuf_allowed_ = *hccl_dmabuf_allowed;
  log_message(LogLevel::debug, "synapseai iface: '%s' (driver %s), %s, %s, %d device(s)",
              synapse_library_->path().c_str(), version_.empty() ? "?" : version_.c_str(),
              hlthunk_library_.has_value() ? ("'" + hlthunk_library_->path() + "'").c_str()
                                           : hlthunk_missing_.reason().c_str(),
              scal_library_.has_value() ? ("'" + scal_library_->path() + "'").c_str()
                                        : scal_missing_.reason().c_str(),
              device_count_);
  return ok_status();
}

std::string SynapseaiIface::library_path() const {
  return synapse_library_.has_value() ? synapse_library_->path() : std::string();
}

std::string SynapseaiIface::hlthunk_path() const {
  return hlthunk_library_.has_value() ? hlthunk_library_->path() : std::string();
}

std::string SynapseaiIface::scal_path() const {
  return scal_library_.has_value() ? scal_library_->path() : std::string();
}

std::string SynapseaiIface::runtime_version() const { return version_; }

Status SynapseaiIface::check_initialized() const {
  if (synapse_library_.has_value()) return ok_status();
  return make_error(HMR_EINVAL, "synapseai iface used before a successful init()");
}

Result<int> SynapseaiIface::device_count() {
  HMR_RETURN_IF_ERROR(check_initialized());
  return device_count_;
}

Result<int> SynapseaiIface::open_device() {
  const int current = device_fd_.load(std::memory_order_acquire);
  if (current >= 0) return current;
  if (!hlthunk_library_.has_value()) {
    return make_error(HMR_ENOSYS,
                      "hmr allocates Gaudi memory through hl-thunk, which could not be loaded: %s",
                      hlthunk_missing_.reason().c_str());
  }
  // One opener at a time: Gaudi devices are exclusive, so a second thread's open while the
  // first one's is not yet published read as busy and failed (EBUSY) a moment before the
  // device was there to share.  A cold path, once per process.
  const std::lock_guard<std::mutex> opening(open_mutex_);
  const int opened_meanwhile = device_fd_.load(std::memory_order_acquire);
  if (opened_meanwhile >= 0) return opened_meanwhile;
  Result<int> opened = open_own_device(hlthunk_, hlthunk_library_->path(), device_count_);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  device_fd_.store(fd, std::memory_order_release);
  bus_id();  // asked now, while opening is slow anyway
  return fd;
}

std::string SynapseaiIface::bus_id() const {
  if (const std::string* known = bus_id_.get()) return *known;
  const int fd = device_fd_.load(std::memory_order_acquire);
  if (fd < 0) return {};
  if (hlthunk_.hlthunk_get_pci_bus_id_from_fd == nullptr) {
    bus_id_.keep(std::string());  // this hl-thunk cannot say, now or later
    return {};
  }
  char text[32] = {};
  if (hlthunk_.hlthunk_get_pci_bus_id_from_fd(fd, text, static_cast<int>(sizeof text)) != 0) {
    return {};  // asked again at the next question
  }
  text[sizeof text - 1] = '\0';
  const std::string answer = text;
  bus_id_.keep(answer);
  return answer;
}

Result<SynapseaiIface::MemorySpan> SynapseaiIface::memory_for_range(const void* ptr, size_t len,
                                                                    const char* what) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::optional<MemorySpan> span = allocations_.find(address);
  if (!span.has_value()) {
    return make_error(HMR_ENOENT,
                      "%s: %p is not Gaudi memory hmr allocated (SynapseAI has no pointer "
                      "query; declare memory the application allocated with iface SYNAPSEAI)",
                      what, ptr);
  }
  if (address + len > span->base + span->len) {
    return make_error(HMR_EINVAL,
                      "%s: [%p, +%zu) is not inside one Gaudi allocation: it is [0x%" PRIxPTR
                      ", +%zu)",
                      what, ptr, len, span->base, span->len);
  }
  return *span;
}

Result<PointerInfo> SynapseaiIface::query(const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (empty_or_wrapping(reinterpret_cast<uintptr_t>(ptr), len)) {
    return make_error(HMR_EINVAL, "synapseai query of [%p, +%zu): empty or wrapping range", ptr,
                      len);
  }
  Result<MemorySpan> span = memory_for_range(ptr, len, "synapseai query");
  if (!span.ok()) return span.status();

  PointerInfo info;
  info.iface = HMR_HMEM_SYNAPSEAI;
  info.device = DeviceId{0};
  info.base = span->base;
  info.alloc_len = span->len;
  info.kind = MemoryKind::device_only;
  info.alloc_id = span->alloc_id;
  info.sys_dev = bus_id();
  return info;
}

Result<DmabufExport> SynapseaiIface::export_dmabuf(MemoryRange range) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(range.address);
  if (empty_or_wrapping(address, range.length)) {
    return make_error(HMR_EINVAL,
                      "synapseai dma-buf export of [%p, +%zu): empty or wrapping range",
                      range.address, range.length);
  }
  Result<MemorySpan> own =
      memory_for_range(range.address, range.length, "synapseai dma-buf export");
  if (own.ok()) return export_own(*own, address, range.length);
  if (own.status().code() != HMR_ENOENT) return own.status();
  return export_declared(address, range.length);
}

Result<DmabufExport> SynapseaiIface::export_own(const MemorySpan& span, uintptr_t address,
                                               size_t length) {
  if (hlthunk_.hlthunk_device_mapped_memory_export_dmabuf_fd == nullptr) {
    return make_error(HMR_EOPNOTSUPP,
                      "synapseai dma-buf export unavailable: '%s' lacks "
                      "hlthunk_device_mapped_memory_export_dmabuf_fd (Gaudi2 or newer with a "
                      "matching hl-thunk)",
                      hlthunk_library_->path().c_str());
  }
  // Memory hmr allocated exists only once the device is open.
  const int device = device_fd_.load(std::memory_order_acquire);
  // The driver names a mapping only by its exact start and takes the range as an offset into
  // it (habanalabs memory.c export_dmabuf_from_addr, validate_export_params); hmr's mappings
  // start on a host page, so the page range's offset is page-aligned as the driver wants.
  const hmem::PageRange pages = hmem::page_round(address, length, hmem::host_page_size());
  const uint64_t offset = pages.start - span.base;
  errno = 0;
  const int fd = hlthunk_.hlthunk_device_mapped_memory_export_dmabuf_fd(
      device, span.base, pages.length, offset, kExportFlags);
  if (fd < 0) {
    const int error = hlthunk_errno(fd, errno);
    return make_error(hmr_code_for_errno(error),
                      "hlthunk_device_mapped_memory_export_dmabuf_fd(0x%" PRIxPTR ", %zu, offset "
                      "0x%" PRIx64 ", O_RDWR|O_CLOEXEC) failed: %s",
                      span.base, pages.length, offset, describe_errno(error).c_str());
  }
  DmabufExport exported;
  exported.fd = DmabufFd(fd);
  exported.offset = pages.offset;
  exported.len = length;
  exported.exported_len = pages.length;
  return exported;
}

Result<DmabufExport> SynapseaiIface::export_declared(uintptr_t address, size_t length) {
  if (can_export_from_hbm_pool()) {
    return export_from_hbm_pool(HbmPoolExporter{&synapse_, &hlthunk_, &scal_}, address, length);
  }
  if (can_export_through_hccl()) {
    return export_through_hccl(synapse_, synapse_library_->path(), address, length);
  }
  return make_error(HMR_EOPNOTSUPP,
                    "synapseai dma-buf export of 0x%" PRIxPTR ": it is not memory hmr "
                    "allocated, and %s",
                    address, why_declared_memory_cannot_export().c_str());
}

bool SynapseaiIface::can_export_from_hbm_pool() const {
  return synapse_.synDeviceGetInfoV2 != nullptr && scal_library_.has_value() &&
         hlthunk_.hlthunk_device_mapped_memory_export_dmabuf_fd != nullptr;
}

bool SynapseaiIface::can_export_through_hccl() const {
  return hccl_dmabuf_allowed_ && synapse_.hcclLookupDMABuff != nullptr;
}

std::string SynapseaiIface::why_declared_memory_cannot_export() const {
  std::string lacking;
  if (synapse_.synDeviceGetInfoV2 == nullptr) {
    lacking = "'" + synapse_library_->path() + "' lacks synDeviceGetInfoV2";
  } else if (!hlthunk_library_.has_value()) {
    lacking = "hl-thunk could not be loaded (" + hlthunk_missing_.reason() + ")";
  } else if (hlthunk_.hlthunk_device_mapped_memory_export_dmabuf_fd == nullptr) {
    lacking = "'" + hlthunk_library_->path() +
              "' lacks hlthunk_device_mapped_memory_export_dmabuf_fd (Gaudi2 or newer)";
  } else {
    lacking = "SCAL could not be loaded (" + scal_missing_.reason() + ")";
  }
  std::string hccl = synapse_.hcclLookupDMABuff == nullptr
                         ? "; '" + synapse_library_->path() + "' lacks hcclLookupDMABuff too"
                         : std::string("; HCCL's own dma-buf is used only with ") +
                               kHcclDmabufVariable + "=1, in a process whose HCCL has a "
                               "communicator with gaudi-direct (before one, HCCL's lookup "
                               "crashes)";
  return lacking + hccl;
}

Result<DeviceCapabilities> SynapseaiIface::capabilities(DeviceId device) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL, "synapseai device %llu does not exist (this host has %d)",
                      static_cast<unsigned long long>(device.value), device_count_);
  }
  const std::string name = "device " + std::to_string(device.value);
  const bool own_export = hlthunk_.hlthunk_device_mapped_memory_export_dmabuf_fd != nullptr;
  const bool declared_export = can_export_from_hbm_pool() || can_export_through_hccl();
  DeviceCapabilities caps;
  caps.device = device;
  if (device.value == 0) caps.sys_dev = bus_id();  // known once hl-thunk has opened the device
  if (declared_export || (device.value == 0 && own_export)) {
    caps.dmabuf = Capability::yes();
  } else {
    caps.dmabuf = Capability::no(name + ": for memory the application allocated, " +
                                 why_declared_memory_cannot_export() +
                                 (device.value == 0 ? ""
                                                    : "; hmr allocates and exports its own "
                                                      "memory only on device 0"));
  }
  caps.peer_direct = Capability::no(name + ": hmr hands Gaudi memory to NICs only as dma-buf");
  caps.ipc = Capability::no(name +
                            ": sharing Gaudi memory between processes is not implemented in this "
                            "hmr build");
  return caps;
}

Status SynapseaiIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  (void)device_dst, (void)host_src, (void)len;
  return make_error(HMR_EOPNOTSUPP,
                    "synapseai memory interface does not support copies to the device: SynapseAI "
                    "copies run on a stream of an acquired device (synMemCopyAsync), and hmr "
                    "acquires none");
}

Status SynapseaiIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  (void)host_dst, (void)device_src, (void)len;
  return make_error(HMR_EOPNOTSUPP,
                    "synapseai memory interface does not support copies from the device: "
                    "SynapseAI copies run on a stream of an acquired device (synMemCopyAsync), "
                    "and hmr acquires none");
}

Status SynapseaiIface::host_register(void* ptr, size_t len) {
  (void)ptr, (void)len;
  return make_error(HMR_EOPNOTSUPP,
                    "synapseai memory interface does not support host registration: SynapseAI "
                    "maps host memory for an acquired device (synHostMap), and hmr acquires none");
}

Status SynapseaiIface::host_unregister(void* ptr) {
  (void)ptr;
  return make_error(HMR_EOPNOTSUPP,
                    "synapseai memory interface does not support host unregistration: it has no "
                    "host registration");
}

Result<void*> SynapseaiIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (kind != MemoryKind::device_only) {
    return make_error(HMR_EOPNOTSUPP,
                      "synapseai mem_alloc makes device memory (device_only) only, not %s",
                      hmem::memory_kind_name(kind));
  }
  const size_t page = hmem::host_page_size();
  if (len == 0 || len > SIZE_MAX - page) {
    return make_error(HMR_EINVAL, "synapseai mem_alloc of %zu bytes: empty or too large", len);
  }
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL,
                      "synapseai mem_alloc on device %llu: it does not exist (this host has %d)",
                      static_cast<unsigned long long>(device.value), device_count_);
  }
  if (device.value != 0) {
    return make_error(HMR_EOPNOTSUPP,
                      "synapseai mem_alloc on device %llu: hmr allocates only on device 0, the "
                      "one hl-thunk opens for it",
                      static_cast<unsigned long long>(device.value));
  }
  Result<int> fd = open_device();
  if (!fd.ok()) return fd.status();
  const size_t size = hmem::page_round(0, len, page).length;

  // As perftest: the driver's default page size, physically contiguous, not shared.
  errno = 0;
  const uint64_t handle = hlthunk_.hlthunk_device_memory_alloc(*fd, size, 0, true, false);
  if (handle == 0) {
    const int error = hlthunk_errno(0, errno);
    return make_error(hmr_code_for_errno(error), "hlthunk_device_memory_alloc(%zu) failed: %s",
                      size, describe_errno(error).c_str());
  }
  // Owned before anything else can fail; released after the lock below is dropped.
  HlthunkMemory memory(hlthunk_, *fd, handle);
  errno = 0;
  const uint64_t va = hlthunk_.hlthunk_device_memory_map(*fd, handle, 0);
  if (va == 0) {
    const int error = hlthunk_errno(0, errno);
    return make_error(hmr_code_for_errno(error),
                      "hlthunk_device_memory_map(handle 0x%" PRIx64 ", %zu bytes) failed: %s",
                      handle, size, describe_errno(error).c_str());
  }
  memory.set_mapping(va);
  if (allocations_.add(static_cast<uintptr_t>(va), size, std::move(memory), {})) {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(va));
  }
  return make_error(HMR_EIO,
                    "hl-thunk mapped new memory at 0x%" PRIx64 " while earlier memory there is "
                    "still mapped",
                    va);
}

Status SynapseaiIface::mem_free(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::optional<MemorySpan> span = allocations_.find(address);
  std::optional<HlthunkMemory> memory = allocations_.take(address);
  if (!memory.has_value() || !span.has_value() || span->base != address) {
    if (std::optional<Status> retried = free_unfreed(address)) return *retried;
    return make_error(HMR_EINVAL, "synapseai mem_free(%p): not the start of memory hmr allocated",
                      ptr);
  }
  Status released = memory->release();  // unmap then free, outside the table's lock
  // A refused unmap (the memory is still exported) leaves it hmr's, under its old identity, to
  // free once the exports are gone: never leaked, never forgotten.
  if (!released.ok() && memory->owns_mapping() &&
      !allocations_.restore(*span, std::move(*memory))) {
    log_message(LogLevel::warn, "synapseai mem_free(%p): memory the driver kept mapped could not "
                "be put back", ptr);
  }
  // A refused free (after the unmap) leaves a handle to allocated memory at no address: kept
  // for the next mem_free of this address.
  if (!released.ok() && !memory->owns_mapping() && memory->owns_handle()) {
    try {
      std::lock_guard<std::mutex> guard(unfreed_mutex_);
      unfreed_.emplace(address, std::move(*memory));
    } catch (const std::bad_alloc&) {
      // (memory's destructor tries the free once more, and logs a refusal)
    }
  }
  return released;
}

std::optional<Status> SynapseaiIface::free_unfreed(uintptr_t address) {
  std::optional<HlthunkMemory> memory;
  {
    std::lock_guard<std::mutex> guard(unfreed_mutex_);
    auto found = unfreed_.find(address);
    if (found == unfreed_.end()) return std::nullopt;
    memory.emplace(std::move(found->second));
    unfreed_.erase(found);
  }
  Status freed = memory->release();  // the free alone: it has no mapping
  if (!freed.ok() && memory->owns_handle()) {
    try {
      std::lock_guard<std::mutex> guard(unfreed_mutex_);
      unfreed_.emplace(address, std::move(*memory));
    } catch (const std::bad_alloc&) {
    }
  }
  return freed;
}

}  // namespace hmr::synapseai
