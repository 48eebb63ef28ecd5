#include "hmem/dmabuf_share.h"

#include "util/descriptor_table.h"
#include "util/fork_held_lock.h"

#include <pthread.h>

#include <thread>

namespace hmr::core {

DmabufShares& DmabufShares::instance() {
  static DmabufShares* shares = new DmabufShares();  // outlives every static cache
  return *shares;
}

void settle_closes_in_child() {
  DmabufShares& shares = DmabufShares::instance();
  shares.closes_begun_.store(shares.closes_finished_.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
}

namespace {
[[maybe_unused]] const bool fork_handlers_registered =
    hold_lock_across_fork<&DmabufShares::fork_lock>() &&
    pthread_atfork(nullptr, nullptr, &settle_closes_in_child) == 0;
}  // namespace

Result<std::shared_ptr<const SharedExport>> DmabufShares::acquire(hmem::Iface& iface,
                                                                   const hmem::PointerInfo& memory,
                                                                   bool shareable) {
  const Key key{memory.iface, memory.base, memory.alloc_id, memory.alloc_len};
  uint64_t forgets_before = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    forgets_before = forgets_;
    auto found = shareable ? exports_.find(key) : exports_.end();
    if (found != exports_.end()) {
      if (std::shared_ptr<const SharedExport> live = found->second.lock()) return live;
    }
  }
  Result<hmem::DmabufExport> exported = iface.export_dmabuf(
      hmem::MemoryRange{reinterpret_cast<const void*>(static_cast<uintptr_t>(memory.base)),
                        memory.alloc_len});
  if (!exported.ok()) return exported.status();
  std::shared_ptr<const SharedExport> made(
      new SharedExport(std::move(*exported), memory.base), [this, key](const SharedExport* dying) {
        forget(key);
        closes_begun_.fetch_add(1, std::memory_order_acq_rel);
        delete dying;  // closes the fd, outside the lock
        closes_finished_.fetch_add(1, std::memory_order_acq_rel);
      });

  std::lock_guard<std::mutex> lock(mutex_);
  // (Its deleter's forget() erases only an expired slot, so an unlisted export touches none.)
  if (!shareable || forgets_ != forgets_before) return made;
  std::weak_ptr<const SharedExport>& slot = exports_[key];
  if (std::shared_ptr<const SharedExport> raced = slot.lock()) {
    return raced;  // another thread exported meanwhile: ours closes when `made` goes
  }
  slot = made;
  return made;
}

void DmabufShares::forget(const Key& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = exports_.find(key);
  // Only an expired slot is ours to erase: a racing export may have replaced it.
  if (found != exports_.end() && found->second.expired()) exports_.erase(found);
}

void DmabufShares::forget_range(uintptr_t start, uintptr_t end) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++forgets_;
  std::erase_if(exports_, [&](const auto& entry) {
    const uint64_t base = std::get<1>(entry.first);
    return base >= start && base < end;
  });
}

uint64_t DmabufShares::settled_closed_descriptors() const {
  for (;;) {
    const uint64_t finished = closes_finished_.load(std::memory_order_acquire);
    if (closes_begun_.load(std::memory_order_acquire) == finished) return finished;
    // A close under way: the last reference to a dma-buf runs its exporter's release in the
    // driver, which is short but not a few instructions.
    std::this_thread::yield();
  }
}

int DmabufShares::descriptor_shortage() {
  closes_begun_.fetch_add(1, std::memory_order_acq_rel);
  const int shortage = hmr::descriptor_shortage();
  if (shortage == 0) {
    closes_finished_.fetch_add(1, std::memory_order_acq_rel);  // its probe held a slot
  } else {
    // Nothing was opened: no one's export failed for it, and counting it would have threads
    // that all find the table full retry on each other's questions for ever.
    closes_begun_.fetch_sub(1, std::memory_order_acq_rel);
  }
  return shortage;
}

size_t DmabufShares::live_exports() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t live = 0;
  for (const auto& [key, weak] : exports_) live += weak.expired() ? 0 : 1;
  return live;
}

}  // namespace hmr::core
