// The userfaultfd monitor learns which pages it watches and then subscribes them without a
// system call (monitor/uffd_monitor.h).  What must hold: a page is trusted only while the
// kernel watches it: never a page mapped into a hole after the block was registered, never
// a page unmapped since, and never while an event is read but not yet applied.  Each test
// ends by unmapping the page in question: only a watched page makes that raise an event.
#include "monitor/uffd_monitor.h"
#include "monitor/uffd_watcher.h"

#include <gtest/gtest.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <mutex>
#include <thread>
#include <cstring>
#include <vector>

namespace hmr::core {

class UffdMonitorTestPeer {
 public:
  static std::atomic<uint32_t>& pending(UffdMonitor& monitor) { return monitor.pending_counter(); }
  static void after_registration(UffdMonitor& monitor, void (*hook)(uintptr_t)) {
    monitor.after_registration_for_test_ = hook;
  }
};

namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kBlock = 2u << 20;

// Counts what the monitor delivers for one range; runs on the monitor's thread, where nothing
// may be freed, so it keeps a count, not a list.
class RangeSink final : public InvalidationSink {
 public:
  explicit RangeSink(uintptr_t start) : start_(start) {}
  void invalidate(uintptr_t start, uintptr_t end) override {
    if (start <= start_ && start_ < end) hits_.fetch_add(1);
  }
  void watch(uintptr_t start) { start_ = start; }
  int hits() const { return hits_.load(); }

 private:
  std::atomic<uintptr_t> start_;
  std::atomic<int> hits_{0};
};

// Fresh private pages exactly at `address`, which must be a hole; true when mapped there.
bool map_fresh_page_at(uintptr_t address) {
  void* page = reinterpret_cast<void*>(address);
  return mmap(page, kPage, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == page;
}

UffdMonitor::Counts since(const UffdMonitor::Counts& before, const UffdMonitor::Counts& now) {
  return {now.registrations - before.registrations, now.scans - before.scans,
          now.known - before.known};
}

class UffdMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status started = monitor_.start();
    if (!started.ok()) GTEST_SKIP() << started.reason();
    if (!monitor_.knows_watched()) {
      GTEST_SKIP() << "this kernel cannot say which pages are watched (needs Linux 6.11)";
    }
    area_ = static_cast<uint8_t*>(mmap(nullptr, 2 * kBlock, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
    const auto area = reinterpret_cast<uintptr_t>(area_);
    block_ = area + (kBlock - area % kBlock) % kBlock;  // the whole aligned block inside
    ASSERT_TRUE(monitor_.add_sink(&sink_).ok());
  }
  void TearDown() override {
    if (area_ != nullptr && area_ != MAP_FAILED) {
      for (const Subscribed& range : subscribed_) {
        if (range.len != 0) monitor_.unsubscribe(range.start, range.len);
      }
      monitor_.remove_sink(&sink_);
      munmap(area_, 2 * kBlock);
      // Its events applied now, not during the next test, whose area may be at this address.
      monitor_.wait_pending();
    }
  }

  uintptr_t page(size_t index) const { return block_ + index * kPage; }
  Status subscribe(uintptr_t address) { return subscribe_range(address, kPage); }
  Status subscribe_range(uintptr_t address, size_t len) {
    Status status = monitor_.subscribe(address, len);
    if (status.ok()) {
      const size_t slot = subscribed_count_++ % kMaxSubscribed;
      subscribed_[slot] = {address, len};
    }
    return status;
  }
  // Unmaps one page and says whether the monitor was told: the munmap of a watched page
  // returns once the event is read, and wait_pending() once it was delivered.
  bool unmap_is_seen(uintptr_t address) {
    sink_.watch(address);
    const int before = sink_.hits();
    EXPECT_EQ(munmap(reinterpret_cast<void*>(address), kPage), 0);
    monitor_.wait_pending();
    return sink_.hits() > before;
  }
  // Maps fresh pages at `address` (a hole), subscribes them and says whether the monitor
  // took them as known, i.e. made no system call for them.
  bool fresh_page_taken_as_known(uintptr_t address) {
    EXPECT_TRUE(map_fresh_page_at(address));
    const UffdMonitor::Counts before = monitor_.counts();
    EXPECT_TRUE(subscribe(address).ok());
    return since(before, monitor_.counts()).known != 0;
  }
  // Fills the block's first pages at a stride of two, as a pool of buffers would.
  void fill(size_t count) {
    for (size_t i = 0; i < count; ++i) ASSERT_TRUE(subscribe(page(2 * i)).ok());
  }

  UffdMonitor& monitor_ = UffdMonitor::instance();
  uint8_t* area_ = nullptr;
  uintptr_t block_ = 0;
  RangeSink sink_{0};
  static constexpr size_t kMaxSubscribed = 256;
  struct Subscribed {
    uintptr_t start = 0;
    size_t len = 0;
  };
  Subscribed subscribed_[kMaxSubscribed] = {};
  size_t subscribed_count_ = 0;
};

TEST_F(UffdMonitorTest, AFilledBlockIsLearntOnceAndThenCostsNoSystemCall) {
  const UffdMonitor::Counts before = monitor_.counts();
  fill(64);
  const UffdMonitor::Counts spent = since(before, monitor_.counts());
  EXPECT_EQ(spent.registrations, 1u) << "only the block's first subscription registers";
  EXPECT_EQ(spent.scans, 1u);
  EXPECT_EQ(spent.known, 63u);
  EXPECT_TRUE(unmap_is_seen(page(40)));
}

// The address space's last block: stepping block by block to the range's end wrapped to 0,
// still below the end, and subscribe() filed blocks until memory ran out (a registration of
// [2^64 - 4096, +4095) in a domain without HMR_MR_ALLOCATED hung).
TEST_F(UffdMonitorTest, ARangeInTheLastBlockOfTheAddressSpaceIsRefused) {
  for (const uintptr_t start : {UINTPTR_MAX - 4095, UINTPTR_MAX - 100, UINTPTR_MAX - (4u << 20)}) {
    const Status status = monitor_.subscribe(start, UINTPTR_MAX - start);
    EXPECT_EQ(status.code(), HMR_EFAULT) << std::hex << start;
    EXPECT_NE(status.reason().find("no user memory"), std::string::npos) << status.reason();
  }
}

TEST_F(UffdMonitorTest, APageMappedIntoAHoleAfterTheScanIsRegisteredItself) {
  ASSERT_EQ(munmap(reinterpret_cast<void*>(page(9)), kPage), 0);
  fill(4);  // registers the block and scans it while page 9 is a hole
  EXPECT_FALSE(fresh_page_taken_as_known(page(9))) << "a hole at the scan was trusted";
  EXPECT_TRUE(unmap_is_seen(page(9))) << "the page mapped into the hole is not watched";
}

TEST_F(UffdMonitorTest, AnUnmappedPageIsForgottenWhenMappedAgain) {
  fill(8);
  ASSERT_TRUE(unmap_is_seen(page(4)));
  // Its neighbours stay known...
  const UffdMonitor::Counts neighbour = monitor_.counts();
  ASSERT_TRUE(subscribe(page(2)).ok());
  EXPECT_EQ(since(neighbour, monitor_.counts()).known, 1u);
  // ...but the page mapped there afterwards is new to the kernel, and must be to the monitor.
  EXPECT_FALSE(fresh_page_taken_as_known(page(4))) << "the unmapped page stayed known";
  EXPECT_TRUE(unmap_is_seen(page(4))) << "the page mapped again is not watched";
}

// A scan looks at one mapping: one that no registration since the last scan covered (another
// buffer mapped on its own into the same block) would teach it nothing.
TEST_F(UffdMonitorTest, AnotherMappingInTheBlockRegistersWithoutAScan) {
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(page(30)), kPage, PROT_READ), 0);  // its own mapping
  ASSERT_TRUE(subscribe(page(0)).ok());
  const UffdMonitor::Counts before = monitor_.counts();
  ASSERT_TRUE(subscribe(page(30)).ok());
  const UffdMonitor::Counts other = since(before, monitor_.counts());
  EXPECT_EQ(other.scans, 0u) << "a scan of a mapping nothing had registered";
  EXPECT_EQ(other.registrations, 1u);
  // Back in the first mapping, the scan is worth it again.
  ASSERT_TRUE(subscribe(page(2)).ok());
  const UffdMonitor::Counts first = since(before, monitor_.counts());
  EXPECT_EQ(first.scans, 1u);
  EXPECT_EQ(first.known, 1u);
  EXPECT_TRUE(unmap_is_seen(page(30)));
}

// A registration covers its own mapping's part of each block; a range over two blocks, or
// over two mappings, must come out watched everywhere all the same.
TEST_F(UffdMonitorTest, ARangeOverTwoBlocksIsWatchedInBoth) {
  const uintptr_t last_of_first = page(kBlock / kPage - 1);
  ASSERT_TRUE(subscribe_range(last_of_first, 2 * kPage).ok());
  EXPECT_TRUE(unmap_is_seen(last_of_first + kPage)) << "the second block's page is not watched";
  EXPECT_TRUE(unmap_is_seen(last_of_first)) << "the first block's page is not watched";
}

TEST_F(UffdMonitorTest, ARangeOverTwoMappingsIsWatchedInBoth) {
  // Different protections keep the kernel from merging the two mappings into one.
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(page(21)), kPage, PROT_READ), 0);
  ASSERT_TRUE(subscribe_range(page(20), 2 * kPage).ok());
  EXPECT_TRUE(unmap_is_seen(page(21))) << "the second mapping's page is not watched";
  EXPECT_TRUE(unmap_is_seen(page(20))) << "the first mapping's page is not watched";
}

// Another thread unmaps the pages being subscribed and maps new ones there, right after the
// monitor registered them: the new pages are not watched, and the subscription must not say
// they are (the kernel's registration of a wider range succeeds across a hole).
TEST_F(UffdMonitorTest, PagesReplacedWhileBeingRegisteredAreNotTakenAsWatched) {
  UffdMonitorTestPeer::after_registration(monitor_, [](uintptr_t address) {
    if (munmap(reinterpret_cast<void*>(address), kPage) != 0 || !map_fresh_page_at(address)) {
      std::abort();
    }
  });
  const Status subscribed = subscribe(page(12));
  UffdMonitorTestPeer::after_registration(monitor_, nullptr);
  monitor_.wait_pending();
  if (subscribed.ok()) {
    EXPECT_TRUE(unmap_is_seen(page(12))) << "a subscription succeeded for unwatched pages";
  } else {
    EXPECT_NE(subscribed.reason().find("changed while"), std::string::npos)
        << subscribed.reason();
  }
}

// A subscriber holds the monitor's lock while it registers, and may wait there for a thread
// that waits for the monitor's thread: one that holds malloc's lock while it unmaps watched
// memory (free() trimming the heap) waits until its event is read, and a subscriber's error
// path allocates.  The monitor's thread must read on while it waits for the lock.  Here the
// subscriber (in the after-registration hook, under the lock) waits for a thread that unmaps
// two watched pages: the first event sends the monitor's thread to the lock, the second must
// still be read.  Before, the subscriber waited for ever (here: until its bound, below).
namespace lock_holder {
std::mutex mutex;
std::condition_variable released;
bool unmapped = false;
bool gave_up = false;
uintptr_t first = 0, second = 0;
std::thread unmapper;
}  // namespace lock_holder

TEST_F(UffdMonitorTest, TheEventThreadReadsOnWhileASubscriberHoldsTheLock) {
  auto* pages = static_cast<uint8_t*>(mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(munmap(pages + kPage, kPage), 0);  // two mappings of their own
  lock_holder::first = reinterpret_cast<uintptr_t>(pages);
  lock_holder::second = reinterpret_cast<uintptr_t>(pages + 2 * kPage);
  ASSERT_TRUE(subscribe(lock_holder::first).ok());
  ASSERT_TRUE(subscribe(lock_holder::second).ok());
  lock_holder::unmapped = false;
  lock_holder::gave_up = false;
  UffdMonitorTestPeer::after_registration(monitor_, [](uintptr_t) {
    lock_holder::unmapper = std::thread([] {
      munmap(reinterpret_cast<void*>(lock_holder::first), kPage);
      munmap(reinterpret_cast<void*>(lock_holder::second), kPage);  // read by whom?
      const std::lock_guard<std::mutex> lock(lock_holder::mutex);
      lock_holder::unmapped = true;
      lock_holder::released.notify_all();
    });
    std::unique_lock<std::mutex> lock(lock_holder::mutex);
    // A bound for the failure, so that it is reported rather than hung: letting go of the
    // monitor's lock lets its thread read the second event.
    lock_holder::gave_up = !lock_holder::released.wait_for(
        lock, std::chrono::seconds(10), [] { return lock_holder::unmapped; });
  });
  const Status subscribed = subscribe(page(12));  // the block's first: it registers
  UffdMonitorTestPeer::after_registration(monitor_, nullptr);
  lock_holder::unmapper.join();
  EXPECT_TRUE(subscribed.ok()) << subscribed.reason();
  EXPECT_FALSE(lock_holder::gave_up)
      << "the second unmap was not read while a subscriber held the monitor's lock";
}

// The same, with more threads unmapping at once than the monitor's thread queues events: it
// stopped reading once its queue was full, and the threads past it (and the subscriber waiting
// for them) waited for ever.  Past the queue's size the newest queued event now widens.
namespace crowd {
constexpr size_t kThreads = 300;  // more than UffdWatcher's queue of 256
std::mutex mutex;
std::condition_variable released;
size_t unmapped = 0;
size_t unmapped_when_given_up = 0;
bool gave_up = false;
uint8_t* pages = nullptr;
std::vector<std::thread> unmappers;
}  // namespace crowd

TEST_F(UffdMonitorTest, TheEventThreadReadsOnPastItsQueueWhileASubscriberHoldsTheLock) {
  crowd::pages = static_cast<uint8_t*>(mmap(nullptr, crowd::kThreads * kPage,
                                            PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                            -1, 0));
  ASSERT_NE(crowd::pages, MAP_FAILED);
  std::memset(crowd::pages, 1, crowd::kThreads * kPage);
  ASSERT_TRUE(monitor_.subscribe(reinterpret_cast<uintptr_t>(crowd::pages), crowd::kThreads * kPage).ok());
  crowd::unmapped = 0;
  crowd::gave_up = false;
  UffdMonitorTestPeer::after_registration(monitor_, [](uintptr_t) {
    for (size_t i = 0; i < crowd::kThreads; ++i) {
      crowd::unmappers.emplace_back([i] {
        munmap(crowd::pages + i * kPage, kPage);
        const std::lock_guard<std::mutex> lock(crowd::mutex);
        ++crowd::unmapped;
        crowd::released.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(crowd::mutex);
    crowd::gave_up = !crowd::released.wait_for(lock, std::chrono::seconds(20), [] {
      return crowd::unmapped == crowd::kThreads;
    });
    crowd::unmapped_when_given_up = crowd::unmapped;
  });
  const Status subscribed = subscribe(page(12));  // the block's first: it registers
  UffdMonitorTestPeer::after_registration(monitor_, nullptr);
  for (std::thread& unmapper : crowd::unmappers) unmapper.join();
  crowd::unmappers.clear();
  monitor_.unsubscribe(reinterpret_cast<uintptr_t>(crowd::pages), crowd::kThreads * kPage);
  monitor_.wait_pending();
  EXPECT_TRUE(subscribed.ok()) << subscribed.reason();
  EXPECT_FALSE(crowd::gave_up) << "only " << crowd::unmapped_when_given_up << " of "
                               << crowd::kThreads
                               << " unmaps were read while a subscriber held the monitor's lock";
}

TEST_F(UffdMonitorTest, APendingEventMakesKnownPagesRegisterAgain) {
  fill(8);
  std::atomic<uint32_t>& pending = UffdMonitorTestPeer::pending(monitor_);
  pending.fetch_add(1);  // as the thread does between reading an event and applying it
  const UffdMonitor::Counts before = monitor_.counts();
  const Status subscribed = subscribe(page(6));
  pending.fetch_sub(1);
  ASSERT_TRUE(subscribed.ok());
  const UffdMonitor::Counts spent = since(before, monitor_.counts());
  EXPECT_EQ(spent.known, 0u) << "known pages were trusted while an event was pending";
  EXPECT_EQ(spent.registrations, 1u);
}

TEST_F(UffdMonitorTest, OnlyPrivateAnonymousMappingsAreWatched) {
  void* shared = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  const Status anonymous = monitor_.subscribe(reinterpret_cast<uintptr_t>(shared), kPage);
  EXPECT_FALSE(anonymous.ok());
  EXPECT_NE(std::string(anonymous.reason()).find("private anonymous"), std::string::npos)
      << anonymous.reason();
  munmap(shared, kPage);

  const int id = shmget(IPC_PRIVATE, kPage, IPC_CREAT | 0600);
  if (id < 0) GTEST_SKIP() << "shmget failed";
  void* segment = shmat(id, nullptr, 0);
  shmctl(id, IPC_RMID, nullptr);
  ASSERT_NE(segment, reinterpret_cast<void*>(-1));
  EXPECT_FALSE(monitor_.subscribe(reinterpret_cast<uintptr_t>(segment), kPage).ok())
      << "a SysV segment was watched: shmdt() would detach it without an event";
  shmdt(segment);

  // A private file mapping: such a userfaultfd would watch it, an fd without WP_ASYNC would
  // not, and the cache keeps to what both do.
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), kPage), 0);
  void* mapped = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(file), 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_FALSE(monitor_.subscribe(reinterpret_cast<uintptr_t>(mapped), kPage).ok());
  munmap(mapped, kPage);
  std::fclose(file);
}

// poll(2) refused (the application lowered RLIMIT_NOFILE below the event thread's two fds):
// the thread reads on without waiting instead of stopping, so a watched page's unmap is still
// delivered.  It used to stop and close the userfaultfd: the unmap went unheard, and a cache
// would have gone on handing out the registration of pages that were gone.
TEST(UffdWatcherTest, UnmapsAreDeliveredWhilePollIsRefused) {
  std::atomic<uint32_t> pending{0};
  std::atomic<uintptr_t> watched{0};
  std::atomic<int> delivered{0};
  Result<std::unique_ptr<UffdWatcher>> watcher = UffdWatcher::start(
      pending,
      [&](const AddressRangeEvent& change) {
        const uintptr_t page = watched.load();
        if (change.start <= page && page < change.end) delivered.fetch_add(1);
      },
      "test's userfaultfd watcher");
  if (!watcher.ok()) GTEST_SKIP() << watcher.status().reason();
  auto* area = static_cast<uint8_t*>(
      mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  ASSERT_TRUE((*watcher)->watch(reinterpret_cast<uintptr_t>(area), 3 * kPage).ok());
  // The event thread running before the fd limit drops: one unmap delivered first.  (UBSan's
  // check of a new thread's first call probes memory through a pipe, which fails with no fd
  // left: a false "invalid vptr" in the sanitizer build, now and then.)
  watched.store(reinterpret_cast<uintptr_t>(area + 2 * kPage));
  ASSERT_EQ(munmap(area + 2 * kPage, kPage), 0);
  while (pending.load() != 0) std::this_thread::yield();
  ASSERT_EQ(delivered.exchange(0), 1);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = 1;  // poll(2): EINVAL for more fds than this
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  // The thread waits in a poll it began before; the first unmap brings it round to the next,
  // which is refused.  Each munmap() returns once its event is read, and `pending` falls once
  // it was delivered.
  for (int i = 0; i < 2; ++i) {
    uint8_t* page = area + i * kPage;
    watched.store(reinterpret_cast<uintptr_t>(page));
    ASSERT_EQ(munmap(page, kPage), 0);
    while (pending.load() != 0) std::this_thread::yield();
    EXPECT_EQ(delivered.load(), i + 1) << "page " << i << "'s unmap was not delivered";
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  watcher->reset();  // and its thread stops when asked, poll refused or not
}

}  // namespace
}  // namespace hmr::core
