// One dma-buf export per device allocation, shared by every NIC registration inside it.
//
// Exporting costs a driver call and an fd; NICs import the same dma-buf at different offsets
// for different sub-ranges, so hmr exports the whole allocation once (on the first
// registration that needs it) and hands each registration (fd, offset of its range, length).
// Each holder keeps a reference; the fd is closed when the last registration inside the
// allocation goes.  Process-wide: registrations in different domains share it too.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "hmem/iface.h"
#include "util/status.h"

namespace hmr::core {

class SharedExport {
 public:
  SharedExport(hmem::DmabufExport exported, uint64_t base) : export_(std::move(exported)), base_(base) {}
  int fd() const { return export_.fd.get(); }
  // Where `address` (inside the allocation) lies in the dma-buf.
  uint64_t offset_of(uintptr_t address) const { return export_.offset + (address - base_); }
  size_t exported_len() const { return export_.exported_len; }

 private:
  hmem::DmabufExport export_;  // owns the fd
  uint64_t base_;
};

class DmabufShares {
 public:
  static DmabufShares& instance();

  // The export of the allocation `memory` describes, made through `iface` on first use.  No
  // lock is held while the driver exports.  `shareable` false (what names the allocation may
  // name a later one at the same address: ROCr memory whose free hmr cannot hear) makes an
  // export of this caller's own, never found by another: a new allocation at a freed one's
  // address was registered against the freed one's dma-buf (found by a review).  Nor is an
  // export shared that was made while forget_range() ran: its allocation may be the freed one.
  Result<std::shared_ptr<const SharedExport>> acquire(hmem::Iface& iface,
                                                      const hmem::PointerInfo& memory,
                                                      bool shareable = true);
  // The allocations starting in [start, end) are gone (freed, or invalidated by the
  // application): later registrations export anew.  Registrations holding an old export keep
  // it until they go.  Needed where an allocation has no id (ROCr, declared memory), so a new
  // allocation at the same address would otherwise find the old export.
  void forget_range(uintptr_t start, uintptr_t end);
  // Allocations with a live export (for tests and diagnostics).
  size_t live_exports();
  // Descriptors hmr let go of so far, exports' and probes' (below): a caller whose export
  // failed for want of descriptors tries again when this moved since its attempt began.
  uint64_t closed_descriptors() const {
    return closes_finished_.load(std::memory_order_acquire);
  }
  // closed_descriptors() once no close is under way: an fd closed but not yet counted would
  // let a caller find the table with room and take its failure for the driver's.
  uint64_t settled_closed_descriptors() const;
  // util/descriptor_table.h's answer, its probe counted as a close: for the moment it holds a
  // slot, another thread's export can fail for want of it.
  int descriptor_shortage();
  // Its lock, held across fork() (util/fork_held_lock.h).
  static std::mutex& fork_lock() { return instance().mutex_; }

 private:
  // iface, base, allocation id, allocation length.  The length too: declared memory (Neuron
  // tensors the application allocated) has no id and its "allocation" is the range declared,
  // so a longer range at the same start must not get the shorter range's export.
  using Key = std::tuple<int, uint64_t, uint64_t, uint64_t>;
  void forget(const Key& key);

  std::mutex mutex_;
  std::map<Key, std::weak_ptr<const SharedExport>> exports_;
  uint64_t forgets_ = 0;  // forget_range() calls so far, under mutex_
  // Closes begun and finished (begun before the fd is opened or closed, finished after).
  // Invariant: begun >= finished, equal when no close is under way.  A child of fork() may
  // inherit a close under way in another thread: its handler makes them equal again.
  std::atomic<uint64_t> closes_begun_{0};
  std::atomic<uint64_t> closes_finished_{0};
  friend void settle_closes_in_child();
};

}  // namespace hmr::core
