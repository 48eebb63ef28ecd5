#include "neuron/neuron_iface.h"

#include <sys/types.h>
#include <unistd.h>

#include <cinttypes>
#include <climits>
#include <utility>

#include "hmem/page_range.h"
#include "neuron/neuron_error.h"
#include "util/log.h"

namespace hmr::neuron {

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

// The size of what an exported fd covers.  dma-buf fds answer SEEK_END with their size; the
// position is put back so nothing that reads the fd later sees a moved offset.
std::optional<size_t> fd_size(int fd) {
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return std::nullopt;
  (void)::lseek(fd, 0, SEEK_SET);
  return static_cast<size_t>(end);
}

}  // namespace

Status NeuronIface::init() {
  if (library_.has_value()) return ok_status();

  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load("NEURON", kNeuronDefaultLibrary, nrt_symbol_specs());
  if (!table.ok()) {
    return Status(table.status().code(), "neuron iface unavailable: " + table.status().reason());
  }
  NrtSymbols symbols;
  bind_nrt_symbols(*table, symbols);
  const char* path = table->path().c_str();

  // Never nrt_init: it opens the visible NeuronCores for this process, and a NeuronCore serves
  // one process at a time, so calling it would take the cores from the application (libfabric
  // never calls it either).  The count is readable before nrt_init; the application
  // initialises the runtime before it allocates memory to register.
  uint32_t count = 0;
  const NRT_STATUS status = symbols.nrt_get_visible_vnc_count(&count);
  if (status != NRT_SUCCESS) {
    return make_error(hmr_code_for(status),
                      "neuron iface unavailable: nrt_get_visible_vnc_count in '%s' failed: %s",
                      path, describe_nrt_status(symbols, status).c_str());
  }
  if (count > static_cast<uint32_t>(INT_MAX)) {
    return make_error(HMR_EIO, "neuron iface unavailable: '%s' reports %" PRIu32 " NeuronCores",
                      path, count);
  }
  std::string version;
  NrtVersion reported;
  if (symbols.nrt_get_version != nullptr &&
      symbols.nrt_get_version(&reported, sizeof reported) == NRT_SUCCESS) {
    version = std::to_string(reported.rt_major) + "." + std::to_string(reported.rt_minor) + "." +
              std::to_string(reported.rt_patch);
  }

  symbols_ = symbols;
  device_count_ = static_cast<int>(count);
  version_ = std::move(version);
  library_ = std::move(*table);
  log_message(LogLevel::debug,
              "neuron iface: '%s', runtime %s, %d visible NeuronCore(s), dma-buf %s",
              library_->path().c_str(), version_.empty() ? "?" : version_.c_str(), device_count_,
              symbols_.nrt_get_dmabuf_fd_v2 != nullptr ? "v2"
              : symbols_.nrt_get_dmabuf_fd != nullptr  ? "v1"
                                                       : "none");
  return ok_status();
}

std::string NeuronIface::library_path() const {
  return library_.has_value() ? library_->path() : std::string();
}

std::string NeuronIface::runtime_version() const { return version_; }

Status NeuronIface::check_initialized() const {
  if (library_.has_value()) return ok_status();
  return make_error(HMR_EINVAL, "neuron iface used before a successful init()");
}

Result<int> NeuronIface::device_count() {
  HMR_RETURN_IF_ERROR(check_initialized());
  return device_count_;
}

Result<NeuronIface::TensorSpan> NeuronIface::tensor_for_range(const void* ptr, size_t len,
                                                               const char* what) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::optional<TensorSpan> span = tensors_.find(address);
  if (!span.has_value()) {
    return make_error(HMR_ENOENT,
                      "%s: %p is not Neuron memory hmr allocated (nrt has no pointer query; "
                      "declare Neuron memory allocated elsewhere with iface NEURON and its vnc "
                      "as device)",
                      what, ptr);
  }
  if (address + len > span->base + span->len) {
    return make_error(HMR_EINVAL,
                      "%s: [%p, +%zu) is not inside one Neuron allocation: vnc %d tensor is "
                      "[0x%" PRIxPTR ", +%zu)",
                      what, ptr, len, span->details.vnc, span->base, span->len);
  }
  return *span;
}

Result<PointerInfo> NeuronIface::query(const void* ptr, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (empty_or_wrapping(reinterpret_cast<uintptr_t>(ptr), len)) {
    return make_error(HMR_EINVAL, "neuron query of [%p, +%zu): empty or wrapping range", ptr, len);
  }
  Result<TensorSpan> span = tensor_for_range(ptr, len, "neuron query");
  if (!span.ok()) return span.status();

  PointerInfo info;
  info.iface = HMR_HMEM_NEURON;
  info.device = DeviceId{static_cast<uint64_t>(span->details.vnc)};
  info.base = span->base;
  info.alloc_len = span->len;
  info.kind = MemoryKind::device_only;
  info.alloc_id = span->alloc_id;
  return info;
}

Result<DmabufExport> NeuronIface::export_dmabuf(MemoryRange range) {
  HMR_RETURN_IF_ERROR(check_initialized());
  const auto address = reinterpret_cast<uintptr_t>(range.address);
  if (empty_or_wrapping(address, range.length)) {
    return make_error(HMR_EINVAL, "neuron dma-buf export of [%p, +%zu): empty or wrapping range",
                      range.address, range.length);
  }
  if (symbols_.nrt_get_dmabuf_fd_v2 == nullptr && symbols_.nrt_get_dmabuf_fd == nullptr) {
    return make_error(HMR_EOPNOTSUPP,
                      "neuron dma-buf export unavailable: '%s' has neither nrt_get_dmabuf_fd_v2 "
                      "nor nrt_get_dmabuf_fd (needs a newer Neuron runtime)",
                      library_->path().c_str());
  }
  // Memory hmr allocated is checked against its tensor; declared memory goes to the runtime
  // as it is, and the runtime is the judge.
  Result<TensorSpan> known = tensor_for_range(range.address, range.length, "neuron dma-buf export");
  if (!known.ok() && known.status().code() != HMR_ENOENT) return known.status();
  if (symbols_.nrt_get_dmabuf_fd_v2 != nullptr) return export_v2(address, range.length);
  return export_v1(address, range.length,
                   known.ok() ? std::optional<TensorSpan>(*known) : std::nullopt);
}

Result<DmabufExport> NeuronIface::export_v2(uintptr_t address, size_t length) {
  const hmem::PageRange pages = hmem::page_round(address, length, kNeuronGranule);
  int fd = -1;
  uint64_t object_offset = 0;
  const NRT_STATUS status =
      symbols_.nrt_get_dmabuf_fd_v2(pages.start, pages.length, &fd, &object_offset);
  DmabufFd owned(fd);  // owned at once: a failing runtime that still gave an fd leaks nothing
  if (status != NRT_SUCCESS) {
    return make_error(hmr_code_for_dmabuf(status),
                      "nrt_get_dmabuf_fd_v2(0x%" PRIxPTR ", %zu) failed: %s%s", pages.start,
                      pages.length, describe_nrt_status(symbols_, status).c_str(),
                      status == NRT_RESOURCE ? "" : " (dma-buf unsupported for this memory)");
  }
  if (!owned.valid()) {
    return make_error(HMR_EIO, "nrt_get_dmabuf_fd_v2 succeeded but gave fd %d", fd);
  }
  DmabufExport exported;
  exported.fd = std::move(owned);
  // The runtime's dma-buf may start before the pages asked for: it says where they begin.
  exported.offset = object_offset + pages.offset;
  exported.len = length;
  exported.exported_len = fd_size(exported.fd.get()).value_or(object_offset + pages.length);
  if (exported.offset + length > exported.exported_len) {
    return make_error(HMR_EIO,
                      "nrt_get_dmabuf_fd_v2(0x%" PRIxPTR ", %zu) gave a dma-buf of %zu bytes "
                      "with the range at offset %" PRIu64 ": it does not cover the range",
                      pages.start, pages.length, exported.exported_len, exported.offset);
  }
  return exported;
}

Result<DmabufExport> NeuronIface::export_v1(uintptr_t address, size_t length,
                                            const std::optional<TensorSpan>& known) {
  // v1 exports only from the start of a dma-buf object, so for a tensor hmr knows the export
  // starts at the tensor and the range lies `address - base` into it.  For declared memory
  // hmr does not know where the object starts; the runtime refuses a VA that is not its start.
  const hmem::PageRange pages = hmem::page_round(address, length, kNeuronGranule);
  const uintptr_t start = known.has_value() ? known->base : pages.start;
  const size_t size = pages.start + pages.length - start;
  int fd = -1;
  const NRT_STATUS status = symbols_.nrt_get_dmabuf_fd(start, size, &fd);
  DmabufFd owned(fd);
  if (status != NRT_SUCCESS) {
    if (known.has_value() || status == NRT_RESOURCE) {
      return make_error(hmr_code_for_dmabuf(status),
                        "nrt_get_dmabuf_fd(0x%" PRIxPTR ", %zu) failed: %s", start, size,
                        describe_nrt_status(symbols_, status).c_str());
    }
    return make_error(hmr_code_for_dmabuf(status),
                      "nrt_get_dmabuf_fd(0x%" PRIxPTR ", %zu) failed: %s; '%s' lacks "
                      "nrt_get_dmabuf_fd_v2, and nrt_get_dmabuf_fd exports only from the start "
                      "of a Neuron allocation: register from the allocation's start, or "
                      "allocate through hmr",
                      start, size, describe_nrt_status(symbols_, status).c_str(),
                      library_->path().c_str());
  }
  if (!owned.valid()) {
    return make_error(HMR_EIO, "nrt_get_dmabuf_fd succeeded but gave fd %d", fd);
  }
  DmabufExport exported;
  exported.fd = std::move(owned);
  exported.offset = address - start;
  exported.len = length;
  exported.exported_len = fd_size(exported.fd.get()).value_or(size);
  if (exported.offset + length > exported.exported_len) {
    return make_error(HMR_EIO,
                      "nrt_get_dmabuf_fd(0x%" PRIxPTR ", %zu) gave a dma-buf of %zu bytes: it "
                      "does not cover the range at offset %" PRIu64,
                      start, size, exported.exported_len, exported.offset);
  }
  return exported;
}

Result<DeviceCapabilities> NeuronIface::capabilities(DeviceId device) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL, "neuron vnc %llu does not exist (this process sees %d)",
                      static_cast<unsigned long long>(device.value), device_count_);
  }
  const std::string vnc = "vnc " + std::to_string(device.value);
  DeviceCapabilities caps;
  caps.device = device;
  if (symbols_.nrt_get_dmabuf_fd_v2 != nullptr || symbols_.nrt_get_dmabuf_fd != nullptr) {
    caps.dmabuf = Capability::yes();
  } else {
    caps.dmabuf = Capability::no(vnc + ": the runtime '" + library_->path() +
                                 "' has neither nrt_get_dmabuf_fd_v2 nor nrt_get_dmabuf_fd");
  }
  caps.peer_direct = Capability::no(vnc + ": hmr hands Neuron memory to NICs only as dma-buf");
  caps.ipc = Capability::no(vnc +
                            ": sharing Neuron memory between processes is not implemented in this "
                            "hmr build");
  return caps;
}

Status NeuronIface::copy_to_device(void* device_dst, const void* host_src, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (device_dst == nullptr || host_src == nullptr ||
      empty_or_wrapping(reinterpret_cast<uintptr_t>(device_dst), len)) {
    return make_error(HMR_EINVAL, "neuron copy to the device: null pointer or empty range "
                      "(dst %p, src %p, %zu bytes)", device_dst, host_src, len);
  }
  Result<TensorSpan> span = tensor_for_range(device_dst, len, "neuron copy to the device");
  if (span.ok()) {
    // The caller must not free the tensor during its own copy, as with any runtime's memcpy.
    const size_t offset = reinterpret_cast<uintptr_t>(device_dst) - span->base;
    const NRT_STATUS status = symbols_.nrt_tensor_write(span->details.tensor, host_src, offset, len);
    if (status != NRT_SUCCESS) {
      return make_error(hmr_code_for(status),
                        "nrt_tensor_write(vnc %d, offset %zu, %zu) failed: %s", span->details.vnc, offset,
                        len, describe_nrt_status(symbols_, status).c_str());
    }
    return ok_status();
  }
  if (span.status().code() != HMR_ENOENT) return span.status();
  if (symbols_.nrt_memcpy_to_device == nullptr) {
    return make_error(HMR_EOPNOTSUPP,
                      "neuron copy to %p: it is not in a tensor hmr allocated, and '%s' has no "
                      "nrt_memcpy_to_device for other Neuron memory",
                      device_dst, library_->path().c_str());
  }
  const NRT_STATUS status = symbols_.nrt_memcpy_to_device(device_dst, host_src, len);
  if (status != NRT_SUCCESS) {
    return make_error(hmr_code_for(status), "nrt_memcpy_to_device(%p, %zu) failed: %s", device_dst,
                      len, describe_nrt_status(symbols_, status).c_str());
  }
  return ok_status();
}

Status NeuronIface::copy_from_device(void* host_dst, const void* device_src, size_t len) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (host_dst == nullptr || device_src == nullptr ||
      empty_or_wrapping(reinterpret_cast<uintptr_t>(device_src), len)) {
    return make_error(HMR_EINVAL, "neuron copy from the device: null pointer or empty range "
                      "(dst %p, src %p, %zu bytes)", host_dst, device_src, len);
  }
  Result<TensorSpan> span = tensor_for_range(device_src, len, "neuron copy from the device");
  if (!span.ok()) {
    if (span.status().code() != HMR_ENOENT) return span.status();
    return make_error(HMR_EOPNOTSUPP,
                      "neuron copy from %p: nrt reads device memory only through the tensor "
                      "that holds it (nrt_tensor_read), and this is not a tensor hmr allocated",
                      device_src);
  }
  const size_t offset = reinterpret_cast<uintptr_t>(device_src) - span->base;
  const NRT_STATUS status = symbols_.nrt_tensor_read(span->details.tensor, host_dst, offset, len);
  if (status != NRT_SUCCESS) {
    return make_error(hmr_code_for(status), "nrt_tensor_read(vnc %d, offset %zu, %zu) failed: %s",
                      span->details.vnc, offset, len, describe_nrt_status(symbols_, status).c_str());
  }
  return ok_status();
}

Status NeuronIface::host_register(void* ptr, size_t len) {
  (void)ptr, (void)len;
  return make_error(HMR_EOPNOTSUPP,
                    "neuron memory interface does not support host registration: nrt has no call "
                    "that pins host memory for its DMA engines");
}

Status NeuronIface::host_unregister(void* ptr) {
  (void)ptr;
  return make_error(HMR_EOPNOTSUPP,
                    "neuron memory interface does not support host unregistration: nrt has no "
                    "host registration");
}

Result<void*> NeuronIface::mem_alloc(DeviceId device, size_t len, MemoryKind kind) {
  HMR_RETURN_IF_ERROR(check_initialized());
  if (kind != MemoryKind::device_only) {
    return make_error(HMR_EOPNOTSUPP,
                      "neuron mem_alloc makes device memory (device_only) only, not %s",
                      hmem::memory_kind_name(kind));
  }
  if (len == 0 || len > SIZE_MAX - kNeuronGranule) {
    return make_error(HMR_EINVAL, "neuron mem_alloc of %zu bytes: empty or too large", len);
  }
  if (device.value >= static_cast<uint64_t>(device_count_)) {
    return make_error(HMR_EINVAL, "neuron mem_alloc on vnc %llu: it does not exist (this process "
                      "sees %d)", static_cast<unsigned long long>(device.value), device_count_);
  }
  const int vnc = static_cast<int>(device.value);
  const size_t size = hmem::page_round(0, len, kNeuronGranule).length;

  nrt_tensor_t* raw = nullptr;
  const NRT_STATUS status =
      symbols_.nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, size, "hmr", &raw);
  if (status != NRT_SUCCESS || raw == nullptr) {
    return make_error(status != NRT_SUCCESS ? hmr_code_for(status) : HMR_EIO,
                      "nrt_tensor_allocate(DEVICE, vnc %d, %zu) failed: %s", vnc, size,
                      status != NRT_SUCCESS ? describe_nrt_status(symbols_, status).c_str()
                                            : "it gave no tensor");
  }
  // Owned before anything else can fail; destroyed (freed) after the lock below is released.
  OwnedTensor tensor(symbols_.nrt_tensor_free, raw);
  void* va = symbols_.nrt_tensor_get_va(raw);
  if (va == nullptr) {
    return make_error(HMR_EIO, "nrt_tensor_get_va gave no address for a new %zu-byte tensor on "
                      "vnc %d", size, vnc);
  }
  if (tensors_.add(reinterpret_cast<uintptr_t>(va), size, std::move(tensor), {raw, vnc})) {
    return va;
  }
  return make_error(HMR_EIO, "nrt gave address %p for a new tensor while an earlier tensor "
                    "there is still live", va);
}

Status NeuronIface::mem_free(void* ptr) {
  HMR_RETURN_IF_ERROR(check_initialized());
  // The tensor is freed when `tensor` goes out of scope, after the table's lock is released.
  std::optional<OwnedTensor> tensor = tensors_.take(reinterpret_cast<uintptr_t>(ptr));
  if (!tensor.has_value()) {
    return make_error(HMR_EINVAL, "neuron mem_free(%p): not the start of a tensor hmr allocated",
                      ptr);
  }
  return ok_status();
}

}  // namespace hmr::neuron
