// OwnedAllocations: the memory an iface allocated itself, by device VA.
//
// Runtimes without a pointer query (Neuron, SynapseAI) can describe only memory hmr allocated,
// so their iface keeps each allocation's owner here and answers query/export from this table.
// Owner frees the allocation when destroyed; Details is what a lookup copies out with the
// span (the runtime's handle, the device), so no lock is ever held across a runtime call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace hmr::hmem {

template <typename Owner, typename Details>
class OwnedAllocations {
 public:
  // One allocation as a lookup sees it: a copy, valid after the lock is gone.
  struct Span {
    uintptr_t base = 0;
    size_t len = 0;
    uint64_t alloc_id = 0;  // new for every allocation, so a reused VA is never mistaken for it
    Details details{};
  };

  // Takes `owner` for [base, base + len); false, leaving `owner` with the caller, when a live
  // allocation already starts at `base` (a runtime reusing a live address).  The caller then
  // reports that, and its owner frees the new allocation outside the lock.
  bool add(uintptr_t base, size_t len, Owner&& owner, Details details) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (entries_.contains(base)) return false;
    entries_.emplace(base, Entry{std::move(owner), Span{base, len, next_alloc_id_++, details}});
    return true;
  }

  // The allocation holding `address`, if one does.
  std::optional<Span> find(uintptr_t address) const {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = entries_.upper_bound(address);
    if (it == entries_.begin()) return std::nullopt;
    --it;
    if (address >= it->first + it->second.span.len) return std::nullopt;
    return it->second.span;
  }

  // Removes the allocation starting exactly at `base` and hands its owner to the caller, who
  // frees it outside the lock; nullopt when none starts there.
  std::optional<Owner> take(uintptr_t base) {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = entries_.find(base);
    if (it == entries_.end()) return std::nullopt;
    std::optional<Owner> owner(std::move(it->second.owner));
    entries_.erase(it);
    return owner;
  }

  // Puts back an owner take() handed out whose runtime refused to free it (Gaudi memory still
  // exported), under its old span and identity; false, leaving `owner` with the caller, when an
  // allocation now starts at its base.  Between take() and restore() lookups miss it.
  bool restore(const Span& span, Owner&& owner) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (entries_.contains(span.base)) return false;
    entries_.emplace(span.base, Entry{std::move(owner), span});
    return true;
  }

  // Frees every allocation; for the iface's destructor, while the runtime is still loaded.
  void clear() {
    std::map<uintptr_t, Entry> doomed;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      doomed.swap(entries_);
    }
  }

 private:
  struct Entry {
    Owner owner;
    Span span;
  };

  mutable std::mutex mutex_;  // guards the two below; never held while an owner frees
  uint64_t next_alloc_id_ = 1;
  std::map<uintptr_t, Entry> entries_;  // keyed by base
};

}  // namespace hmr::hmem
