#include "util/mapping_query.h"

#include <fcntl.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>
#include <iterator>

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
constexpr uint64_t kQueryShared = 0x08;          // PROCMAP_QUERY_VMA_SHARED (VM_MAYSHARE)
constexpr uint64_t kQueryCoveringOrNext = 0x10;  // PROCMAP_QUERY_COVERING_OR_NEXT_VMA

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

constexpr uint64_t kBasePage = 4096;
constexpr size_t kMaxMappingsLookedAt = 16;  // all_watchable(): beyond, the answer is no

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
  MappingQuery query(std::move(maps), std::move(pagemap));
  const uintptr_t probe = reinterpret_cast<uintptr_t>(&probe_target);
  Result<Mapping> mapping = query.mapping_at(probe);
  if (!mapping.ok()) {
    return make_error(HMR_ENOSYS, "PROCMAP_QUERY unavailable (Linux >= 6.11): %s",
                      mapping.status().reason().c_str());
  }
  if (mapping->start == mapping->end) {
    return make_error(HMR_ENOSYS, "PROCMAP_QUERY does not find this library's own data");
  }
  Run run;
  Result<size_t> scanned = query.watched_runs(probe & ~(kBasePage - 1),
                                              (probe & ~(kBasePage - 1)) + kBasePage, &run, 1);
  if (!scanned.ok()) {
    return make_error(HMR_ENOSYS, "PAGEMAP_SCAN unavailable (Linux >= 6.7): %s",
                      scanned.status().reason().c_str());
  }
  return query;
}

Result<MappingQuery::Mapping> MappingQuery::mapping_from(uintptr_t address,
                                                         bool covering_only) const {
  ProcmapQuery query = {};
  query.size = sizeof query;
  query.query_flags = covering_only ? 0 : kQueryCoveringOrNext;
  query.query_addr = address;
  if (ioctl(maps_.get(), kProcmapQuery, &query) != 0) {
    if (errno == ENOENT) return Mapping{};  // nothing there (or above)
    const int err = errno;
    return make_error(HMR_EIO, "PROCMAP_QUERY at %#lx: %s", static_cast<unsigned long>(address),
                      std::strerror(err));
  }
  const bool shared = (query.vma_flags & kQueryShared) != 0;
  const bool anonymous = query.inode == 0;
  const bool hugetlb = query.vma_page_size > kBasePage;
  return Mapping{query.vma_start, query.vma_end, !shared && (anonymous || hugetlb)};
}

Result<MappingQuery::Mapping> MappingQuery::mapping_at(uintptr_t address) const {
  return mapping_from(address, /*covering_only=*/true);
}

Result<bool> MappingQuery::all_watchable(uintptr_t start, uintptr_t end) const {
  uintptr_t cursor = start;
  for (size_t seen = 0; cursor < end; ++seen) {
    if (seen == kMaxMappingsLookedAt) return false;
    Result<Mapping> mapping = mapping_from(cursor, /*covering_only=*/false);
    if (!mapping.ok()) return mapping.status();
    if (mapping->start == mapping->end || mapping->start >= end) break;
    if (!mapping->watchable) return false;
    cursor = mapping->end;
  }
  return true;
}

Result<size_t> MappingQuery::watched_runs(uintptr_t start, uintptr_t end, Run* runs,
                                          size_t max_runs) const {
  PageRegion found[16];
  PagemapScanArg scan = {};
  scan.size = sizeof scan;
  scan.start = start;
  scan.end = end;
  scan.vec = reinterpret_cast<uintptr_t>(found);
  scan.vec_len = max_runs < std::size(found) ? max_runs : std::size(found);
  scan.category_mask = kPageIsWpAllowed;
  scan.return_mask = kPageIsWpAllowed;
  const int count = ioctl(pagemap_.get(), kPagemapScan, &scan);
  if (count < 0) {
    const int err = errno;
    return make_error(HMR_EIO, "PAGEMAP_SCAN of [%#lx, %#lx): %s",
                      static_cast<unsigned long>(start), static_cast<unsigned long>(end),
                      std::strerror(err));
  }
  for (int i = 0; i < count; ++i) runs[i] = Run{found[i].start, found[i].end};
  return static_cast<size_t>(count);
}

}  // namespace hmr::core
