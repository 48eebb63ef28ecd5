// Monitor::notify on an application's thread runs in two halves (monitor/monitor.h): the sinks
// drop the range under the sinks' lock, and the deregistrations they deferred run after it is
// released, each sink pinned meanwhile so that remove_sink() waits for it.  A test monitor and
// test sinks whose second half blocks until the test lets it go.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "monitor/monitor.h"

namespace hmr::core {
namespace {

class TestMonitor final : public Monitor {
 public:
  const char* name() const override { return "test"; }
  Status start() override { return ok_status(); }
  void stop() override {}
  Status subscribe(uintptr_t, size_t) override { return ok_status(); }
  void unsubscribe(uintptr_t, size_t) override {}
};

// A sink whose invalidation always leaves work for the second half, which waits while `hold`.
class HeldSink final : public InvalidationSink {
 public:
  void invalidate(uintptr_t, uintptr_t) override { deferred_.store(defers.load()); }
  bool has_deferred() const override { return deferred_; }
  void finish_invalidations() override {
    deferred_ = false;
    inside.store(true);
    while (hold.load()) std::this_thread::yield();
    inside.store(false);
    finished.fetch_add(1);
  }
  std::atomic<bool> defers{true};
  std::atomic<bool> hold{false};
  std::atomic<bool> inside{false};
  std::atomic<int> finished{0};

 private:
  std::atomic<bool> deferred_{false};
};

void wait_until(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::yield();
}

// While a sink of a removed slot is still being finished, the slot is not handed to a new
// sink: its remover waits for the old sink's pins only, never for the new one's (found by a
// review: a domain closing waited for another domain's deregistrations, and with a callback
// NIC whose dereg takes the closer's lock, for ever).
TEST(MonitorNotify, ARemoverWaitsForItsOwnSinksPinsOnly) {
  TestMonitor monitor;
  HeldSink x, y, z;
  ASSERT_TRUE(monitor.add_sink(&x).ok());
  ASSERT_TRUE(monitor.add_sink(&y).ok());
  x.hold.store(true);
  std::thread first([&] { monitor.notify(0, 4096); });  // pins X and Y; held finishing X
  wait_until(x.inside);
  std::promise<void> removed;
  std::future<void> removal = removed.get_future();
  std::thread remover([&] {
    monitor.remove_sink(&y);  // waits for the first notification's pin of Y
    removed.set_value();
  });
  while (monitor.sink_count() != 1) std::this_thread::yield();  // Y's slot is empty now
  ASSERT_TRUE(monitor.add_sink(&z).ok());
  x.defers.store(false);
  z.hold.store(true);
  std::thread second([&] { monitor.notify(0, 4096); });  // pins Z; held finishing Z
  wait_until(z.inside);
  x.hold.store(false);  // the first notification finishes X, then Y, and is done
  first.join();
  const bool returned = removal.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  z.hold.store(false);
  second.join();
  remover.join();
  EXPECT_TRUE(returned) << "remove_sink(Y) waited for Z, which took Y's slot";
  monitor.remove_sink(&x);
  monitor.remove_sink(&z);
}

// A sink removed by another thread while a notification holds its pin is still there when the
// notification comes to it (remove_sink waited), and is not finished by it any more.
TEST(MonitorNotify, ASinkRemovedMeanwhileIsWaitedForAndNotFinished) {
  TestMonitor monitor;
  HeldSink x, y;
  ASSERT_TRUE(monitor.add_sink(&x).ok());
  ASSERT_TRUE(monitor.add_sink(&y).ok());
  x.hold.store(true);
  std::thread notifier([&] { monitor.notify(0, 4096); });
  wait_until(x.inside);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    monitor.remove_sink(&y);
    removed.store(true);
  });
  while (monitor.sink_count() != 1) std::this_thread::yield();
  EXPECT_FALSE(removed.load()) << "remove_sink returned while a notification held the sink";
  x.hold.store(false);
  notifier.join();
  remover.join();
  EXPECT_EQ(y.finished.load(), 0) << "a removed sink was finished by the notification";
  monitor.remove_sink(&x);
}

}  // namespace
}  // namespace hmr::core
