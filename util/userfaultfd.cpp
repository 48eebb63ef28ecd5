#include "util/userfaultfd.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hmr::core {
namespace {

constexpr uint64_t kPageSize = 4096;

uintptr_t page_down(uintptr_t address) { return address & ~(kPageSize - 1); }
uintptr_t page_up(uintptr_t address) { return (address + kPageSize - 1) & ~(kPageSize - 1); }

int open_raw_userfaultfd() {
#ifdef UFFD_USER_MODE_ONLY
  int fd = static_cast<int>(
      syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd >= 0 || errno != EINVAL) return fd;
#endif
  // Kernels before 5.11 lack UFFD_USER_MODE_ONLY; root can still open a plain one.
  return static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
}

// UFFD_FEATURE_WP_ASYNC (Linux 6.7; implies WP_UNPOPULATED): what PAGEMAP_SCAN needs to call
// a page watched.  It also resolves write faults on protected pages in the kernel, but this fd
// never protects a page, so it changes nothing else.
constexpr uint64_t kFeatureWpAsync = uint64_t{1} << 15;

// Opens the fd and asks for its events (and `extra` features); false when the kernel
// refuses them, with errno set.
bool open_with_features(UniqueFd& fd, uint64_t extra) {
  fd.reset(open_raw_userfaultfd());
  if (!fd.valid()) return false;
  uffdio_api api = {};
  api.api = UFFD_API;
  api.features =
      UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP | extra;
  return ioctl(fd.get(), UFFDIO_API, &api) == 0;
}

}  // namespace

Result<Userfaultfd> Userfaultfd::open(bool know_watched) {
  UniqueFd fd;
  std::string why_not_knowing;
  if (know_watched) {
    // Only with both ioctls: an fd with WP_ASYNC but no way to ask is all cost, no use.
    Result<MappingQuery> query = MappingQuery::open();
    if (!query.ok()) {
      why_not_knowing = query.status().reason();
    } else if (open_with_features(fd, kFeatureWpAsync)) {
      return Userfaultfd(std::move(fd), std::move(*query), "");
    } else {
      why_not_knowing = std::string("this kernel's userfaultfd has no UFFD_FEATURE_WP_ASYNC "
                                    "(Linux 6.7): ") + std::strerror(errno);
    }
  }
  if (!open_with_features(fd, 0)) {
    const int err = errno;
    if (!fd.valid()) {
      return make_error(HMR_ENOSYS,
                        "userfaultfd unavailable: %s (needs Linux >= 5.11 for unprivileged "
                        "UFFD_USER_MODE_ONLY, or root)",
                        std::strerror(err));
    }
    return make_error(HMR_ENOSYS, "userfaultfd has no UNMAP/REMOVE/REMAP events: %s",
                      std::strerror(err));
  }
  return Userfaultfd(std::move(fd), std::nullopt, std::move(why_not_knowing));
}

Status Userfaultfd::watch(uintptr_t start, size_t len) {
  const uintptr_t first = page_down(start);
  const uintptr_t end = page_up(start + len);
  if (query_) {
    Result<bool> watchable = query_->all_watchable(first, end);
    if (!watchable.ok()) return watchable.status();
    if (!*watchable) return refuse(start, len);
  }
  return register_range(first, end);
}

Status Userfaultfd::refuse(uintptr_t start, size_t len) {
  return make_error(HMR_EFAULT,
                    "cannot watch [%#lx, +%zu) for page changes: only private anonymous and "
                    "hugetlb mappings are watched (a shared one can go away without an event: "
                    "shmdt)",
                    static_cast<unsigned long>(start), len);
}

Result<MappingQuery::Run> Userfaultfd::watch_mapping_part(uintptr_t address, uintptr_t lo,
                                                          uintptr_t hi) {
  Result<MappingQuery::Mapping> mapping = query_->mapping_at(address);
  if (!mapping.ok()) return mapping.status();
  if (!mapping->watchable) return refuse(address, 1);
  const MappingQuery::Run part{std::max(mapping->start, lo), std::min(mapping->end, hi)};
  Status watched = register_range(part.start, part.end);
  if (!watched.ok()) return watched;
  return part;
}

Result<size_t> Userfaultfd::watched_runs_of_mapping(uintptr_t address, uintptr_t lo, uintptr_t hi,
                                                    MappingQuery::Run* runs,
                                                    size_t max_runs) const {
  Result<MappingQuery::Mapping> mapping = query_->mapping_at(address);
  if (!mapping.ok()) return mapping.status();
  if (!mapping->watchable) return size_t{0};
  return query_->watched_runs(std::max(mapping->start, lo), std::min(mapping->end, hi), runs,
                              max_runs);
}

Result<bool> Userfaultfd::all_watched(uintptr_t start, uintptr_t end) const {
  MappingQuery::Run run;
  const uintptr_t first = page_down(start);
  const uintptr_t last = page_up(end);
  Result<size_t> found = query_->watched_runs(first, last, &run, 1);
  if (!found.ok()) return found.status();
  return *found == 1 && run.start == first && run.end == last;
}

Status Userfaultfd::register_range(uintptr_t start, uintptr_t end) {
  uffdio_register reg = {};
  reg.range.start = start;
  reg.range.len = end - start;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd_.get(), UFFDIO_REGISTER, &reg) != 0) {
    const int err = errno;
    return make_error(HMR_EFAULT,
                      "cannot watch [%#lx, %#lx) for page changes: %s (the range must be "
                      "mapped anonymous, shmem or hugetlb memory)",
                      static_cast<unsigned long>(start), static_cast<unsigned long>(end),
                      std::strerror(err));
  }
  return ok_status();
}

void Userfaultfd::unwatch(uintptr_t start, size_t len) {
  uffdio_range range = {};
  range.start = page_down(start);
  range.len = page_up(start + len) - range.start;
  (void)ioctl(fd_.get(), UFFDIO_UNREGISTER, &range);  // unmapped already: nothing to forget
}

bool Userfaultfd::read_event(AddressRangeEvent* event) {
  for (;;) {
    uffd_msg msg;
    const ssize_t got = ::read(fd_.get(), &msg, sizeof msg);
    if (got != static_cast<ssize_t>(sizeof msg)) return false;  // EAGAIN: none pending
    switch (msg.event) {
      case UFFD_EVENT_UNMAP:
        *event = {AddressRangeEvent::Kind::unmap, msg.arg.remove.start, msg.arg.remove.end};
        return true;
      case UFFD_EVENT_REMOVE:
        *event = {AddressRangeEvent::Kind::remove, msg.arg.remove.start, msg.arg.remove.end};
        return true;
      case UFFD_EVENT_REMAP:
        *event = {AddressRangeEvent::Kind::remap, msg.arg.remap.from,
                  msg.arg.remap.from + msg.arg.remap.len};
        return true;
      default:
        continue;  // no page is write-protected, so faults cannot occur; skip anything else
    }
  }
}

}  // namespace hmr::core
