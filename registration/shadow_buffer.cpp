#include "registration/shadow_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "hmem/page_range.h"
#include "util/log.h"

namespace hmr::core {

ShadowBuffer::ShadowBuffer(hmem::Iface& iface, void* device, void* host, size_t length,
                           size_t mapped)
    : iface_(iface), device_(device), host_(host), length_(length), mapped_(mapped) {}

Result<std::unique_ptr<ShadowBuffer>> ShadowBuffer::create(hmem::Iface& iface, void* device,
                                                           size_t len) {
  const size_t page = hmem::host_page_size();
  const size_t mapped = (len + page - 1) / page * page;
  void* host = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) {
    const int err = errno;
    return make_error(HMR_ENOMEM, "no host shadow of %zu bytes for %s memory at %p: mmap: %s", len,
                      iface.name(), device, std::strerror(err));
  }
  std::unique_ptr<ShadowBuffer> shadow(new ShadowBuffer(iface, device, host, len, mapped));
  Status pinned = iface.host_register(host, mapped);
  shadow->host_registered_ = pinned.ok();
  if (!pinned.ok()) {
    log_message(LogLevel::debug, "host shadow at %p not pinned for %s copies (%s); copies still "
                "work, more slowly", host, iface.name(), pinned.reason().c_str());
  }
  HMR_RETURN_IF_ERROR(shadow->copy_from_device(0, len));
  return shadow;
}

ShadowBuffer::~ShadowBuffer() {
  if (host_registered_) {
    bool unpinned = false;
    // (A runtime's failure is described in strings: out of memory for them must not end the
    // process from a destructor, which runs on hmr's reaper too.)
    try {
      Status status = iface_.host_unregister(host_);
      unpinned = status.ok();
      if (!unpinned) {
        log_message(LogLevel::warn, "host shadow at %p (%zu bytes): %s; left mapped", host_,
                    mapped_, status.reason().c_str());
      }
    } catch (const std::bad_alloc&) {
      log_message(LogLevel::warn, "host shadow at %p (%zu bytes): unpinning failed, out of "
                  "memory; left mapped", host_, mapped_);
    }
    // The runtime still holds these pages registered.  Unmapped, the address could be mapped
    // again by anyone, and the runtime's stale registration would then cover the new mapping:
    // it would call the application's fresh host memory its own (pointer queries) and copy
    // from the old pages.  Leaking the shadow's pages is the lesser harm.
    if (!unpinned) return;
  }
  munmap(host_, mapped_);
}

Status ShadowBuffer::copy_to_device(uint64_t offset, size_t len) {
  return iface_.copy_to_device(static_cast<uint8_t*>(device_) + offset,
                               static_cast<uint8_t*>(host_) + offset, len);
}

Status ShadowBuffer::copy_from_device(uint64_t offset, size_t len) {
  return iface_.copy_from_device(static_cast<uint8_t*>(host_) + offset,
                                 static_cast<uint8_t*>(device_) + offset, len);
}

}  // namespace hmr::core
