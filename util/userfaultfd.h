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
#include <string>

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
  // `know_watched`: also be able to tell which pages are watched, where the kernel can
  // (Linux 6.11: UFFD_FEATURE_WP_ASYNC, PAGEMAP_SCAN, PROCMAP_QUERY); elsewhere the fd opens as
  // without it.  WP_ASYNC lets the kernel watch any kind of mapping, so such an fd refuses
  // what an fd without it would, and shared mappings too: a SysV segment detached by shmdt()
  // raises no event (MappingQuery::Mapping::watchable).
  static Result<Userfaultfd> open(bool know_watched = false);

  // Registers the pages covering [start, start+len) for change events.
  Status watch(uintptr_t start, size_t len);

  bool knows_watched() const { return query_.has_value(); }
  // Why not, when it does not: what the kernel lacked (empty when it was not asked to).
  const std::string& why_not_knowing() const { return why_not_knowing_; }

  // Where knows_watched() only:
  // Registers the part within [lo, hi) of the mapping holding `address` and returns it.
  Result<MappingQuery::Run> watch_mapping_part(uintptr_t address, uintptr_t lo, uintptr_t hi);
  // The runs within [lo, hi) of the mapping holding `address` that are watched now.  The
  // mapping is looked at first: a run found watched afterwards was watched all along (only
  // the caller registers with this fd), so it is the mapping seen watchable.
  Result<size_t> watched_runs_of_mapping(uintptr_t address, uintptr_t lo, uintptr_t hi,
                                         MappingQuery::Run* runs, size_t max_runs) const;
  // Whether every page of [start, end) is watched now.  A registration of more than a hole
  // succeeds whatever the hole holds, so this is how a caller knows its own pages were there.
  Result<bool> all_watched(uintptr_t start, uintptr_t end) const;
  // Forgets a range; a range that is no longer mapped is not an error.
  void unwatch(uintptr_t start, size_t len);
  // Reads one pending event without blocking; false when none is pending.
  bool read_event(AddressRangeEvent* event);
  int fd() const { return fd_.get(); }
  // Closes the fd: the kernel drops every registration and releases any waiting unmapper.
  void close() { fd_.reset(); }

 private:
  Status register_range(uintptr_t start, uintptr_t end);  // page-aligned
  static Status refuse(uintptr_t start, size_t len);

  Userfaultfd(UniqueFd fd, std::optional<MappingQuery> query, std::string why_not_knowing)
      : fd_(std::move(fd)),
        query_(std::move(query)),
        why_not_knowing_(std::move(why_not_knowing)) {}
  UniqueFd fd_;
  std::optional<MappingQuery> query_;  // set when opened with WP_ASYNC and both ioctls work
  std::string why_not_knowing_;
};

}  // namespace hmr::core
