// Event queue: where asynchronous registrations complete (fi_eq with FI_REG_MR).
#pragma once

#include <hmr/hmr.h>

#include <atomic>
#include <condition_variable>
#include <list>
#include <mutex>
#include <string>

#include "util/object.h"
#include "util/status.h"

namespace hmr::core {

class EventQueue : public Tagged<ObjectClass::event_queue> {
  struct Event {
    uint32_t kind = HMR_MR_COMPLETE;
    hmr_fid* fid = nullptr;
    void* context = nullptr;
    int error = 0;  // positive HMR_E* for an error entry
    std::string reason;
  };

 public:
  EventQueue() = default;

  // The room for one event, taken where running out of memory can still be answered (the
  // registration's call), so that posting it later, on hmr's own thread, allocates nothing
  // and cannot fail: an event lost there left the application waiting for it for ever.
  class Reserved {
    friend class EventQueue;
    std::list<Event> node_;  // one node, spliced into the queue by post()
  };
  static Reserved reserve();  // may throw std::bad_alloc
  // Posts the completion of `fid`'s registration into the reserved room: an error entry with
  // `failure`'s code and reason (moved, not copied) when it failed.
  void post(Reserved&& room, hmr_fid* fid, void* context, Status&& failure);
  // Removes every unread event that names `fid` (its MR is being closed).
  void withdraw(hmr_fid* fid);

  // 1 and the entry; -HMR_EAGAIN when empty; -HMR_EAVAIL when an error entry is next.
  int read(uint32_t* event, hmr_eq_entry* entry);
  // -HMR_EBADF when the queue was closed while it waited.
  int wait_and_read(uint32_t* event, hmr_eq_entry* entry, int timeout_ms);
  // hmr_eq_close: wakes every thread waiting in wait_and_read (each returns -HMR_EBADF) and
  // returns once none is inside, so the queue may be freed.
  void wake_waiters_for_close();
  // Threads inside wait_and_read now (for tests that must know a reader is waiting).
  int waiters();
  int read_error(hmr_eq_err_entry* entry);

  void bind_domain() { bound_domains_.fetch_add(1); }
  void unbind_domain() { bound_domains_.fetch_sub(1); }
  bool has_bound_domains() const { return bound_domains_.load() != 0; }

 private:
  int read_locked(uint32_t* event, hmr_eq_entry* entry);

  std::mutex mutex_;
  std::condition_variable arrived_;
  std::condition_variable waiter_left_;
  int waiters_ = 0;       // threads inside wait_and_read (under mutex_)
  bool closing_ = false;  // hmr_eq_close began (under mutex_)
  std::list<Event> events_;
  std::atomic<int> bound_domains_{0};
};

}  // namespace hmr::core
