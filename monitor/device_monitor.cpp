#include "monitor/device_monitor.h"

#include <algorithm>
#include <iterator>
#include <mutex>
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

void DeviceMonitor::observe(hmem::Iface& iface, const hmem::PointerInfo& memory) {
  const bool free_events = iface.free_tracking() == hmem::Iface::FreeTracking::free_events;
  // Without an id or free events there is nothing to compare or watch (memory that was only
  // declared, of runtimes that report nothing): explicit invalidation is its monitor.
  if (memory.alloc_id == 0 && !free_events) return;
  const View view{memory.base, memory.alloc_len};
  const uint64_t end = memory.base + memory.alloc_len;
  auto same = [&](const Known& known) {
    return known.alloc_id == memory.alloc_id && known.iface == memory.iface;
  };
  // Which recorded views overlap it: a view at the same base and length under another id was
  // freed (the runtime names the range differently now).  Any other overlapping view is
  // either another view of live memory (segments of one VMM reservation) or was freed; the
  // runtime is asked which, outside the lock (a driver call).  Runtimes that report frees
  // (free_events) have reported any free already, and an allocation without an id cannot be
  // told apart: there, an overlap is a free, as it always was.
  std::vector<std::pair<View, Known>> overlapping;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto found = known_.find(view);
    if (found != known_.end() && same(found->second)) return;  // the common case: known
    for (auto it = first_overlapping(memory.base); it != known_.end() && it->first.first < end;
         ++it) {
      if (it->first != view && it->first.first + it->first.second > memory.base) {
        overlapping.emplace_back(*it);
      }
    }
  }
  std::vector<View> alive;
  if (!free_events) {
    for (const auto& [other, known] : overlapping) {
      if (known.iface != memory.iface || known.alloc_id == 0) continue;
      Result<hmem::PointerInfo> now =
          iface.query(reinterpret_cast<const void*>(static_cast<uintptr_t>(other.first)),
                      other.second);
      if (now.ok() && now->base == other.first && now->alloc_len == other.second &&
          now->alloc_id == known.alloc_id) {
        alive.push_back(other);
      }
    }
  }
  auto asked = [&](const View& other, const Known& known) {
    for (const auto& [seen, then] : overlapping) {
      if (seen == other) return then.alloc_id == known.alloc_id;
    }
    return false;
  };
  // Under the lock again: drop what was found freed.  A view another thread recorded after
  // the look above (not asked about) stays: its registration resolved it just now.  A stale
  // view's range is dropped from every cache whole, which may take entries of a live view
  // inside it too (never stale, one re-registration); its dma-bufs are forgotten likewise.
  std::vector<View> stale;
  bool inserted = false;
  {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    auto it = first_overlapping(memory.base);
    while (it != known_.end() && it->first.first < end) {
      const View other = it->first;
      const bool overlaps = other.first + other.second > memory.base;
      const bool freed =
          overlaps && (other == view ? !same(it->second)
                                     : asked(other, it->second) &&
                                           std::find(alive.begin(), alive.end(), other) ==
                                               alive.end());
      if (!freed) {
        ++it;
        continue;
      }
      stale.push_back(other);
      it = erase(it);
    }
    if (known_.find(view) == known_.end()) {
      record(view, Known{memory.alloc_id, memory.iface});
      inserted = true;
    }
  }
  for (const auto& [base, length] : stale) {
    generation_.fetch_add(1, std::memory_order_acq_rel);
    DmabufShares::instance().forget_range(base, base + length);
    notify(base, base + length);
  }
  if (inserted && free_events) {
    Status watched = iface.watch_free(memory, &DeviceMonitor::on_free, this);
    if (!watched.ok()) {
      log_message(LogLevel::warn, "%s memory at 0x%llx: no free notification (%s); its cached "
                  "registrations are dropped when the address is registered again",
                  iface.name(), static_cast<unsigned long long>(memory.base),
                  watched.reason().c_str());
      return;
    }
    std::unique_lock<std::shared_mutex> lock(mutex_);
    auto found = known_.find(view);
    if (found != known_.end() && same(found->second)) found->second.watched = true;
  }
}

bool DeviceMonitor::frees_reported(uintptr_t start, size_t len) {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  for (auto it = first_overlapping(start); it != known_.end() && it->first.first <= start;
       ++it) {
    if (it->second.watched && start + len <= it->first.first + it->first.second) return true;
  }
  return false;
}

DeviceMonitor::Views::iterator DeviceMonitor::first_overlapping(uint64_t start) {
  const uint64_t longest = lengths_.empty() ? 0 : lengths_.rbegin()->first;
  const uint64_t lowest = start >= longest ? start - longest + 1 : 0;
  return known_.lower_bound(View{lowest, 0});
}

void DeviceMonitor::record(const View& view, const Known& known) {
  if (known_.emplace(view, known).second) ++lengths_[view.second];
}

DeviceMonitor::Views::iterator DeviceMonitor::erase(Views::iterator view) {
  auto length = lengths_.find(view->first.second);
  if (length != lengths_.end() && --length->second == 0) lengths_.erase(length);
  return known_.erase(view);
}

void DeviceMonitor::on_free(void* context, uint64_t base, size_t alloc_len) {
  static_cast<DeviceMonitor*>(context)->invalidate_everywhere(base, base + alloc_len);
}

void DeviceMonitor::forget(uintptr_t start, uintptr_t end) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = first_overlapping(start);
  while (it != known_.end() && it->first.first < end) {
    it = it->first.first + it->first.second > start ? erase(it) : std::next(it);
  }
}

void DeviceMonitor::invalidate_everywhere(uintptr_t start, uintptr_t end) {
  // Before the caches drop anything: a hint read after this is not trusted any more.
  generation_.fetch_add(1, std::memory_order_acq_rel);
  forget(start, end);
  DmabufShares::instance().forget_range(start, end);
  notify(start, end);
}

}  // namespace hmr::core
