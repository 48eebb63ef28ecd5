// ReadSections: wait_for_readers() returns only after every section that began before it has
// ended, and never waits for a section that begins later.
#include "util/read_sections.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace hmr {
namespace {

TEST(ReadSections, AGracePeriodWaitsForASectionAlreadyInside) {
  ReadSections sections;
  std::atomic<bool> inside{false}, writer_started{false}, finished_reading{false};
  std::thread reader([&] {
    const ThreadSlot slot = sections.enter();
    inside.store(true);
    while (!writer_started.load()) std::this_thread::yield();
    // Still reading for a while after the writer began waiting: a grace period that did not
    // wait would be over long before this is set.
    for (int i = 0; i < 2000; ++i) std::this_thread::yield();
    finished_reading.store(true);
    sections.leave(slot);
  });
  while (!inside.load()) std::this_thread::yield();
  writer_started.store(true);
  sections.wait_for_readers();
  EXPECT_TRUE(finished_reading.load()) << "the grace period ended while a reader was inside";
  reader.join();
}

TEST(ReadSections, AGracePeriodDoesNotWaitForLaterOrFinishedSections) {
  ReadSections sections;
  std::thread([&] { ReadSection section(sections); }).join();
  sections.wait_for_readers();  // the finished section does not hold it up
  // A section entered and left many times on this thread, then a grace period: returns.
  for (int i = 0; i < 1000; ++i) ReadSection section(sections);
  sections.wait_for_readers();
  SUCCEED();
}

TEST(ReadSections, ThreadsBeyondTheOwnedSlotsShareSlotsAndAreWaitedFor) {
  ReadSections sections;
  // More threads than slots, so some share a slot and count themselves in with atomics.
  constexpr int kThreads = kThreadSlots + 8;
  std::mutex mutex;
  std::condition_variable changed;
  int parked = 0;
  bool release = false;
  std::atomic<int> still_reading{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Each thread claims its slot (this_thread_slot), then stays alive, blocked.
      { ReadSection warm(sections); }
      std::unique_lock<std::mutex> lock(mutex);
      ++parked;
      changed.notify_all();
      changed.wait(lock, [&] { return release; });
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return parked == kThreads; });
  }
  // The last thread to start holds a section open while the grace period runs.
  std::thread last([&] {
    const ThreadSlot slot = sections.enter();
    still_reading.store(1);
    for (int i = 0; i < 2000; ++i) std::this_thread::yield();
    still_reading.store(2);
    sections.leave(slot);
  });
  while (still_reading.load() == 0) std::this_thread::yield();
  sections.wait_for_readers();
  EXPECT_EQ(still_reading.load(), 2) << "a reader in a shared slot was not waited for";
  {
    const std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  changed.notify_all();
  last.join();
  for (std::thread& thread : threads) thread.join();
}

// A process forked while another thread was inside a section: the child has only the forking
// thread, so its grace periods must not wait for the one that was inside.  The child's alarm
// turns a hang into a failure.
TEST(ReadSections, AChildForkedWhileAnotherThreadIsInsideDoesNotWaitForIt) {
  ReadSections sections;
  std::atomic<bool> inside{false}, release{false};
  std::thread reader([&] {
    const ThreadSlot slot = sections.enter();
    inside.store(true);
    while (!release.load()) std::this_thread::yield();
    sections.leave(slot);
  });
  while (!inside.load()) std::this_thread::yield();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);
    sections.wait_for_readers();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  release.store(true);
  reader.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's grace period waited for a thread it does not have";
  sections.wait_for_readers();  // the parent's reader is out now
}

}  // namespace
}  // namespace hmr
