// The process-wide list of domains that hold dma-buf exports (registration/export_holders.h)
// across fork(): a parent's thread giving back a holder's registrations at the moment of the
// fork does not exist in the child, so its call is never uncounted there, and the child's
// remove() of that inherited holder (its domain destroyed in the child) must not wait for it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <thread>

#include "registration/export_holders.h"

namespace {

// A holder whose giving back waits until the test lets it go, so that a fork can come while
// a call runs in it.
class BlockingHolder final : public hmr::core::NicPressureRelief {
 public:
  size_t release_unused(size_t, hmr::core::Shortage) override { return 0; }
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

// A holder whose giving back removes another holder from the list, as a callback NIC's dereg
// that closes another domain does (its ~Domain removes it, waiting for calls on it to end).
class RemovingHolder final : public hmr::core::NicPressureRelief {
 public:
  explicit RemovingHolder(hmr::core::NicPressureRelief* other) : other_(other) {}
  size_t release_unused(size_t, hmr::core::Shortage) override { return 0; }
  size_t release_unused_exports(size_t, hmr::core::ExportRelief) override {
    if (other_ != nullptr) {
      hmr::core::ExportHolders::instance().remove(*other_);
      removed.store(true);
      other_ = nullptr;
    }
    return 0;
  }
  std::atomic<bool> removed{false};

 private:
  hmr::core::NicPressureRelief* other_;
};

class IdleHolder final : public hmr::core::NicPressureRelief {
 public:
  size_t release_unused(size_t, hmr::core::Shortage) override { return 0; }
  size_t release_unused_exports(size_t, hmr::core::ExportRelief) override { return 0; }
};

// Every holder was counted as in use before the first was asked: the second holder's remove(),
// run from inside the first's giving back on the same thread, waited for this very call.
TEST(ExportHolders, AGivingBackThatRemovesAnotherHolderDoesNotWaitForItself) {
  auto& holders = hmr::core::ExportHolders::instance();
  IdleHolder other;
  RemovingHolder first(&other);
  holders.add(first);
  holders.add(other);
  std::atomic<bool> done{false};
  std::thread asking([&] {
    holders.release_unused_elsewhere(8, nullptr, hmr::core::ExportRelief::any_holders);
    done.store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (!done.load()) {
    ADD_FAILURE() << "the giving back waited for itself in the other holder's remove()";
    std::fflush(nullptr);
    std::_Exit(1);  // (the thread cannot be joined, and the test binary must not hang)
  }
  asking.join();
  EXPECT_TRUE(first.removed.load());
  holders.remove(first);
}

}  // namespace
