#include "synapseai/hccl_dmabuf.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "hmem/page_range.h"
#include "synapseai/synapseai_error.h"

namespace hmr::synapseai {
namespace {

// Where HCCL's dma-buf starts: the acquired device's HBM pool.
Result<uint64_t> hbm_pool_start(const SynapseSymbols& symbols, const std::string& library,
                                uintptr_t address) {
  if (symbols.synDeviceGetInfoV2 == nullptr) {
    return make_error(HMR_EOPNOTSUPP,
                      "synapseai dma-buf export of 0x%" PRIxPTR ": '%s' lacks synDeviceGetInfoV2, "
                      "so hmr cannot tell where HCCL's dma-buf (the HBM pool) starts",
                      address, library.c_str());
  }
  SynDeviceInfoV2 info{};
  const synStatus status = symbols.synDeviceGetInfoV2(kAcquiredSynDevice, &info);
  if (status != synSuccess) {
    return make_error(hmr_code_for(status),
                      "synapseai dma-buf export of 0x%" PRIxPTR ": synDeviceGetInfoV2 in '%s' "
                      "failed: %s (has this process acquired a Gaudi device?)",
                      address, library.c_str(), describe_syn_status(status).c_str());
  }
  return info.globalHbmBaseAddress;
}

}  // namespace

Result<hmem::DmabufExport> export_through_hccl(const SynapseSymbols& symbols,
                                               const std::string& library, uintptr_t address,
                                               size_t length) {
  Result<uint64_t> pool_start = hbm_pool_start(symbols, library, address);
  if (!pool_start.ok()) return pool_start.status();

  // HCCL ignores both; the page range is what older HCL builds looked the fd up by.
  const hmem::PageRange pages = hmem::page_round(address, length, hmem::host_page_size());
  int hccl_fd = -1;
  const int rc = symbols.hcclLookupDMABuff(pages.start, pages.length, &hccl_fd);
  if (rc != 0 || hccl_fd < 0) {
    return make_error(HMR_EIO,
                      "hcclLookupDMABuff for 0x%" PRIxPTR " failed (returned %d, fd %d): HCCL has "
                      "no gaudi-direct dma-buf in this process (no communicator yet, or "
                      "gaudi-direct off)",
                      address, rc, hccl_fd);
  }
  // A dma-buf tells its size to lseek(SEEK_END).  The file position is shared with HCCL's fd;
  // 0 is where HCCL left it (it never reads the fd).
  const off_t size = lseek(hccl_fd, 0, SEEK_END);
  const int size_error = errno;
  (void)lseek(hccl_fd, 0, SEEK_SET);
  if (size <= 0) {
    return make_error(HMR_EIO, "the size of HCCL's gaudi-direct dma-buf (fd %d) is unknown: %s",
                      hccl_fd, std::strerror(size_error));
  }
  const auto exported_len = static_cast<uint64_t>(size);
  if (address < *pool_start || address - *pool_start > exported_len ||
      length > exported_len - (address - *pool_start)) {
    return make_error(HMR_EINVAL,
                      "synapseai dma-buf export of [0x%" PRIxPTR ", +%zu): not inside the HBM "
                      "pool HCCL exports ([0x%" PRIx64 ", +%" PRIu64 ")); only Gaudi memory of "
                      "the device this process acquired can be exported",
                      address, length, *pool_start, exported_len);
  }
  hmem::DmabufExport exported;
  exported.fd = hmem::DmabufFd(fcntl(hccl_fd, F_DUPFD_CLOEXEC, 0));
  if (!exported.fd.valid()) {
    const int error = errno;
    return make_error(error == EMFILE || error == ENFILE ? HMR_ENOMEM : HMR_EIO,
                      "duplicating HCCL's gaudi-direct dma-buf fd %d failed: %s", hccl_fd,
                      std::strerror(error));
  }
  exported.offset = address - *pool_start;
  exported.len = length;
  exported.exported_len = exported_len;
  return exported;
}

}  // namespace hmr::synapseai
