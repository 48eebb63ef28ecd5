#include "monitor/memhooks_monitor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#define HMR_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define HMR_TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HMR_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define HMR_TEST_TSAN 1
#endif
#endif
#if defined(HMR_TEST_ASAN) || defined(HMR_TEST_TSAN)
#define HMR_TEST_SANITIZER_ALLOCATOR 1
#endif

namespace hmr::core {
namespace {

constexpr size_t kPage = 4096;
constexpr uint8_t kMarker = 0x5a;

uintptr_t address_of(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

bool mapped(uintptr_t address) {
  unsigned char resident = 0;
  return mincore(reinterpret_cast<void*>(address & ~(kPage - 1)), kPage, &resident) == 0;
}

// Records what it is told without allocating: it runs inside free() and brk trimming, where
// malloc's own locks may be held.  A probe address, when set, is inspected at the moment
// the first range covering it arrives, which shows the notice came before the change.
class RecordingSink final : public InvalidationSink {
 public:
  struct Range {
    uintptr_t start, end;
  };
  static constexpr size_t kMax = 4096;

  void invalidate(uintptr_t start, uintptr_t end) override {
    const size_t slot = count_.fetch_add(1);
    if (slot < kMax) ranges_[slot] = Range{start, end};
    const uintptr_t probe = probe_.load();
    if (probe != 0 && start <= probe && probe < end && !probe_checked_.load()) {
      probe_mapped_ = mapped(probe);
      if (probe_mapped_) probe_value_ = *reinterpret_cast<volatile uint8_t*>(probe);
      probe_checked_ = true;
    }
    if (nested_ != nullptr) {
      void (*action)(void*) = nested_;
      nested_ = nullptr;  // once
      action(nested_context_);
    }
  }

  void reset(uintptr_t probe = 0) {
    count_ = 0;
    probe_ = probe;
    probe_checked_ = false;
    probe_mapped_ = false;
    probe_value_ = 0;
  }
  size_t count() const { return std::min(count_.load(), kMax); }
  bool saw_overlap(uintptr_t start, uintptr_t end) const {
    for (size_t i = 0; i < count(); ++i) {
      if (ranges_[i].start < end && start < ranges_[i].end) return true;
    }
    return false;
  }
  // A notice of all of [start, end) at once (and maybe more).
  bool saw_covering(uintptr_t start, uintptr_t end) const {
    for (size_t i = 0; i < count(); ++i) {
      if (ranges_[i].start <= start && end <= ranges_[i].end) return true;
    }
    return false;
  }
  bool saw_exact(uintptr_t start, uintptr_t end) const {
    for (size_t i = 0; i < count(); ++i) {
      if (ranges_[i].start == start && ranges_[i].end == end) return true;
    }
    return false;
  }
  // The probe was still mapped and still held kMarker when the notice came.
  bool probe_intact_when_told() const {
    return probe_checked_ && probe_mapped_ && probe_value_ == kMarker;
  }
  void on_next_invalidate(void (*action)(void*), void* context) {
    nested_context_ = context;
    nested_ = action;
  }

 private:
  std::atomic<size_t> count_{0};
  Range ranges_[kMax] = {};
  std::atomic<uintptr_t> probe_{0};
  std::atomic<bool> probe_checked_{false};
  bool probe_mapped_ = false;
  uint8_t probe_value_ = 0;
  void (*volatile nested_)(void*) = nullptr;
  void* nested_context_ = nullptr;
};

uint8_t* map_anonymous(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(memory, MAP_FAILED);
  return memory == MAP_FAILED ? nullptr : static_cast<uint8_t*>(memory);
}

// Live code is read without ThreadSanitizer's instrumentation, which keeps no shadow for
// libc's text.
__attribute__((no_sanitize("thread"))) bool same_code(const uint8_t* code,
                                                      const uint8_t* expected, size_t length) {
  const auto* bytes = static_cast<const volatile uint8_t*>(code);
  for (size_t i = 0; i < length; ++i) {
    if (bytes[i] != expected[i]) return false;
  }
  return true;
}

const uint8_t* libc_entry(const char* symbol) {
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr) return nullptr;
  void* function = dlsym(libc, symbol);
  dlclose(libc);
  return static_cast<const uint8_t*>(function);
}

class MemhooksMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status started = monitor_.start();
    if (!started.ok()) GTEST_SKIP() << "memhooks unavailable here: " << started.reason();
    ASSERT_TRUE(monitor_.installed());
    ASSERT_TRUE(monitor_.add_sink(&sink_).ok());
    sink_added_ = true;
  }

  void TearDown() override {
    while (subscriptions_ > 0) {
      monitor_.unsubscribe(0, 0);
      --subscriptions_;
    }
    if (sink_added_) monitor_.remove_sink(&sink_);
    monitor_.stop();
    EXPECT_FALSE(monitor_.installed()) << "stop() must put libc's code back";
  }

  void subscribe(const void* start, size_t length) {
    ASSERT_TRUE(monitor_.subscribe(address_of(start), length).ok());
    ++subscriptions_;
  }

  MemhooksMonitor& monitor_ = MemhooksMonitor::instance();
  RecordingSink sink_;
  bool sink_added_ = false;
  int subscriptions_ = 0;
};

TEST(MemhooksCheckPatchable, AcceptsPlainCodeAndRefusesJumps) {
#if defined(__x86_64__)
  // glibc 2.36's munmap: mov $0xb,%eax; syscall; cmp $-4095,%rax; jae; ret
  const uint8_t plain[MemhooksMonitor::kInspectBytes] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f,
                                                         0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff,
                                                         0xff, 0x73, 0x01, 0xc3};
  EXPECT_TRUE(MemhooksMonitor::check_patchable(plain, "munmap").ok());
  uint8_t with_endbr[MemhooksMonitor::kInspectBytes] = {0xf3, 0x0f, 0x1e, 0xfa};
  std::memcpy(with_endbr + 4, plain, 16);
  EXPECT_TRUE(MemhooksMonitor::check_patchable(with_endbr, "munmap").ok());

  struct Case {
    const char* what;
    uint8_t bytes[MemhooksMonitor::kInspectBytes];
  };
  const Case patched[] = {
      {"jmp rel32", {0xe9, 0x10, 0x20, 0x30, 0x40}},
      {"jmp rel8", {0xeb, 0x10}},
      {"jmp *rip", {0xff, 0x25, 0x00, 0x10, 0x00, 0x00}},
      {"movabs r11; jmp r11",
       {0x49, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8, 0x41, 0xff, 0xe3}},
      {"movabs rax; jmp rax", {0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xe0}},
      {"int3", {0xcc, 0x90}},
      {"endbr64; jmp rel32", {0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 1, 2, 3, 4}},
  };
  for (const Case& c : patched) {
    Status status = MemhooksMonitor::check_patchable(c.bytes, "munmap");
    EXPECT_EQ(status.code(), HMR_EBUSY) << c.what;
    EXPECT_NE(status.reason().find("munmap"), std::string::npos) << status.reason();
    char first[4];
    std::snprintf(first, sizeof first, "%02x", c.bytes[0]);
    EXPECT_NE(status.reason().find(first), std::string::npos) << status.reason();
  }
  // A movabs that is not followed by an indirect jump is ordinary code.
  const uint8_t movabs_only[MemhooksMonitor::kInspectBytes] = {0x48, 0xb8, 1, 2, 3, 4, 5, 6,
                                                               7,    8,    0x48, 0x89, 0xc7};
  EXPECT_TRUE(MemhooksMonitor::check_patchable(movabs_only, "f").ok());
#else
  const uint8_t code[MemhooksMonitor::kInspectBytes] = {};
  EXPECT_EQ(MemhooksMonitor::check_patchable(code, "munmap").code(), HMR_EOPNOTSUPP);
#endif
}

TEST(MemhooksLibc, InternalAliasesShareTheHookedEntry) {
  // glibc's free() reaches munmap through __munmap, malloc through __mmap/__madvise: the
  // same code as the exported names, so patching the exported entry covers them.
  const uint8_t* munmap_entry = libc_entry("munmap");
  const uint8_t* internal = libc_entry("__munmap");
  if (munmap_entry == nullptr || internal == nullptr) GTEST_SKIP() << "no glibc __munmap";
  EXPECT_EQ(munmap_entry, internal);
  EXPECT_EQ(libc_entry("mmap"), libc_entry("__mmap"));
  EXPECT_EQ(libc_entry("madvise"), libc_entry("__madvise"));
  EXPECT_EQ(libc_entry("sbrk"), libc_entry("__sbrk"));
}

TEST_F(MemhooksMonitorTest, RefusesToPatchWhatIsAlreadyPatched) {
  // What a second patcher (another copy of hmr, UCX's UCM) would find now.
  Status status = MemhooksMonitor::check_patchable(libc_entry("munmap"), "munmap");
  EXPECT_EQ(status.code(), HMR_EBUSY) << status.reason();
  EXPECT_TRUE(monitor_.start().ok()) << "start() is idempotent";
}

TEST_F(MemhooksMonitorTest, Munmap) {
  uint8_t* memory = map_anonymous(4 * kPage);
  memory[kPage] = kMarker;
  subscribe(memory, 4 * kPage);
  sink_.reset(address_of(memory + kPage));
  ASSERT_EQ(munmap(memory + kPage, 2 * kPage), 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory + kPage), address_of(memory + 3 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_FALSE(mapped(address_of(memory + kPage)));
  ASSERT_EQ(munmap(memory, kPage), 0);
  ASSERT_EQ(munmap(memory + 3 * kPage, kPage), 0);
  // Failing calls still fail the way libc's do.
  errno = 0;
  EXPECT_EQ(munmap(memory + 1, kPage), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MemhooksMonitorTest, NothingSubscribedMeansNoNotice) {
  uint8_t* memory = map_anonymous(2 * kPage);
  sink_.reset();
  ASSERT_EQ(munmap(memory, 2 * kPage), 0);
  EXPECT_EQ(sink_.count(), 0u);
}

TEST_F(MemhooksMonitorTest, UnrelatedRangeDoesNotDisturbSubscribedMemory) {
  uint8_t* kept = map_anonymous(2 * kPage);
  uint8_t* other = map_anonymous(2 * kPage);
  kept[0] = kMarker;
  subscribe(kept, 2 * kPage);
  sink_.reset(address_of(kept));
  ASSERT_EQ(munmap(other, 2 * kPage), 0);
  EXPECT_FALSE(sink_.saw_overlap(address_of(kept), address_of(kept + 2 * kPage)));
  EXPECT_EQ(kept[0], kMarker);
  ASSERT_EQ(munmap(kept, 2 * kPage), 0);
}

TEST_F(MemhooksMonitorTest, MremapMoveAndShrink) {
  uint8_t* memory = map_anonymous(4 * kPage);
  memory[0] = kMarker;
  subscribe(memory, 4 * kPage);
  sink_.reset(address_of(memory));
  void* moved = mremap(memory, 4 * kPage, 64 * kPage, MREMAP_MAYMOVE);
  ASSERT_NE(moved, MAP_FAILED);
  EXPECT_TRUE(sink_.saw_overlap(address_of(memory), address_of(memory + 4 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  auto* bytes = static_cast<uint8_t*>(moved);
  EXPECT_EQ(bytes[0], kMarker);

  bytes[8 * kPage] = kMarker;
  sink_.reset(address_of(bytes + 8 * kPage));
  ASSERT_EQ(mremap(bytes, 64 * kPage, 8 * kPage, 0), moved);
  EXPECT_TRUE(sink_.saw_exact(address_of(bytes + 8 * kPage), address_of(bytes + 64 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  ASSERT_EQ(munmap(moved, 8 * kPage), 0);
}

TEST_F(MemhooksMonitorTest, MremapFixedOverSubscribedTarget) {
  uint8_t* source = map_anonymous(2 * kPage);
  uint8_t* target = map_anonymous(2 * kPage);
  target[0] = kMarker;
  subscribe(target, 2 * kPage);
  sink_.reset(address_of(target));
  ASSERT_EQ(mremap(source, 2 * kPage, 2 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, target),
            static_cast<void*>(target));
  EXPECT_TRUE(sink_.saw_exact(address_of(target), address_of(target + 2 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  ASSERT_EQ(munmap(target, 2 * kPage), 0);
}

TEST_F(MemhooksMonitorTest, MadviseDontneedAndFree) {
  for (int advice : {MADV_DONTNEED, MADV_FREE}) {
    uint8_t* memory = map_anonymous(4 * kPage);
    memory[kPage] = kMarker;
    subscribe(memory, 4 * kPage);
    sink_.reset(address_of(memory + kPage));
    ASSERT_EQ(madvise(memory + kPage, kPage, advice), 0) << advice;
    EXPECT_TRUE(sink_.saw_exact(address_of(memory + kPage), address_of(memory + 2 * kPage)))
        << advice;
    EXPECT_TRUE(sink_.probe_intact_when_told()) << advice;
    if (advice == MADV_DONTNEED) {
      EXPECT_EQ(memory[kPage], 0);
    }
    ASSERT_EQ(munmap(memory, 4 * kPage), 0);
  }
  // Advice that drops nothing is not reported.
  uint8_t* memory = map_anonymous(kPage);
  subscribe(memory, kPage);
  sink_.reset();
  ASSERT_EQ(madvise(memory, kPage, MADV_WILLNEED), 0);
  EXPECT_FALSE(sink_.saw_overlap(address_of(memory), address_of(memory + kPage)));
  ASSERT_EQ(munmap(memory, kPage), 0);
}

TEST_F(MemhooksMonitorTest, MadviseRemoveOnSharedMemory) {
  const int fd = memfd_create("hmr-memhooks", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * kPage), 0);
  void* mapping = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* memory = static_cast<uint8_t*>(mapping);
  memory[2 * kPage] = kMarker;
  subscribe(memory, 4 * kPage);
  sink_.reset(address_of(memory + 2 * kPage));
  ASSERT_EQ(madvise(memory + 2 * kPage, 2 * kPage, MADV_REMOVE), 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory + 2 * kPage), address_of(memory + 4 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_EQ(memory[2 * kPage], 0) << "the hole was punched";
  ASSERT_EQ(munmap(memory, 4 * kPage), 0);
  close(fd);
}

TEST_F(MemhooksMonitorTest, MmapFixedOverSubscribedRange) {
  uint8_t* memory = map_anonymous(4 * kPage);
  memory[kPage] = kMarker;
  subscribe(memory, 4 * kPage);
  sink_.reset(address_of(memory + kPage));
  void* replaced = mmap(memory + kPage, kPage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(replaced, static_cast<void*>(memory + kPage));
  EXPECT_TRUE(sink_.saw_exact(address_of(memory + kPage), address_of(memory + 2 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_EQ(memory[kPage], 0);

  // Not fixed, or fixed without replacing: nothing is reported.
  sink_.reset();
  uint8_t* fresh = map_anonymous(kPage);
  void* refused = mmap(memory, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
  EXPECT_EQ(refused, MAP_FAILED);
  EXPECT_FALSE(sink_.saw_overlap(address_of(memory), address_of(memory + 4 * kPage)));
  // libc's own argument check is kept.
  errno = 0;
  EXPECT_EQ(mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(munmap(fresh, kPage), 0);
  ASSERT_EQ(munmap(memory, 4 * kPage), 0);
}

TEST_F(MemhooksMonitorTest, Shmdt) {
  const size_t size = 64 * kPage;
  const int id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
  if (id < 0) GTEST_SKIP() << "no SysV shared memory here: " << std::strerror(errno);
  void* attached = shmat(id, nullptr, 0);
  shmctl(id, IPC_RMID, nullptr);  // goes away with the last detach
  ASSERT_NE(attached, reinterpret_cast<void*>(-1));
  auto* memory = static_cast<uint8_t*>(attached);
  memory[size - 1] = kMarker;
  subscribe(memory, size);
  sink_.reset(address_of(memory + size - 1));
  ASSERT_EQ(shmdt(memory), 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory), address_of(memory + size)))
      << "the whole segment, found in /proc/self/maps";
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_FALSE(mapped(address_of(memory)));
}

TEST_F(MemhooksMonitorTest, ShmatRemapOverSubscribedRange) {
  const size_t size = 4 * kPage;
  const int id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
  if (id < 0) GTEST_SKIP() << "no SysV shared memory here: " << std::strerror(errno);
  uint8_t* memory = map_anonymous(size);
  memory[0] = kMarker;
  subscribe(memory, size);
  sink_.reset(address_of(memory));
  void* attached = shmat(id, memory, SHM_REMAP);
  shmctl(id, IPC_RMID, nullptr);
  ASSERT_EQ(attached, static_cast<void*>(memory));
  // (Whole 1 GiB pages from the attach point: a SHM_HUGETLB segment is mapped as whole huge
  // pages, and IPC_STAT does not tell one.)
  EXPECT_TRUE(sink_.saw_covering(address_of(memory), address_of(memory + size)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  ASSERT_EQ(shmdt(memory), 0);
}

// glibc's posix_madvise makes the madvise syscall itself: advice that drops pages is reported
// (it dropped cached pages unheard: found by a review); POSIX_MADV_DONTNEED, which glibc
// ignores, is not, and errors come back as posix_madvise's error number.
TEST_F(MemhooksMonitorTest, PosixMadviseThatDropsPagesIsReported) {
  uint8_t* memory = map_anonymous(2 * kPage);
  memory[0] = kMarker;
  subscribe(memory, 2 * kPage);
  sink_.reset(address_of(memory));
  EXPECT_EQ(posix_madvise(memory, 2 * kPage, POSIX_MADV_DONTNEED), 0);
  EXPECT_FALSE(sink_.saw_overlap(address_of(memory), address_of(memory + 2 * kPage)));
  EXPECT_EQ(memory[0], kMarker) << "glibc ignores POSIX_MADV_DONTNEED";
  // MADV_DONTNEED_LOCKED (24, Linux 5.18): MADV_DONTNEED is 4 too, which glibc ignores.
  constexpr int kDontneedLocked = 24;
  const int dropped = posix_madvise(memory, 2 * kPage, kDontneedLocked);
  if (dropped == EINVAL) GTEST_SKIP() << "this kernel has no MADV_DONTNEED_LOCKED";
  EXPECT_EQ(dropped, 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory), address_of(memory + 2 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_EQ(memory[0], 0) << "the pages were dropped";
  EXPECT_EQ(posix_madvise(memory + 1, kPage, kDontneedLocked), EINVAL);
  ASSERT_EQ(munmap(memory, 2 * kPage), 0);
}

// shmdt at an attach point whose first pages were unmapped since: the kernel still detaches
// the rest of the segment (ksys_shmdt looks further up for its mappings), so everything above
// is reported.  Nothing was (found by a review).
TEST_F(MemhooksMonitorTest, ShmdtAfterTheFirstPagesWereUnmapped) {
  const size_t size = 8 * kPage;
  const int id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
  if (id < 0) GTEST_SKIP() << "no SysV shared memory here: " << std::strerror(errno);
  void* attached = shmat(id, nullptr, 0);
  shmctl(id, IPC_RMID, nullptr);
  ASSERT_NE(attached, reinterpret_cast<void*>(-1));
  auto* memory = static_cast<uint8_t*>(attached);
  memory[size - 1] = kMarker;
  ASSERT_EQ(munmap(memory, kPage), 0);
  subscribe(memory + kPage, size - kPage);
  sink_.reset(address_of(memory + size - 1));
  ASSERT_EQ(shmdt(memory), 0);
  EXPECT_TRUE(sink_.saw_covering(address_of(memory + kPage), address_of(memory + size)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_FALSE(mapped(address_of(memory + size - 1)));
}

// Another patcher loaded after hmr (UCX's UCM patches munmap and madvise when libucm loads)
// writes its jump over hmr's, and hmr's hooks never run again.  The next subscription finds
// it: it is refused (the cache then hands registrations out uncached), everything cached is
// dropped at once, and start() refuses too (a default monitor falls back to userfaultfd).
// Unheard before: every later unmap could be a stale hit (found by a review).  The stand-in
// patcher here jumps to a function that makes the syscall itself, as UCM's handler does.
extern "C" int another_patchers_munmap(void* address, size_t length) {
  return static_cast<int>(syscall(SYS_munmap, address, length));
}

TEST_F(MemhooksMonitorTest, AnotherPatcherAfterUsStopsTheCachingAndDropsWhatWasCached) {
#if defined(__x86_64__)
  uint8_t* memory = map_anonymous(kPage);
  subscribe(memory, kPage);
  const uint8_t* entry = nullptr;
  uint8_t original[MemhooksMonitor::kMaxPatch];
  size_t length = 0;
  ASSERT_TRUE(monitor_.original_code("munmap", &entry, original, &length));
  // movabs $another_patchers_munmap, %rax; jmp *%rax: 12 bytes over hmr's jump (and what
  // follows it), put back at the end.
  uint8_t jump[12] = {0x48, 0xb8};
  const auto target = reinterpret_cast<uint64_t>(&another_patchers_munmap);
  std::memcpy(jump + 2, &target, sizeof target);
  jump[10] = 0xff;
  jump[11] = 0xe0;
  auto* code = const_cast<uint8_t*>(entry);
  uint8_t saved[sizeof jump];
  std::memcpy(saved, code, sizeof saved);
  const auto page = reinterpret_cast<uintptr_t>(code) & ~(kPage - 1);
  const size_t span = (reinterpret_cast<uintptr_t>(code) + sizeof jump - page + kPage - 1) &
                      ~(kPage - 1);
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(page), span, PROT_READ | PROT_WRITE | PROT_EXEC), 0);
  std::memcpy(code, jump, sizeof jump);
  sink_.reset();
  const Status refused = monitor_.subscribe(address_of(memory), kPage);
  const Status restart = monitor_.start();
  std::memcpy(code, saved, sizeof saved);  // hmr's jump again
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(page), span, PROT_READ | PROT_EXEC), 0);
  EXPECT_EQ(refused.code(), HMR_EBUSY);
  EXPECT_NE(refused.reason().find("munmap"), std::string::npos) << refused.reason();
  EXPECT_TRUE(sink_.saw_covering(0, UINTPTR_MAX)) << "what was cached was not dropped";
  EXPECT_EQ(restart.code(), HMR_EBUSY) << "start() must not say the hooks work";
  // hmr's jump back, subscriptions are taken again.
  subscribe(memory, kPage);
  ASSERT_EQ(munmap(memory, kPage), 0);
#else
  GTEST_SKIP() << "memhooks patches x86-64 only";
#endif
}

TEST_F(MemhooksMonitorTest, FreeOfLargeMallocBlock) {
#ifdef HMR_TEST_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc malloc: free() never reaches "
                  "libc's munmap";
#endif
  // Above glibc's largest dynamic mmap threshold (32 MiB): always its own mapping, which
  // free() hands back through munmap_chunk -> __munmap inside libc, past any PLT.
  constexpr size_t kSize = 64u << 20;
  auto* block = static_cast<uint8_t*>(std::malloc(kSize));
  ASSERT_NE(block, nullptr);
  block[0] = kMarker;
  subscribe(block, kSize);
  sink_.reset(address_of(block));
  std::free(block);
  EXPECT_TRUE(sink_.saw_overlap(address_of(block), address_of(block) + kSize));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  EXPECT_FALSE(mapped(address_of(block)));
}

TEST_F(MemhooksMonitorTest, BrkShrinkThroughSbrk) {
#ifdef HMR_TEST_TSAN
  GTEST_SKIP() << "ThreadSanitizer's shadow does not cover memory it did not map; the break "
                  "is moved by hand here";
#endif
  void* before = sbrk(0);
  ASSERT_NE(before, reinterpret_cast<void*>(-1));
  if (sbrk(16 * kPage) == reinterpret_cast<void*>(-1)) GTEST_SKIP() << "the break cannot grow";
  auto* grown = static_cast<uint8_t*>(before);
  grown[15 * kPage] = kMarker;
  subscribe(grown, 16 * kPage);
  sink_.reset(address_of(grown + 15 * kPage));
  ASSERT_NE(sbrk(-static_cast<intptr_t>(16 * kPage)), reinterpret_cast<void*>(-1));
  EXPECT_EQ(sbrk(0), before) << "glibc's __curbrk is kept by the hook";
  EXPECT_TRUE(sink_.saw_overlap(address_of(grown), address_of(grown + 16 * kPage)));
  EXPECT_TRUE(sink_.probe_intact_when_told());
  // Growing again works (glibc's bookkeeping is intact).
  ASSERT_EQ(sbrk(kPage), before);
  ASSERT_EQ(brk(before), 0);
  EXPECT_EQ(sbrk(0), before);
}

TEST_F(MemhooksMonitorTest, BrkShrinkByMallocTrimming) {
#ifdef HMR_TEST_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc malloc and never calls brk";
#endif
  // Small blocks come from the main arena (the break); freed together at the top they
  // let glibc trim: free() -> systrim -> __sbrk -> brk, all inside libc.
  constexpr int kBlocks = 4096;
  static void* blocks[kBlocks];  // static: the test itself must not use the heap meanwhile
  for (void*& block : blocks) {
    block = std::malloc(1000);
    ASSERT_NE(block, nullptr);
  }
  const auto top = address_of(sbrk(0));
  auto* last = static_cast<uint8_t*>(blocks[kBlocks - 1]);
  if (address_of(last) > top) GTEST_SKIP() << "malloc does not use the break here";
  last[0] = kMarker;
  subscribe(last, 1000);
  sink_.reset(address_of(last));
  for (int i = kBlocks - 1; i >= 0; --i) std::free(blocks[i]);
  if (address_of(sbrk(0)) >= top) malloc_trim(0);  // a raised trim threshold: trim by hand
  const auto lowered = address_of(sbrk(0));
  if (lowered >= top) GTEST_SKIP() << "glibc did not lower the break";
  EXPECT_TRUE(sink_.saw_overlap(lowered, top));
  if (address_of(last) >= lowered) {
    EXPECT_TRUE(sink_.saw_overlap(address_of(last), address_of(last) + 1000));
    EXPECT_TRUE(sink_.probe_intact_when_told());
  }
}

void unmap_scratch(void* scratch) { EXPECT_EQ(munmap(scratch, kPage), 0); }

TEST_F(MemhooksMonitorTest, SinkThatUnmapsIsNotifiedAgainWithoutDeadlock) {
  uint8_t* memory = map_anonymous(kPage);
  uint8_t* scratch = map_anonymous(kPage);
  subscribe(memory, kPage);
  sink_.reset();
  sink_.on_next_invalidate(&unmap_scratch, scratch);
  ASSERT_EQ(munmap(memory, kPage), 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory), address_of(memory + kPage)));
  EXPECT_TRUE(sink_.saw_exact(address_of(scratch), address_of(scratch + kPage)))
      << "the nested munmap is reported too";
}

TEST_F(MemhooksMonitorTest, StopKeepsHooksWhileSubscribed) {
  uint8_t* memory = map_anonymous(kPage);
  subscribe(memory, kPage);
  monitor_.stop();
  EXPECT_TRUE(monitor_.installed());
  monitor_.unsubscribe(address_of(memory), kPage);
  --subscriptions_;
  const uint8_t* entry = nullptr;
  uint8_t original[MemhooksMonitor::kMaxPatch];
  size_t length = 0;
  ASSERT_TRUE(monitor_.original_code("munmap", &entry, original, &length));
  EXPECT_FALSE(same_code(entry, original, length));
  monitor_.stop();
  EXPECT_FALSE(monitor_.installed());
  EXPECT_TRUE(same_code(entry, original, length)) << "libc's code is back";
  EXPECT_TRUE(MemhooksMonitor::check_patchable(entry, "munmap").ok());
  EXPECT_EQ(monitor_.subscribe(address_of(memory), kPage).code(), HMR_EINVAL);
  ASSERT_EQ(munmap(memory, kPage), 0);
  EXPECT_TRUE(monitor_.start().ok()) << "and it can be patched again";
}

TEST_F(MemhooksMonitorTest, PatchingWhileOtherThreadsMapAndUnmap) {
  // The jump goes in with one aligned store and a thread in the kernel returns to untouched
  // code, so threads running through the entries meanwhile never see half an instruction.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> rounds{0};
  std::thread worker([&] {
    while (!done.load()) {
      void* memory = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
      if (memory == MAP_FAILED) continue;
      static_cast<uint8_t*>(memory)[0] = 1;
      (void)madvise(memory, kPage, MADV_DONTNEED);
      (void)munmap(memory, 4 * kPage);
      rounds.fetch_add(1);
    }
  });
  for (int i = 0; i < 200; ++i) {
    // Each patch beside the worker's running: one of its rounds between two patches.  (It was
    // only checked that the worker ran at all, after the 200 patches: a new thread kept off
    // the CPU for their 20-300 ms exercised nothing, and failed that check.)
    const uint64_t before = rounds.load();
    while (rounds.load() == before) std::this_thread::yield();
    monitor_.stop();
    ASSERT_FALSE(monitor_.installed());
    ASSERT_TRUE(monitor_.start().ok());
  }
  done = true;
  worker.join();
  EXPECT_GE(rounds.load(), 200u);
}

TEST_F(MemhooksMonitorTest, ForkedChildIsLeftClean) {
  const uint8_t* entry = nullptr;
  uint8_t original[MemhooksMonitor::kMaxPatch];
  size_t length = 0;
  ASSERT_TRUE(monitor_.original_code("munmap", &entry, original, &length));
  uint8_t* memory = map_anonymous(2 * kPage);
  subscribe(memory, 2 * kPage);
  sink_.reset();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const size_t told = sink_.count();
    if (!same_code(entry, original, length)) _exit(1);
    if (MemhooksMonitor::instance().installed()) _exit(2);
    if (munmap(memory, kPage) != 0) _exit(3);
    if (sink_.count() != told) _exit(4);  // the child's munmap went straight to libc
    void* fresh = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED || munmap(fresh, kPage) != 0) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: code not restored, 2: still installed, 3: munmap "
                                       "failed, 4: child notified, 5: mmap/munmap failed";
  EXPECT_FALSE(same_code(entry, original, length)) << "the parent stays hooked";
  EXPECT_TRUE(monitor_.installed());
  ASSERT_EQ(munmap(memory, 2 * kPage), 0);
  EXPECT_TRUE(sink_.saw_exact(address_of(memory), address_of(memory + 2 * kPage)));
}

}  // namespace
}  // namespace hmr::core
