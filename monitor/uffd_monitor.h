// Host-memory monitor on userfaultfd: one thread for the process, ranges watched in
// write-protect mode (no page is ever protected, so no fault is trapped) and reported on
// UNMAP, REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap).
//
// Each subscription registers its 2 MiB-aligned blocks once (reference-counted) and then its
// exact pages.  The blocks keep the kernel's mappings whole: registering every small region
// on its own would split them until vm.max_map_count is hit.  The exact pages make it
// correct: a block registered while it had a hole does not cover what is mapped there later
// (the kernel registers the mappings present and skips holes), so the block is never trusted.
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

 private:
  UffdMonitor() = default;
  void on_change(const AddressRangeEvent& change);
  void forget_blocks(uintptr_t start, uintptr_t end);

  static constexpr uintptr_t kBlock = 2u << 20;
  struct Block {
    uint32_t references = 0;
    bool registered = false;  // what was mapped in the block is registered
  };

  std::mutex start_mutex_;
  std::unique_ptr<UffdWatcher> watcher_;

  std::mutex blocks_mutex_;
  std::map<uintptr_t, Block> blocks_;
};

}  // namespace hmr::core
