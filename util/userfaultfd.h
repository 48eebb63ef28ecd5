// A userfaultfd opened for address-space change events only (UNMAP, REMOVE, REMAP).
//
// Ranges are registered in write-protect mode and no page is ever write-protected, so the
// fd never traps a page fault; it only reports that pages went away or moved.  It is opened
// with UFFD_USER_MODE_ONLY, which works without root where vm.unprivileged_userfaultfd=0.
// munmap/madvise/mremap of a registered range block until the event is read: whoever reads
// must never wait for a lock an unmapping thread may hold.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"
#include "util/unique_fd.h"

namespace hmr::core {

struct AddressRangeEvent {
  enum class Kind { unmap, remove, remap } kind;
  uintptr_t start = 0;
  uintptr_t end = 0;  // exclusive
};

class Userfaultfd {
 public:
  static Result<Userfaultfd> open();

  // Registers the pages covering [start, start+len) for change events.
  Status watch(uintptr_t start, size_t len);
  // Forgets a range; a range that is no longer mapped is not an error.
  void unwatch(uintptr_t start, size_t len);
  // Reads one pending event without blocking; false when none is pending.
  bool read_event(AddressRangeEvent* event);
  int fd() const { return fd_.get(); }
  // Closes the fd: the kernel drops every registration and releases any waiting unmapper.
  void close() { fd_.reset(); }

 private:
  explicit Userfaultfd(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace hmr::core
