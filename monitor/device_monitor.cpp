#include "monitor/device_monitor.h"

#include <mutex>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "hmem/dmabuf_share.h"
#include "util/fork_held_lock.h"
#include "util/log.h"

namespace hmr::core {

DeviceMonitor& DeviceMonitor::instance() {
  static DeviceMonitor* monitor = new DeviceMonitor();  // outlives every static cache
  return *monitor;
}

namespace {
[[maybe_unused]] const bool fork_handlers_registered =
    hold_lock_across_fork<&DeviceMonitor::fork_lock>();
}  // namespace

Status DeviceMonitor::subscribe(uintptr_t start, size_t len) {
  (void)start, (void)len;
  return ok_status();  // identities and callbacks, not ranges, tell device frees
}

void DeviceMonitor::unsubscribe(uintptr_t start, size_t len) { (void)start, (void)len; }

namespace {
using Piece = hmem::PointerInfo::Piece;
}  // namespace

bool DeviceMonitor::recorded(const Known& known, const Piece& piece, int iface) {
  return known.alloc_id == piece.alloc_id && known.iface == iface && known.length == piece.length;
}

void DeviceMonitor::observe(hmem::Iface& iface, const hmem::PointerInfo& memory) {
  const bool free_events = iface.free_tracking() == hmem::Iface::FreeTracking::free_events;
  // Without an id or free events there is nothing to compare or watch (memory that was only
  // declared, of runtimes that report nothing): explicit invalidation is its monitor.
  if (memory.alloc_id == 0 && !free_events) return;
  // What is recorded is each separately allocated piece, not the range a registration covers:
  // pieces of live memory never overlap, so a new piece over a known one means the known one
  // was freed.  (Ranges do overlap while alive: a buffer inside CUDA VMM segment 0 and one
  // across segments 0 and 1 share a base, and taking one for a free of the other dropped both
  // sides' registrations at every registration of PyTorch's expandable segments.)
  const Piece whole{memory.base, memory.alloc_len, memory.alloc_id};
  const std::span<const Piece> pieces =
      memory.pieces.empty() ? std::span<const Piece>(&whole, 1) : std::span<const Piece>(memory.pieces);
  bool all_known = true;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    for (const Piece& piece : pieces) {
      auto found = known_.find(piece.base);
      if (found == known_.end() || !recorded(found->second, piece, memory.iface)) {
        all_known = false;
        break;
      }
    }
  }
  if (all_known) return;  // the common case: nothing new
  std::vector<std::pair<uint64_t, uint64_t>> stale;
  // Out of memory midway, what was found stale and forgotten is still notified before the
  // caller hears of it: a record is erased only once its range is in `stale` (a forgotten
  // record's caches would never be told again), and a piece left unrecorded is seen again
  // at its next registration.
  bool ran_out_of_memory = false;
  try {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    for (const Piece& piece : pieces) {
      const uint64_t end = piece.base + piece.length;
      auto it = known_.lower_bound(piece.base);
      if (it != known_.begin()) {
        auto before = std::prev(it);
        if (before->first + before->second.length > piece.base) it = before;
      }
      while (it != known_.end() && it->first < end) {
        if (it->first == piece.base && recorded(it->second, piece, memory.iface)) {
          ++it;  // known already (or another thread recorded it meanwhile)
          continue;
        }
        if (it->first + it->second.length > piece.base) {
          stale.emplace_back(it->first, it->first + it->second.length);
        }
        it = known_.erase(it);
      }
      known_.emplace(piece.base, Known{piece.length, piece.alloc_id, memory.iface});
    }
  } catch (const std::bad_alloc&) {
    ran_out_of_memory = true;
  }
  for (const auto& [start, stop] : stale) {
    generation_.fetch_add(1, std::memory_order_acq_rel);
    DmabufShares::instance().forget_range(start, stop);
    notify(start, stop);
  }
  if (ran_out_of_memory) throw std::bad_alloc();
}

bool DeviceMonitor::watch(hmem::Iface& iface, const hmem::PointerInfo& memory) {
  if (iface.free_tracking() != hmem::Iface::FreeTracking::free_events) return true;
  // Only memory told apart by nothing but its free report depends on the watch.
  const bool needs_watch = memory.alloc_id == 0 && memory.pieces.empty();
  const Piece whole{memory.base, memory.alloc_len, memory.alloc_id};
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto found = known_.find(memory.base);
    if (found != known_.end() && recorded(found->second, whole, memory.iface) &&
        found->second.watched) {
      return true;  // the common case: watched already
    }
  }
  // Asked again while the record is not watched (a refusal may have been passing), never
  // while it is: the iface keeps one runtime registration per allocation.
  Status watched = iface.watch_free(memory, &DeviceMonitor::on_free, this);
  if (!watched.ok()) {
    log_message(LogLevel::warn, "%s memory at 0x%llx: no free notification (%s); it is "
                "registered without the cache", iface.name(),
                static_cast<unsigned long long>(memory.base), watched.reason().c_str());
    return !needs_watch;
  }
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto found = known_.find(memory.base);
  if (found == known_.end() || !recorded(found->second, whole, memory.iface)) {
    return !needs_watch;  // freed (and forgotten) since it was observed
  }
  found->second.watched = true;
  return true;
}

bool DeviceMonitor::frees_reported(uintptr_t start, size_t len) {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = known_.upper_bound(start);
  if (it == known_.begin()) return false;
  --it;
  return it->second.watched && start + len <= it->first + it->second.length;
}

void DeviceMonitor::on_free(void* context, uint64_t base, size_t alloc_len) {
  static_cast<DeviceMonitor*>(context)->invalidate_everywhere(base, base + alloc_len);
}

void DeviceMonitor::forget(uintptr_t start, uintptr_t end) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = known_.lower_bound(start);
  if (it != known_.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.length > start) it = before;
  }
  while (it != known_.end() && it->first < end) it = known_.erase(it);
}

void DeviceMonitor::invalidate_everywhere(uintptr_t start, uintptr_t end) {
  // Before the caches drop anything: a hint read after this is not trusted any more.
  generation_.fetch_add(1, std::memory_order_acq_rel);
  forget(start, end);
  DmabufShares::instance().forget_range(start, end);
  notify(start, end);
}

}  // namespace hmr::core
