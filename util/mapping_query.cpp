#include "util/mapping_query.h"

#include <fcntl.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hmr::core {
namespace {

// Linux's uapi (linux/fs.h), which Debian 12's 6.1 headers predate: the layouts are the
// kernel's ABI, the names are ours.
struct ProcmapQuery {  // struct procmap_query
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kQueryShared = 0x08;             // PROCMAP_QUERY_VMA_SHARED (VM_MAYSHARE)
constexpr uint64_t kQueryCoveringOrNext = 0x10;     // PROCMAP_QUERY_COVERING_OR_NEXT_VMA

struct PageRegion {  // struct page_region
  uint64_t start;
  uint64_t end;
  uint64_t categories;
};
struct PagemapScanArg {  // struct pm_scan_arg
  uint64_t size;
  uint64_t flags;
  uint64_t start;
  uint64_t end;
  uint64_t walk_end;
  uint64_t vec;
  uint64_t vec_len;
  uint64_t max_pages;
  uint64_t category_inverted;
  uint64_t category_mask;
  uint64_t category_anyof_mask;
  uint64_t return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PagemapScanArg);
constexpr uint64_t kPageIsWpAllowed = 1;  // PAGE_IS_WPALLOWED

int probe_target = 0;  // an address surely mapped, for the probes at open()

}  // namespace

Result<MappingQuery> MappingQuery::open() {
  UniqueFd maps(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  UniqueFd pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (!maps.valid() || !pagemap.valid()) {
    const int err = errno;
    return make_error(HMR_ENOSYS, "cannot open /proc/self/maps or /proc/self/pagemap: %s",
                      std::strerror(err));
  }
  const uintptr_t probe = reinterpret_cast<uintptr_t>(&probe_target);
  ProcmapQuery query = {};
  query.size = sizeof query;
  query.query_addr = probe;
  if (ioctl(maps.get(), kProcmapQuery, &query) != 0) {
    const int err = errno;
    return make_error(HMR_ENOSYS, "PROCMAP_QUERY unavailable (Linux >= 6.11): %s",
                      std::strerror(err));
  }
  PageRegion region;
  PagemapScanArg scan = {};
  scan.size = sizeof scan;
  scan.start = probe & ~uintptr_t{4095};
  scan.end = scan.start + 4096;
  scan.vec = reinterpret_cast<uintptr_t>(&region);
  scan.vec_len = 1;
  scan.category_mask = kPageIsWpAllowed;
  scan.return_mask = kPageIsWpAllowed;
  if (ioctl(pagemap.get(), kPagemapScan, &scan) < 0) {
    const int err = errno;
    return make_error(HMR_ENOSYS, "PAGEMAP_SCAN unavailable (Linux >= 6.7): %s",
                      std::strerror(err));
  }
  return MappingQuery(std::move(maps), std::move(pagemap));
}

template <typename OnMapping>
Status MappingQuery::for_each_mapping(uintptr_t start, uintptr_t end,
                                      OnMapping&& on_mapping) const {
  uintptr_t cursor = start;
  for (size_t seen = 0; cursor < end; ++seen) {
    if (seen == kMaxMappings) {
      on_mapping(cursor, end, true);  // not looked at: treated as the answer that trusts less
      break;
    }
    ProcmapQuery query = {};
    query.size = sizeof query;
    query.query_flags = kQueryCoveringOrNext;
    query.query_addr = cursor;
    if (ioctl(maps_.get(), kProcmapQuery, &query) != 0) {
      if (errno == ENOENT) break;  // no mapping at or above the cursor
      const int err = errno;
      return make_error(HMR_EIO, "PROCMAP_QUERY at %#lx: %s", static_cast<unsigned long>(cursor),
                        std::strerror(err));
    }
    if (query.vma_start >= end) break;
    on_mapping(std::max<uintptr_t>(query.vma_start, start),
               std::min<uintptr_t>(query.vma_end, end), (query.vma_flags & kQueryShared) != 0);
    cursor = query.vma_end;
  }
  return ok_status();
}

Result<bool> MappingQuery::any_shared(uintptr_t start, uintptr_t end) const {
  bool shared = false;
  Status walked = for_each_mapping(start, end, [&](uintptr_t, uintptr_t, bool is_shared) {
    shared = shared || is_shared;
  });
  if (!walked.ok()) return walked;
  return shared;
}

Result<size_t> MappingQuery::private_runs(uintptr_t start, uintptr_t end, Run* runs,
                                          size_t max_runs) const {
  size_t count = 0;
  Status walked = for_each_mapping(start, end, [&](uintptr_t from, uintptr_t to, bool shared) {
    if (!shared && count < max_runs) runs[count++] = Run{from, to};
  });
  if (!walked.ok()) return walked;
  return count;
}

Result<size_t> MappingQuery::watched_private_runs(uintptr_t start, uintptr_t end, Run* runs,
                                                  size_t max_runs) const {
  // The mappings first, then the pages: a page found watched afterwards was watched through
  // the whole look at the mappings (nothing of ours is registered meanwhile: the caller holds
  // the lock under which it registers), so its mapping is the one seen private.
  Run private_mappings[kMaxMappings];
  Result<size_t> listed = private_runs(start, end, private_mappings, kMaxMappings);
  if (!listed.ok()) return listed.status();
  const size_t private_count = *listed;
  if (private_count == 0 || max_runs == 0) return size_t{0};

  PageRegion watched[kMaxMappings];
  PagemapScanArg scan = {};
  scan.size = sizeof scan;
  scan.start = private_mappings[0].start;
  scan.end = private_mappings[private_count - 1].end;
  scan.vec = reinterpret_cast<uintptr_t>(watched);
  scan.vec_len = kMaxMappings;
  scan.category_mask = kPageIsWpAllowed;
  scan.return_mask = kPageIsWpAllowed;
  const int found = ioctl(pagemap_.get(), kPagemapScan, &scan);
  if (found < 0) {
    const int err = errno;
    return make_error(HMR_EIO, "PAGEMAP_SCAN of [%#lx, %#lx): %s",
                      static_cast<unsigned long>(scan.start), static_cast<unsigned long>(scan.end),
                      std::strerror(err));
  }
  size_t count = 0;
  for (int i = 0; i < found; ++i) {
    for (size_t m = 0; m < private_count && count < max_runs; ++m) {
      const uintptr_t from = std::max<uintptr_t>(watched[i].start, private_mappings[m].start);
      const uintptr_t to = std::min<uintptr_t>(watched[i].end, private_mappings[m].end);
      if (from < to) runs[count++] = Run{from, to};
    }
  }
  return count;
}

}  // namespace hmr::core
