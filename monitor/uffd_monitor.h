// Host-memory monitor on userfaultfd: one thread for the process, ranges watched in
// write-protect mode (no page is ever protected, so no fault is trapped) and reported on
// UNMAP, REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap).
//
// Registering every small region on its own would split the kernel's mappings until
// vm.max_map_count is hit, so registrations cover more than the subscribed pages.  A wider
// registration is never trusted by itself, though: a range registered while it had a hole
// does not cover what is mapped into the hole later (the kernel registers the mappings
// present and skips holes).  Two ways, by what the kernel can tell:
//
// - Knowing (Linux 6.11: util/mapping_query.h).  A subscription registers the part of its
//   own mapping within its 2 MiB block (one PROCMAP_QUERY, one ioctl), then checks that its
//   own pages are watched (one PAGEMAP_SCAN: the wider registration succeeds across a hole,
//   which another thread may fill right after) and marks them.  The next subscription
//   that is not known and falls inside what was registered there since the last scan asks
//   the kernel which pages of its mapping in the block are watched (one PROCMAP_QUERY, one
//   PAGEMAP_SCAN) and marks them; a subscription of marked pages makes one poll of the
//   userfaultfd and no registration.  A mark is cleared by the first event about its page:
//   pages leave a watched mapping by UNMAP or REMAP, since such a userfaultfd watches private
//   anonymous and hugetlb mappings only (a SysV segment leaves silently, by shmdt, and
//   shmat(SHM_REMAP) over a watched mapping replaces it with no event: docs/semantics.md).
// - Blind (older kernels).  Each subscription registers its 2 MiB-aligned blocks once, then
//   its exact pages, which is correct whatever the block holds.
//
// An event the thread has read but not yet applied leaves the unmapping thread free to map
// and register the same pages again before the marks are cleared, and one the kernel holds
// unread leaves another thread free to: while one is pending (Monitor::has_pending) or
// waiting in the kernel (UffdWatcher::event_waiting), marked pages are registered anyway.
//
// Deadlock rules: the thread reads every queued event (which releases the unmapping
// threads) before it takes any lock, and no lock it takes is ever held by a thread while
// that thread unmaps or frees.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

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
    uint64_t registrations = 0;  // subscriptions that registered pages (one ioctl or more)
    uint64_t scans = 0;          // questions to the kernel: which pages are watched
    uint64_t known = 0;          // subscriptions of marked pages: no system call
  };
  Counts counts();
  // Whether this kernel lets the monitor know which pages it watches (started monitors only),
  // and why not when it does not.
  bool knows_watched();
  std::string why_not_known();

 private:
  friend class UffdMonitorTestPeer;
  UffdMonitor() = default;
  void before_fork() override;
  void after_fork_in_parent() override;
  void after_fork_in_child() override;
  void on_change(const AddressRangeEvent& change);
  void forget_blocks(uintptr_t start, uintptr_t end);

  static constexpr uintptr_t kBlock = 2u << 20;
  static constexpr uintptr_t kPage = 4096;
  static constexpr size_t kPagesPerBlock = kBlock / kPage;
  struct Block {
    uint32_t references = 0;
    bool registered = false;      // blind: what was mapped in it is registered; no event since
    bool scan_due = false;        // knowing: registered in since the last scan or event
    uintptr_t registered_from = 0;  // knowing: what those registrations covered, while due
    uintptr_t registered_to = 0;
    uint64_t known[kPagesPerBlock / 64] = {};  // knowing: pages marked watched, one bit each

    // Indexes [first, end) of the block's pages that [from, to) touches.
    static std::pair<size_t, size_t> pages(uintptr_t block, uintptr_t from, uintptr_t to);
    bool knows(uintptr_t block, uintptr_t from, uintptr_t to) const;
    void mark(uintptr_t block, uintptr_t from, uintptr_t to, bool watched);
  };
  Status subscribe_knowing(uintptr_t start, uintptr_t end);
  Status subscribe_blind(uintptr_t start, uintptr_t end);
  // Registers [from, to) within `block` (knowing): its mapping's part in the block when the
  // range lies in one mapping, else the exact pages; returns what it registered.
  Result<MappingQuery::Run> register_in_block(uintptr_t block, uintptr_t from, uintptr_t to);
  // The block's state (under blocks_mutex_); it exists: subscribe() files every block of a
  // range before it looks at any.
  Block& state_of(uintptr_t block);
  // Files a state for each block of [start, end) that has none, under `lock` (of
  // blocks_mutex_), whose map nodes are made in `spare` with the lock released (the caller
  // frees what is left of it after letting go of the lock): nothing under blocks_mutex_
  // should allocate.  A thread that holds malloc's lock while it unmaps watched
  // memory (free() trimming the heap) waits until our thread reads its event; had we waited
  // for malloc under blocks_mutex_ while our thread waited for blocks_mutex_ (forget_blocks)
  // before it read that event, all three would wait for ever.
  void file_blocks(uintptr_t start, uintptr_t end, std::unique_lock<std::mutex>& lock,
                   std::map<uintptr_t, Block>& spare);
  // Asks the kernel which pages of the mapping holding `address` in `block` are watched and
  // marks them.
  void scan(uintptr_t block, uintptr_t address, Block& state);

  std::mutex start_mutex_;
  std::unique_ptr<UffdWatcher> watcher_;
  std::string why_not_known_;  // set by start(), under start_mutex_

  std::mutex blocks_mutex_;
  std::map<uintptr_t, Block> blocks_;  // never erased: a Block& stays valid
  uintptr_t last_block_ = 0;           // state_of()'s last answer, under blocks_mutex_
  Block* last_state_ = nullptr;
  Counts counts_;  // under blocks_mutex_
  // Lets a test change the pages between their registration and its check (test peer only).
  void (*after_registration_for_test_)(uintptr_t address) = nullptr;
};

}  // namespace hmr::core
