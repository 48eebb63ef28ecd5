#include "core/event_queue.h"

#include <chrono>
#include <cstring>

namespace hmr::core {

EventQueue::Reserved EventQueue::reserve() {
  Reserved room;
  room.node_.emplace_back();
  return room;
}

void EventQueue::post(Reserved&& room, hmr_fid* fid, void* context, Status&& failure) {
  Event& event = room.node_.front();
  event.fid = fid;
  event.context = context;
  if (!failure.ok()) {
    event.error = failure.code();
    event.reason = std::move(failure).take_reason();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.splice(events_.end(), room.node_);
  }
  arrived_.notify_all();
}

void EventQueue::withdraw(hmr_fid* fid) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(events_, [fid](const Event& event) { return event.fid == fid; });
}

int EventQueue::read_locked(uint32_t* event, hmr_eq_entry* entry) {
  if (events_.empty()) return -HMR_EAGAIN;
  const Event& next = events_.front();
  if (next.error != 0) return -HMR_EAVAIL;
  *event = next.kind;
  *entry = hmr_eq_entry{next.fid, next.context, 0};
  events_.pop_front();
  return 1;
}

int EventQueue::read(uint32_t* event, hmr_eq_entry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  return read_locked(event, entry);
}

int EventQueue::wait_and_read(uint32_t* event, hmr_eq_entry* entry, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closing_) return -HMR_EBADF;
  ++waiters_;
  auto ready = [this] { return !events_.empty() || closing_; };
  const bool woken = timeout_ms < 0
                         ? (arrived_.wait(lock, ready), true)
                         : arrived_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
  // Leaving: a closing queue is freed once the last waiter has let go of its mutex.
  if (--waiters_ == 0 && closing_) waiter_left_.notify_all();
  if (closing_) return -HMR_EBADF;
  if (!woken) return -HMR_ETIMEDOUT;
  return read_locked(event, entry);
}

int EventQueue::waiters() {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiters_;
}

void EventQueue::wake_waiters_for_close() {
  std::unique_lock<std::mutex> lock(mutex_);
  closing_ = true;
  arrived_.notify_all();
  waiter_left_.wait(lock, [this] { return waiters_ == 0; });
}

int EventQueue::read_error(hmr_eq_err_entry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty() || events_.front().error == 0) return -HMR_EAGAIN;
  const Event& next = events_.front();
  hmr_eq_err_entry out{};
  out.fid = next.fid;
  out.context = next.context;
  out.err = next.error;
  std::strncpy(out.reason, next.reason.c_str(), sizeof out.reason - 1);
  *entry = out;
  events_.pop_front();
  return 1;
}

}  // namespace hmr::core
