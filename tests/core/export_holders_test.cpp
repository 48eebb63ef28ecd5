// The process-wide list of domains that hold dma-buf exports (registration/export_holders.h)
// across fork(): a parent's thread giving back a holder's registrations at the moment of the
// fork does not exist in the child, so its call is never uncounted there, and the child's
// remove() of that inherited holder (its domain destroyed in the child) must not wait for it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "registration/export_holders.h"

namespace {

// A holder whose giving back waits until the test lets it go, so that a fork can come while
// a call runs in it.
class BlockingHolder final : public hmr::core::NicPressureRelief {
 public:
  size_t release_unused(size_t) override { return 0; }
  size_t release_unused_exports(size_t count, hmr::core::ExportRelief) override {
    entered.store(true);
    while (!let_go.load()) std::this_thread::yield();
    return count;
  }
  std::atomic<bool> entered{false};
  std::atomic<bool> let_go{false};
};

TEST(ExportHolders, AForkedChildRemovesAHolderTheParentWasAskingWithoutWaiting) {
  auto& holders = hmr::core::ExportHolders::instance();
  BlockingHolder holder;
  holders.add(holder);
  size_t released = 0;
  std::thread asking([&] { released = holders.release_unused_elsewhere(3, nullptr, hmr::core::ExportRelief::any_holders); });
  while (!holder.entered.load()) std::this_thread::yield();

  const pid_t child = fork();
  if (child < 0) {
    holder.let_go.store(true);
    asking.join();
    holders.remove(holder);
    FAIL() << "fork failed";
  }
  if (child == 0) {
    alarm(10);  // a hang is the failure
    holders.remove(holder);
    _exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  holder.let_go.store(true);
  asking.join();
  holders.remove(holder);
  EXPECT_EQ(released, 3u);
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
      << "the child waited for the parent's call (its alarm)";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// In the process that listed it, remove() still waits for a call running in the holder.
TEST(ExportHolders, RemoveWaitsForACallRunningInTheHolder) {
  auto& holders = hmr::core::ExportHolders::instance();
  BlockingHolder holder;
  holders.add(holder);
  std::thread asking([&] { holders.release_unused_elsewhere(1, nullptr, hmr::core::ExportRelief::any_holders); });
  while (!holder.entered.load()) std::this_thread::yield();
  std::atomic<bool> removing_started{false};
  std::atomic<bool> removed{false};
  std::thread removing([&] {
    removing_started.store(true);
    holders.remove(holder);
    removed.store(true);
  });
  while (!removing_started.load()) std::this_thread::yield();
  // The call runs until it is let go below, so `removed` must still be false here whatever
  // the timing: this cannot fail wrongly.  A remove() that did not wait would most likely
  // have returned within these yields, but could be missed (this catches, it cannot prove).
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();
  EXPECT_FALSE(removed.load());
  holder.let_go.store(true);
  asking.join();
  removing.join();
  EXPECT_TRUE(removed.load());
}

}  // namespace
