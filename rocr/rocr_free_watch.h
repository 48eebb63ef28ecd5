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
#include <memory>
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
  // Registering the trampoline for `base` once more takes three steps, because the runtime may
  // call it (a free on another thread) before its registration call returns, and a free
  // delivered to nobody would leave the table believing in a registration the runtime has
  // already dropped (every later allocation at the address would then count as watched, and
  // its free would never be heard: a stale registration served).  So:
  //   add_pending   before the runtime is asked: the watcher is in the table, and a free
  //                 arriving meanwhile reaches it; returns the token of this allocation's entry;
  //   confirm       after the runtime took it: false when the allocation was freed meanwhile
  //                 (its entry is gone or is another allocation's), so the watch is not in place;
  //   abandon       after the runtime refused.
  // Two threads may both register a new base; the second trampoline call finds nothing left
  // to deliver, and shutdown deregisters both.
  uint64_t add_pending(uint64_t base, size_t len, FreeCallback on_free, void* context);
  bool confirm(uint64_t base, uint64_t token);
  void abandon(uint64_t base, uint64_t token, void* context);
  void remove(uint64_t base, void* context);

  // Every base with how often the trampoline is registered on it; empties the table.
  std::vector<std::pair<uint64_t, int>> take_registrations();

  // Keeps an emptied table (take_registrations) for the rest of the process: the runtime
  // refused to deregister a callback naming it, and may still call the trampoline with it.
  // Reachable from a list that is never freed, so leak checkers see no leak.
  static void keep_for_late_callbacks(std::unique_ptr<FreeWatchTable> table);

 private:
  struct Watcher {
    FreeCallback on_free;
    void* context;
  };
  struct Allocation {
    uint64_t token = 0;     // which allocation at this base the entry is (add_pending's answer)
    size_t len = 0;
    int registrations = 0;  // confirmed by the runtime
    int pending = 0;        // asked of the runtime, not answered yet
    std::vector<Watcher> watchers;
  };

  static void upsert(Allocation& allocation, FreeCallback on_free, void* context);
  // The allocation at `base` was freed: calls its watchers, without the lock held.
  void deliver(uint64_t base);

  std::mutex mutex_;
  std::unordered_map<uint64_t, Allocation> allocations_;
  uint64_t next_token_ = 0;
};

}  // namespace hmr::rocr
