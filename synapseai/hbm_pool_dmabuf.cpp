#include "synapseai/hbm_pool_dmabuf.h"

#include <fcntl.h>

#include <cerrno>
#include <cinttypes>

#include "hmem/page_range.h"
#include "synapseai/synapseai_error.h"

namespace hmr::synapseai {
namespace {

// The flags hl-thunk accepts for a mapped-memory export (it refuses any other): the NIC reads
// and writes the memory, and the fd must not leak into children.
constexpr uint32_t kExportFlags = O_RDWR | O_CLOEXEC;

// The device fd SynapseAI opened for the device this process acquired.
Result<int> acquired_device_fd(const SynapseSymbols& synapse, uintptr_t address) {
  SynDeviceInfoV2 info{};
  const synStatus status = synapse.synDeviceGetInfoV2(kAcquiredSynDevice, &info);
  if (status != synSuccess) {
    return make_error(hmr_code_for(status),
                      "synapseai dma-buf export of 0x%" PRIxPTR ": synDeviceGetInfoV2 failed: "
                      "%s (has this process acquired a Gaudi device?)",
                      address, describe_syn_status(status).c_str());
  }
  return static_cast<int>(info.fd);
}

// What SCAL knows of the device's "global_hbm" pool.
Result<ScalMemoryPoolInfoV2> global_hbm_pool(const ScalSymbols& scal, int device_fd,
                                             uintptr_t address) {
  ScalHandle handle = nullptr;
  int rc = scal.scal_get_handle_from_fd(device_fd, &handle);
  if (rc != kScalSuccess || handle == nullptr) {
    return make_error(rc != kScalSuccess ? hmr_code_for_scal(rc) : HMR_EIO,
                      "synapseai dma-buf export of 0x%" PRIxPTR ": scal_get_handle_from_fd(%d) "
                      "failed: %s: SynapseAI has no SCAL instance for its device fd",
                      address, device_fd, describe_scal_result(rc).c_str());
  }
  ScalPoolHandle pool = nullptr;
  rc = scal.scal_get_pool_handle_by_name(handle, kGlobalHbmPool, &pool);
  if (rc != kScalSuccess || pool == nullptr) {
    return make_error(rc != kScalSuccess ? hmr_code_for_scal(rc) : HMR_EIO,
                      "synapseai dma-buf export of 0x%" PRIxPTR ": scal_get_pool_handle_by_name"
                      "('%s') failed: %s%s", address, kGlobalHbmPool,
                      describe_scal_result(rc).c_str(),
                      rc == kScalNotFound ? ": SCAL has no such pool for the acquired device" : "");
  }
  ScalMemoryPoolInfoV2 info{};
  rc = scal.scal_pool_get_infoV2(pool, &info);
  if (rc != kScalSuccess) {
    return make_error(hmr_code_for_scal(rc),
                      "synapseai dma-buf export of 0x%" PRIxPTR ": scal_pool_get_infoV2 of '%s' "
                      "failed: %s",
                      address, kGlobalHbmPool, describe_scal_result(rc).c_str());
  }
  if (info.device_base_allocated_address > info.device_base_address ||
      info.device_base_address + info.totalSize < info.device_base_address) {
    return make_error(HMR_EIO,
                      "synapseai dma-buf export: SCAL describes '%s' as [0x%" PRIx64 ", +%" PRIu64
                      ") in a mapping from 0x%" PRIx64 ", which cannot be",
                      kGlobalHbmPool, info.device_base_address, info.totalSize,
                      info.device_base_allocated_address);
  }
  return info;
}

}  // namespace

Result<hmem::DmabufExport> export_from_hbm_pool(const HbmPoolExporter& libraries,
                                                uintptr_t address, size_t length) {
  Result<int> device_fd = acquired_device_fd(*libraries.synapse, address);
  if (!device_fd.ok()) return device_fd.status();
  Result<ScalMemoryPoolInfoV2> pool = global_hbm_pool(*libraries.scal, *device_fd, address);
  if (!pool.ok()) return pool.status();
  const uint64_t pool_start = pool->device_base_address;
  if (address < pool_start || address - pool_start > pool->totalSize ||
      length > pool->totalSize - (address - pool_start)) {
    return make_error(HMR_EINVAL,
                      "synapseai dma-buf export of [0x%" PRIxPTR ", +%zu): not inside the "
                      "acquired device's '%s' pool ([0x%" PRIx64 ", +%" PRIu64 ")); only Gaudi "
                      "memory of the device this process acquired can be exported",
                      address, length, kGlobalHbmPool, pool_start, pool->totalSize);
  }
  // The mapping starts at or below the pool (checked above), so the offset is non-negative;
  // both are page-aligned device VAs, as the driver wants.
  const uint64_t mapping_start = pool->device_base_allocated_address;
  const hmem::PageRange pages = hmem::page_round(address, length, hmem::host_page_size());
  const uint64_t offset = pages.start - mapping_start;
  errno = 0;
  const int fd = libraries.hlthunk->hlthunk_device_mapped_memory_export_dmabuf_fd(
      *device_fd, mapping_start, pages.length, offset, kExportFlags);
  if (fd < 0) {
    const int error = hlthunk_errno(fd, errno);
    return make_error(hmr_code_for_errno(error),
                      "hlthunk_device_mapped_memory_export_dmabuf_fd(device fd %d, mapping "
                      "0x%" PRIx64 ", %zu, offset 0x%" PRIx64 ", O_RDWR|O_CLOEXEC) of "
                      "SynapseAI's '%s' pool failed: %s",
                      *device_fd, mapping_start, pages.length, offset, kGlobalHbmPool,
                      describe_errno(error).c_str());
  }
  hmem::DmabufExport exported;
  exported.fd = hmem::DmabufFd(fd);
  exported.offset = pages.offset;
  exported.len = length;
  exported.exported_len = pages.length;
  return exported;
}

}  // namespace hmr::synapseai
