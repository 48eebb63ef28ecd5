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
    (void)release();
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
  const uint64_t va = std::exchange(va_, 0);
  const uint64_t handle = std::exchange(handle_, 0);
  if (va != 0) {
    errno = 0;
    const int rc = unmap_(fd_, va);
    if (rc != 0) {
      const int error = hlthunk_errno(rc, errno);
      return make_error(hmr_code_for_errno(error),
                        "hlthunk_memory_unmap(0x%" PRIx64 ") failed: %s; the device memory "
                        "behind it stays allocated",
                        va, describe_errno(error).c_str());
    }
  }
  if (handle != 0) {
    errno = 0;
    const int rc = free_(fd_, handle);
    if (rc != 0) {
      const int error = hlthunk_errno(rc, errno);
      return make_error(hmr_code_for_errno(error),
                        "hlthunk_device_memory_free(handle 0x%" PRIx64 ") failed: %s", handle,
                        describe_errno(error).c_str());
    }
  }
  return ok_status();
}

}  // namespace hmr::synapseai
