// Host-memory monitor on userfaultfd: one thread for the process, ranges watched in
// write-protect mode (no page is ever protected, so no fault is trapped) and reported on
// UNMAP, REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap).
//
// Each subscription registers its 2 MiB-aligned blocks once (reference-counted): registering
// every small region on its own would split the kernel's mappings until vm.max_map_count is
// hit.  A block registered while it had a hole does not cover what is mapped there later (the
// kernel registers the mappings present and skips holes), so the block alone is never
// trusted.  What is trusted is the kernel's own answer: where it can say which pages are
// watched (Linux 6.11: util/mapping_query.h), the second subscription in a block that needed
// a registration of its own asks once for the whole block, and every later subscription of
// pages known watched makes no system call.  A page stays known until an event about it
// arrives: pages leave a watched mapping only by UNMAP or REMAP (shared mappings, where
// shmdt() would take pages silently, are never watched on such kernels).  Elsewhere, and for
// pages not known, the subscription registers its exact pages, which is correct whatever the
// block holds.
//
// An event the thread has read but not yet applied leaves the unmapping thread free to map
// and register the same pages again before the bits are cleared: while one is pending
// (Monitor::has_pending), known pages are registered anyway.
//
// Deadlock rules: the thread reads every queued event (which releases the unmapping
// threads) before it takes any lock, and no lock it takes is ever held by a thread while
// that thread unmaps or frees.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "monitor/monitor.h"
#include "monitor/uffd_watcher.h"

namespace hmr::core {

class UffdMonitor final : public Monitor {
 public:
  static UffdMonitor& instance();

  const char* name() const override { return "userfaultfd"; }
  Status start() override;
  void stop() override {}  // lives as long as the process: caches come and go
  Status subscribe(uintptr_t start, size_t len) override;
  void unsubscribe(uintptr_t start, size_t len) override;

  // What subscriptions cost in system calls, for tests and hmr-info.
  struct Counts {
    uint64_t block_watches = 0;  // registrations of a whole block's private mappings
    uint64_t scans = 0;          // questions to the kernel: which pages of a block are watched
    uint64_t exact_watches = 0;  // subscriptions that registered their own pages
    uint64_t known = 0;          // subscriptions of pages known watched: no system call
  };
  Counts counts();
  // Whether this kernel lets the monitor know which pages it watches (started monitors only).
  bool knows_watched();

 private:
  friend class UffdMonitorTestPeer;
  UffdMonitor() = default;
  void on_change(const AddressRangeEvent& change);
  void forget_blocks(uintptr_t start, uintptr_t end);

  static constexpr uintptr_t kBlock = 2u << 20;
  static constexpr uintptr_t kPage = 4096;
  static constexpr size_t kPagesPerBlock = kBlock / kPage;
  struct Block {
    uint32_t references = 0;
    bool registered = false;  // its private mappings were registered; no event since
    bool scan_due = false;    // registered since the last scan: one may learn pages
    uint8_t exact_watches = 0;  // subscriptions since then that registered their own pages
    uint64_t known[kPagesPerBlock / 64] = {};  // pages known watched: one bit each

    bool knows(uintptr_t block, uintptr_t from, uintptr_t to) const;
    void mark(uintptr_t block, uintptr_t from, uintptr_t to, bool watched);
  };
  // Asks the kernel which pages of `block` are watched and marks them.
  void scan(uintptr_t block, Block& state);

  std::mutex start_mutex_;
  std::unique_ptr<UffdWatcher> watcher_;

  std::mutex blocks_mutex_;
  std::map<uintptr_t, Block> blocks_;
  Counts counts_;  // under blocks_mutex_
};

}  // namespace hmr::core
