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
#include <optional>

#include "util/mapping_query.h"
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
  // `know_watched`: also be able to tell which pages are watched (watched_runs()), where the
  // kernel can (Linux 6.11: UFFD_FEATURE_WP_ASYNC, PAGEMAP_SCAN, PROCMAP_QUERY); elsewhere
  // the fd opens as without it.  WP_ASYNC lets the kernel watch any kind of mapping, so such an
  // fd refuses shared ones itself: a SysV segment detached by shmdt() raises no event.
  static Result<Userfaultfd> open(bool know_watched = false);

  // Registers the pages covering [start, start+len) for change events.
  Status watch(uintptr_t start, size_t len);
  // Registers the private mappings in [start, start+len) and skips shared ones, where the
  // fd refuses shared mappings (knows_watched()); elsewhere the same as watch().
  Status watch_private_parts(uintptr_t start, size_t len);
  bool knows_watched() const { return query_.has_value(); }
  // The runs of [start, end) this process watches now, in private mappings (see
  // MappingQuery::watched_private_runs); only where knows_watched().
  Result<size_t> watched_runs(uintptr_t start, uintptr_t end, MappingQuery::Run* runs,
                              size_t max_runs) const {
    return query_->watched_private_runs(start, end, runs, max_runs);
  }
  // Forgets a range; a range that is no longer mapped is not an error.
  void unwatch(uintptr_t start, size_t len);
  // Reads one pending event without blocking; false when none is pending.
  bool read_event(AddressRangeEvent* event);
  int fd() const { return fd_.get(); }
  // Closes the fd: the kernel drops every registration and releases any waiting unmapper.
  void close() { fd_.reset(); }

 private:
  Status register_range(uintptr_t start, uintptr_t end);  // page-aligned

  Userfaultfd(UniqueFd fd, std::optional<MappingQuery> query)
      : fd_(std::move(fd)), query_(std::move(query)) {}
  UniqueFd fd_;
  std::optional<MappingQuery> query_;  // set when opened with WP_ASYNC and both ioctls work
};

}  // namespace hmr::core
