// Asks the kernel about this process's own mappings through two ioctls, not by parsing /proc
// text: PROCMAP_QUERY on /proc/self/maps (Linux 6.11: one mapping's bounds and flags) and
// PAGEMAP_SCAN on /proc/self/pagemap (Linux 6.7: which pages are watched by a userfaultfd in
// asynchronous write-protect mode).  The userfaultfd monitor uses both to learn, in one
// system call per 2 MiB block, which pages it watches, so that later registrations there need
// no system call at all (monitor/uffd_monitor.h).
//
// Answers describe a moment: the caller must know what can change after it (here: pages
// that stop being watched are always reported as an UNMAP or REMAP event).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"
#include "util/unique_fd.h"

namespace hmr::core {

class MappingQuery {
 public:
  // HMR_ENOSYS with the reason when /proc is not mounted or the kernel lacks either ioctl.
  static Result<MappingQuery> open();

  struct Run {
    uintptr_t start = 0;
    uintptr_t end = 0;  // exclusive
  };

  // Whether a shared mapping (MAP_SHARED, SysV shm) covers any byte of [start, end).
  Result<bool> any_shared(uintptr_t start, uintptr_t end) const;
  // The parts of [start, end) mapped privately, at most kMaxMappings of them (the rest is
  // left out).
  static constexpr size_t kMaxMappings = 16;
  Result<size_t> private_runs(uintptr_t start, uintptr_t end, Run* runs, size_t max_runs) const;

  // The runs of [start, end) that are, now, pages of private mappings watched in write-protect
  // mode by a userfaultfd opened with UFFD_FEATURE_WP_ASYNC.  Fills at most `max_runs` and
  // returns how many; pages beyond a full array are left out, never guessed.  The mappings
  // are looked at before the pages, so a run is never a mapping that replaced a shared one
  // in between (see uffd_monitor.cpp).
  Result<size_t> watched_private_runs(uintptr_t start, uintptr_t end, Run* runs,
                                      size_t max_runs) const;

 private:
  MappingQuery(UniqueFd maps, UniqueFd pagemap)
      : maps_(std::move(maps)), pagemap_(std::move(pagemap)) {}
  // Calls on_mapping(start, end, shared) for each mapping overlapping [start, end), clipped.
  template <typename OnMapping>
  Status for_each_mapping(uintptr_t start, uintptr_t end, OnMapping&& on_mapping) const;

  UniqueFd maps_;     // /proc/self/maps, for PROCMAP_QUERY
  UniqueFd pagemap_;  // /proc/self/pagemap, for PAGEMAP_SCAN
};

}  // namespace hmr::core
