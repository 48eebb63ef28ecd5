#include "util/userfaultfd.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

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

}  // namespace

Result<Userfaultfd> Userfaultfd::open() {
  UniqueFd fd(open_raw_userfaultfd());
  if (!fd.valid()) {
    const int err = errno;
    return make_error(HMR_ENOSYS,
                      "userfaultfd unavailable: %s (needs Linux >= 5.11 for unprivileged "
                      "UFFD_USER_MODE_ONLY, or root)",
                      std::strerror(err));
  }
  uffdio_api api = {};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
  if (ioctl(fd.get(), UFFDIO_API, &api) != 0) {
    const int err = errno;
    return make_error(HMR_ENOSYS, "userfaultfd has no UNMAP/REMOVE/REMAP events: %s",
                      std::strerror(err));
  }
  return Userfaultfd(std::move(fd));
}

Status Userfaultfd::watch(uintptr_t start, size_t len) {
  uffdio_register reg = {};
  reg.range.start = page_down(start);
  reg.range.len = page_up(start + len) - reg.range.start;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd_.get(), UFFDIO_REGISTER, &reg) != 0) {
    const int err = errno;
    return make_error(HMR_EFAULT,
                      "cannot watch [%#lx, +%zu) for page changes: %s (the range must be "
                      "mapped anonymous, shmem or hugetlb memory)",
                      static_cast<unsigned long>(start), len, std::strerror(err));
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
