// Watches registered ranges with userfaultfd and reports pages that went away or moved.
// The software NIC uses it to model MMU_NOTIFY: its translation of an MR goes stale when
// the pages change, until the application calls hmr_mr_refresh.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "core/status.h"
#include "core/unique_fd.h"
#include "core/userfaultfd.h"

namespace hmr::nic::sim {

class PageChangeTracker {
 public:
  using OnChange = std::function<void(uintptr_t start, uintptr_t end)>;

  // The callback runs on the tracker's thread; it must not wait for anything an unmapping
  // thread may hold.
  static Result<std::unique_ptr<PageChangeTracker>> start(OnChange on_change);
  ~PageChangeTracker();

  Status watch(uintptr_t start, size_t len) { return uffd_.watch(start, len); }

  // The kernel releases an unmapping thread as soon as its event is read, before the
  // callback ran.  `pending` is raised before reading and lowered after the callbacks, so an
  // access that waits for it never sees pages that changed without being told.
  void wait_until_reported() const;

 private:
  PageChangeTracker(core::Userfaultfd uffd, UniqueFd wake, OnChange on_change);
  void run();

  core::Userfaultfd uffd_;
  UniqueFd wake_;  // eventfd: tells the thread to stop
  OnChange on_change_;
  std::atomic<uint32_t> pending_{0};
  std::thread thread_;
};

}  // namespace hmr::nic::sim
