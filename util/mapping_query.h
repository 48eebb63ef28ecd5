// Asks the kernel about this process's own mappings through two ioctls, not by parsing /proc
// text: PROCMAP_QUERY on /proc/self/maps (Linux 6.11: one mapping's bounds and kind) and
// PAGEMAP_SCAN on /proc/self/pagemap (Linux 6.7: which pages a userfaultfd in asynchronous
// write-protect mode watches).  The userfaultfd monitor uses both to learn which pages it
// watches, once per 2 MiB block it fills, so that later registrations there need no system
// call at all (monitor/uffd_monitor.h).
//
// Answers describe a moment: the caller must know what can change after it (there: pages
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
  struct Mapping {
    uintptr_t start = 0;  // start == end: nothing mapped there
    uintptr_t end = 0;
    // Private anonymous or hugetlb memory: what a userfaultfd without WP_ASYNC accepts and
    // what leaves only through UNMAP or REMAP events.  Shared mappings can leave without one
    // (shmdt), file mappings are no registration cache's business.
    bool watchable = false;
  };

  // The mapping holding `address`.
  Result<Mapping> mapping_at(uintptr_t address) const;
  // Whether every mapping overlapping [start, end) is watchable (holes are not looked at; a
  // range over more than 16 mappings is not).
  Result<bool> all_watchable(uintptr_t start, uintptr_t end) const;
  // The runs of [start, end) that a userfaultfd opened with UFFD_FEATURE_WP_ASYNC watches in
  // write-protect mode now; at most `max_runs` (pages beyond are left out, never guessed).
  Result<size_t> watched_runs(uintptr_t start, uintptr_t end, Run* runs, size_t max_runs) const;

 private:
  MappingQuery(UniqueFd maps, UniqueFd pagemap)
      : maps_(std::move(maps)), pagemap_(std::move(pagemap)) {}
  // The mapping holding `address`; unless `covering_only`, the next one above when none does.
  Result<Mapping> mapping_from(uintptr_t address, bool covering_only) const;

  UniqueFd maps_;     // /proc/self/maps, for PROCMAP_QUERY
  UniqueFd pagemap_;  // /proc/self/pagemap, for PAGEMAP_SCAN
};

}  // namespace hmr::core
