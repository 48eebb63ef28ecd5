#include "synapseai/hlthunk_memory.h"

#include <cerrno>
#include <cinttypes>
#include <utility>

#include "synapseai/synapseai_error.h"
#include "util/log.h"

namespace hmr::synapseai {

HlthunkMemory::HlthunkMemory(HlthunkMemory&& other) noexcept
    : unmap_(other.unmap_),
      free_(other.free_),
      fd_(other.fd_),
      handle_(std::exchange(other.handle_, 0)),
      va_(std::exchange(other.va_, 0)) {}

HlthunkMemory& HlthunkMemory::operator=(HlthunkMemory&& other) noexcept {
  if (this != &other) {
    Status status = release();
    if (!status.ok()) log_message(LogLevel::warn, "%s", status.reason().c_str());
    unmap_ = other.unmap_;
    free_ = other.free_;
    fd_ = other.fd_;
    handle_ = std::exchange(other.handle_, 0);
    va_ = std::exchange(other.va_, 0);
  }
  return *this;
}

HlthunkMemory::~HlthunkMemory() {
  Status status = release();
  if (!status.ok()) log_message(LogLevel::warn, "%s", status.reason().c_str());
}

Status HlthunkMemory::release() {
  if (va_ != 0) {
    errno = 0;
    const int rc = unmap_(fd_, va_);
    if (rc != 0) {
      const int error = hlthunk_errno(rc, errno);
      // EINVAL for a mapping hmr made is the driver's "memory is exported" (its only other
      // EINVAL, an unknown address, cannot happen here): busy until the exports go.
      return make_error(error == EINVAL ? HMR_EBUSY : hmr_code_for_errno(error),
                        "hlthunk_memory_unmap(0x%" PRIx64 ") failed: %s; %s", va_,
                        describe_errno(error).c_str(),
                        error == EINVAL ? "the driver keeps Gaudi memory mapped while a dma-buf of "
                                          "it is alive: deregister every MR of it and close every "
                                          "dma-buf fd of it, then free it again"
                                        : "the memory stays mapped and allocated");
    }
    va_ = 0;
  }
  if (handle_ != 0) {
    errno = 0;
    const int rc = free_(fd_, handle_);
    if (rc != 0) {
      // The handle is kept: dropped, the device memory would stay allocated with nothing left
      // to free it by until the device is closed.
      const int error = hlthunk_errno(rc, errno);
      return make_error(hmr_code_for_errno(error),
                        "hlthunk_device_memory_free(handle 0x%" PRIx64 ") failed: %s; the memory "
                        "is unmapped but still allocated, and hmr keeps its handle: free it again",
                        handle_, describe_errno(error).c_str());
    }
    handle_ = 0;
  }
  return ok_status();
}

}  // namespace hmr::synapseai
