// core::EventQueue's close against readers waiting on it (hmr_eq_close, hmr_eq_sread).
#include "core/event_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace hmr::core {
namespace {

// A reader blocked in hmr_eq_sread is how an application waits for registrations; closing the
// queue must wake it with an error before the queue goes (a reader without a timeout waited
// for ever, one with a timeout woke on the freed queue's mutex).
TEST(EventQueue, ClosingWakesEveryReaderWaitingOnIt) {
  for (const int timeout_ms : {-1, 60000}) {
    SCOPED_TRACE(timeout_ms);
    auto* queue = new EventQueue();
    std::vector<std::future<int>> readers;
    for (int i = 0; i < 3; ++i) {
      readers.push_back(std::async(std::launch::async, [queue, timeout_ms] {
        uint32_t event = 0;
        hmr_eq_entry entry{};
        return queue->wait_and_read(&event, &entry, timeout_ms);
      }));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (queue->waiters() < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(queue->waiters(), 3) << "the readers never waited";
    queue->wake_waiters_for_close();  // returns once none is inside
    EXPECT_EQ(queue->waiters(), 0);
    delete queue;
    for (auto& reader : readers) {
      ASSERT_EQ(reader.wait_for(std::chrono::seconds(30)), std::future_status::ready);
      EXPECT_EQ(reader.get(), -HMR_EBADF);
    }
  }
}

TEST(EventQueue, AReadAfterCloseBeganIsRefused) {
  EventQueue queue;
  queue.wake_waiters_for_close();
  uint32_t event = 0;
  hmr_eq_entry entry{};
  EXPECT_EQ(queue.wait_and_read(&event, &entry, 10), -HMR_EBADF);
}

}  // namespace
}  // namespace hmr::core
