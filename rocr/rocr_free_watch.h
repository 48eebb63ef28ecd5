// Free notifications for ROCr allocations: many watchers per allocation on one runtime callback.
//
// ROCr tells of a free through hsa_amd_register_deallocation_callback(ptr, callback, user_data),
// but its deregistration matches only (ptr, callback), so two registrations of one callback on
// one pointer cannot be told apart.  hmr therefore registers one trampoline per allocation base,
// with this table as user_data, and keeps the watchers (callback, context) here.  unwatch only
// drops a watcher: the runtime registration stays until the allocation is freed (the runtime
// then forgets it by itself) or the table's owner deregisters everything at shutdown.  That way
// no deregistration ever races with a free that is already calling the trampoline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hmem/iface.h"

namespace hmr::rocr {

class FreeWatchTable {
 public:
  using FreeCallback = hmem::Iface::FreeCallback;

  // The hsa_amd_deallocation_callback_t to register, with the table as user_data.
  static void trampoline(void* ptr, void* table);

  // Adds (or replaces the callback of) watcher `context` on `base` when the runtime already
  // calls the trampoline for `base`; false means the caller must register first.
  bool add_if_registered(uint64_t base, size_t len, FreeCallback on_free, void* context);
  // After the caller registered the trampoline for `base` once more: records that and adds the
  // watcher.  Two threads may both register a new base; the second trampoline call finds
  // nothing left to deliver, and shutdown deregisters both.
  void add_registered(uint64_t base, size_t len, FreeCallback on_free, void* context);
  void remove(uint64_t base, void* context);

  // Every base with how often the trampoline is registered on it; empties the table.
  std::vector<std::pair<uint64_t, int>> take_registrations();

 private:
  struct Watcher {
    FreeCallback on_free;
    void* context;
  };
  struct Allocation {
    size_t len = 0;
    int registrations = 0;
    std::vector<Watcher> watchers;
  };

  static void upsert(Allocation& allocation, FreeCallback on_free, void* context);
  // The allocation at `base` was freed: calls its watchers, without the lock held.
  void deliver(uint64_t base);

  std::mutex mutex_;
  std::unordered_map<uint64_t, Allocation> allocations_;
};

}  // namespace hmr::rocr
