// The registration cache never hands out a stale registration: after memory is unmapped,
// dropped, moved, freed, shrunk or detached, a new registration at the same address is a miss
// with a new key, whatever monitor watches the memory.  Also the cache's limits, switches,
// flush and sharing rules.  The contract is docs/semantics.md, "Registration cache".
//
// A note on how staleness is observed: the software NIC moves bytes by virtual address (it
// pins nothing), so RMA through a stale key would still land in whatever is mapped at the
// address now.  The decisive checks are therefore the cache statistics (no hit, an
// invalidation) and the key (a stale hit returns the old entry's key); the RMA checks prove
// the new registration reaches the new pages and that the old key is dead.
#include <dlfcn.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/shm.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../scoped_env.h"
#include "test_support.h"

namespace {

using hmr_test::domain_attr;
using hmr_test::Pages;
using hmr_test::ScopedEnv;

constexpr size_t kPage = 4096;
constexpr uint64_t kCachedMode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

uint64_t va(const void* p) { return reinterpret_cast<uint64_t>(p); }

void* map_anywhere(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// New anonymous pages exactly at `addr`, or nullptr (the kernel would not place them there).
void* map_at(void* addr, size_t len) {
  void* p = mmap(addr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (p != addr) {  // a kernel without MAP_FIXED_NOREPLACE treats it as a hint
    munmap(p, len);
    return nullptr;
  }
  return p;
}

// "start-end VmFlags" of the mapping holding `addr` (from /proc/self/smaps), for failure
// messages: "uw" among the flags means userfaultfd watches it in write-protect mode.
std::string describe_mapping(const void* addr) {
  FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return "(no /proc/self/smaps)";
  char line[512];
  std::string current;
  bool inside = false;
  std::string result = "(unmapped)";
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line, "%lx-%lx ", &start, &end) == 2 && std::strchr(line, ':') != nullptr &&
        std::strncmp(line, "VmFlags", 7) != 0) {
      inside = va(addr) >= start && va(addr) < end;
      if (inside) current = std::string(line, std::strcspn(line, " "));
      continue;
    }
    if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      result = current + " " + std::string(line + 8);
      if (!result.empty() && result.back() == '\n') result.pop_back();
      break;
    }
  }
  std::fclose(smaps);
  return result;
}

std::vector<uint8_t> pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> bytes(len);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 29 + 1);
  return bytes;
}

hmr_domain_stats query_stats(hmr_domain* domain) {
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

hmr_mr* reg_in(hmr_domain* domain, const void* buf, size_t len, uint64_t access = kRemote,
               uint64_t requested_key = 0, uint64_t flags = 0) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, buf, len, access, 0, requested_key, flags, &mr, nullptr);
  EXPECT_EQ(rc, 0) << "hmr_mr_reg(" << buf << ", " << len << "): " << hmr_last_error();
  return rc == 0 ? mr : nullptr;
}

// A domain and a connected pair of endpoints in it (initiator -> target).
class CachedDomain {
 public:
  // `monitor` NULL takes the environment/default.  Sets `skip` when the monitor is not built.
  bool open(const char* monitor, size_t max_count = 0, size_t max_size = 0,
            uint64_t mode = kCachedMode, const char* nic_options = nullptr) {
    hmr_domain_attr attr = domain_attr(mode, nic_options);
    attr.cache_monitor = monitor;
    attr.cache_max_count = max_count;
    attr.cache_max_size = max_size;
    const int rc = hmr_domain_open(&attr, &domain_);
    if (rc != 0) {
      domain_ = nullptr;
      open_rc_ = rc;
      open_error_ = hmr_last_error();
      return false;
    }
    negotiated_ = attr;
    monitor_name_ = attr.cache_monitor != nullptr ? attr.cache_monitor : "";
    if (hmr_ep_open(domain_, nullptr, &target_) != 0 ||
        hmr_ep_open(domain_, nullptr, &initiator_) != 0 ||
        hmr_ep_connect(initiator_, target_) != 0) {
      ADD_FAILURE() << "endpoints: " << hmr_last_error();
      return false;
    }
    return true;
  }
  ~CachedDomain() { close(); }
  void close() {
    if (initiator_ != nullptr) {
      EXPECT_EQ(hmr_ep_close(initiator_), 0) << hmr_last_error();
    }
    if (target_ != nullptr) {
      EXPECT_EQ(hmr_ep_close(target_), 0) << hmr_last_error();
    }
    if (domain_ != nullptr) {
      EXPECT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
    }
    initiator_ = target_ = nullptr;
    domain_ = nullptr;
  }

  hmr_domain* get() const { return domain_; }
  hmr_ep* initiator() const { return initiator_; }
  hmr_ep* target() const { return target_; }
  int open_rc() const { return open_rc_; }
  const std::string& open_error() const { return open_error_; }
  const hmr_domain_attr& negotiated() const { return negotiated_; }
  const std::string& monitor_name() const { return monitor_name_; }

  hmr_domain_stats stats() const { return query_stats(domain_); }
  hmr_mr* reg(const void* buf, size_t len, uint64_t access = kRemote) const {
    return reg_in(domain_, buf, len, access);
  }
  int write(uint64_t key, const void* addr, const void* data, size_t len) const {
    return hmr_ep_write(initiator_, data, len, nullptr, va(addr), key);
  }
  int read(uint64_t key, const void* addr, void* out, size_t len) const {
    return hmr_ep_read(initiator_, out, len, nullptr, va(addr), key);
  }

 private:
  hmr_domain* domain_ = nullptr;
  hmr_ep* target_ = nullptr;
  hmr_ep* initiator_ = nullptr;
  int open_rc_ = 0;
  std::string open_error_;
  hmr_domain_attr negotiated_{};
  std::string monitor_name_;
};

// Opens `domain` (a CachedDomain) with these arguments, or skips the test where the
// userfaultfd monitor cannot run (seccomp, valgrind, old kernels): it says why.
#define OPEN_OR_SKIP(domain, ...)                                                         \
  do {                                                                                    \
    if (!(domain).open(__VA_ARGS__)) {                                                    \
      if ((domain).open_rc() == -HMR_ENOSYS) {                                            \
        GTEST_SKIP() << "userfaultfd not available here: " << (domain).open_error();      \
      }                                                                                   \
      FAIL() << "hmr_domain_open: " << (domain).open_rc() << " " << (domain).open_error(); \
    }                                                                                     \
  } while (0)

// ====================================================================== per monitor

class CacheCoherence : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!domain_.open(GetParam())) {
      if ((domain_.open_rc() == -HMR_ENOENT || domain_.open_rc() == -HMR_EOPNOTSUPP) &&
          std::strcmp(GetParam(), "memhooks") == 0) {
        GTEST_SKIP() << "memhooks monitor not available: " << domain_.open_error();
      }
      if (domain_.open_rc() == -HMR_ENOSYS && std::strcmp(GetParam(), "userfaultfd") == 0) {
        GTEST_SKIP() << "userfaultfd not available here: " << domain_.open_error();
      }
      FAIL() << "hmr_domain_open with cache_monitor=" << GetParam() << ": "
             << domain_.open_rc() << " " << domain_.open_error();
    }
    ASSERT_EQ(domain_.monitor_name(), GetParam());
    ASSERT_GT(domain_.negotiated().cache_max_count, 0u);
  }
  void TearDown() override { domain_.close(); }

  // Registers [addr, +len), closes it, and checks that a second registration hits the cached
  // entry (so what follows tests a cache that really caches this memory).  Returns the key.
  uint64_t cache_range(void* addr, size_t len) {
    hmr_mr* first = domain_.reg(addr, len);
    if (first == nullptr) return HMR_KEY_NOTAVAIL;
    const uint64_t key = hmr_mr_key(first);
    EXPECT_EQ(hmr_mr_close(first), 0) << hmr_last_error();
    const hmr_domain_stats before = domain_.stats();
    hmr_mr* second = domain_.reg(addr, len);
    if (second == nullptr) return HMR_KEY_NOTAVAIL;
    const hmr_domain_stats after = domain_.stats();
    cached_ = after.cache_hits == before.cache_hits + 1 && hmr_mr_key(second) == key;
    EXPECT_EQ(hmr_mr_close(second), 0) << hmr_last_error();
    return key;
  }

  // After the memory behind [addr, +len) changed (`before`: stats taken before the change):
  // registering it again must miss, get a new key, reach the new pages, and the old key
  // (whose MR was closed) must be dead.
  void expect_fresh_registration(void* addr, size_t len, uint64_t old_key,
                                 const hmr_domain_stats& before) {
    hmr_mr* mr = domain_.reg(addr, len);
    ASSERT_NE(mr, nullptr);
    const uint64_t key = hmr_mr_key(mr);
    const hmr_domain_stats after = domain_.stats();
    EXPECT_EQ(after.cache_hits, before.cache_hits) << "STALE HIT: the old entry was reused";
    EXPECT_NE(key, old_key) << "STALE HIT: the new MR has the old registration's key";
    EXPECT_GT(after.cache_misses, before.cache_misses);
    EXPECT_GT(after.cache_invalidations, before.cache_invalidations)
        << "the old entry was not invalidated";
    EXPECT_GT(after.nic_deregistrations, before.nic_deregistrations)
        << "the old (unused) registration was not released";

    // Bytes written through the new key land in the new pages, and a read returns them.
    auto* bytes = static_cast<uint8_t*>(addr);
    const size_t offset = len / 2 + 8;
    const std::vector<uint8_t> out = pattern(64, 0x3c);
    EXPECT_EQ(domain_.write(key, bytes + offset, out.data(), out.size()), 0) << hmr_last_error();
    EXPECT_EQ(std::memcmp(bytes + offset, out.data(), out.size()), 0);
    std::vector<uint8_t> in(64, 0);
    EXPECT_EQ(domain_.read(key, bytes, in.data(), in.size()), 0) << hmr_last_error();
    EXPECT_EQ(std::memcmp(in.data(), bytes, in.size()), 0);

    // The old key no longer reaches anything.
    const std::vector<uint8_t> junk(16, 0xee);
    EXPECT_HMR_ERROR(domain_.write(old_key, bytes, junk.data(), junk.size()), HMR_EACCES);
    EXPECT_NE(std::memcmp(bytes, junk.data(), junk.size()), 0) << "bytes moved by the old key";
    EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  }

  CachedDomain domain_;
  bool cached_ = false;
};

TEST_P(CacheCoherence, MunmapThenMmapAtTheSameAddressMisses) {
  const size_t len = 4 * kPage;
  void* p = map_anywhere(len);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x11, len);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_) << "the range was not cached: nothing to test";

  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(munmap(p, len), 0);
  void* q = map_at(p, len);
  if (q == nullptr) GTEST_SKIP() << "the kernel did not map new pages at " << p;
  std::memset(q, 0x22, len);
  expect_fresh_registration(q, len, old_key, before);
  // The new pages, not the old ones: their own content is what the NIC reads.
  uint8_t first = 0;
  hmr_mr* mr = domain_.reg(q, len);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(domain_.read(hmr_mr_key(mr), q, &first, 1), 0) << hmr_last_error();
  EXPECT_EQ(first, 0x22);
  EXPECT_EQ(hmr_mr_close(mr), 0);
  munmap(q, len);
}

TEST_P(CacheCoherence, PartialMunmapInvalidatesTheWholeEntry) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(munmap(p + 2 * kPage, kPage), 0);  // one page in the middle
  // What is still mapped before the hole no longer shares the old registration either.
  hmr_mr* head = domain_.reg(p, 2 * kPage);
  ASSERT_NE(head, nullptr);
  EXPECT_NE(hmr_mr_key(head), old_key);
  const hmr_domain_stats after = domain_.stats();
  EXPECT_EQ(after.cache_hits, before.cache_hits) << "STALE HIT after a partial munmap";
  EXPECT_GT(after.cache_invalidations, before.cache_invalidations);
  EXPECT_EQ(hmr_mr_close(head), 0);
  void* hole = map_at(p + 2 * kPage, kPage);
  if (hole != nullptr) {
    const hmr_domain_stats again = domain_.stats();
    hmr_mr* whole = domain_.reg(p, len);
    ASSERT_NE(whole, nullptr);
    EXPECT_NE(hmr_mr_key(whole), old_key);
    EXPECT_EQ(domain_.stats().cache_hits, again.cache_hits);
    EXPECT_EQ(hmr_mr_close(whole), 0);
  }
  munmap(p, len);
}

// Memory mapped into what was a hole next to watched memory must be watched when it is
// registered: a monitor that watches more than the registered range (the userfaultfd one
// watches whole 2 MiB blocks) must not believe a hole was watched with its neighbours.
TEST_P(CacheCoherence, MemoryMappedIntoAHoleNextToWatchedMemoryIsWatched) {
  constexpr size_t k2M = 2u << 20;
  auto* area = static_cast<uint8_t*>(map_anywhere(2 * k2M));
  ASSERT_NE(area, nullptr);
  uint8_t* const block = area + (k2M - va(area) % k2M) % k2M;  // one whole aligned block inside
  uint8_t* const neighbour = block + kPage;
  uint8_t* const hole = block + 3 * kPage;
  ASSERT_EQ(munmap(hole, kPage), 0);

  // Watched while the hole is there.
  hmr_mr* first = domain_.reg(neighbour, kPage);
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(hmr_mr_close(first), 0);

  // New pages in the hole, registered and cached.
  ASSERT_EQ(map_at(hole, kPage), static_cast<void*>(hole));
  std::memset(hole, 0x81, kPage);
  const uint64_t old_key = cache_range(hole, kPage);
  ASSERT_TRUE(cached_);

  // Unmapping them must reach the cache.
  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(munmap(hole, kPage), 0);
  ASSERT_EQ(map_at(hole, kPage), static_cast<void*>(hole));
  SCOPED_TRACE("mapping after the remap: " + describe_mapping(hole));
  expect_fresh_registration(hole, kPage, old_key, before);
  munmap(area, 2 * k2M);
}

TEST_P(CacheCoherence, FreeThenMallocOfALargeBlockMisses) {
  constexpr size_t kLarge = 64u << 20;  // above glibc's largest mmap threshold: mmap'ed
  void* block = std::malloc(kLarge);
  ASSERT_NE(block, nullptr);
  std::memset(block, 0x31, kPage);
  const uint64_t old_key = cache_range(block, kLarge);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  void* old_address = block;
  std::free(block);
  void* again = std::malloc(kLarge);
  ASSERT_NE(again, nullptr);
  std::memset(again, 0x32, kPage);
  if (again == old_address) {
    expect_fresh_registration(again, kLarge, old_key, before);
  } else {
    // Elsewhere (e.g. a sanitizer's allocator keeps the old block): still no hit.
    hmr_mr* mr = domain_.reg(again, kLarge);
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(hmr_mr_key(mr), old_key);
    EXPECT_EQ(domain_.stats().cache_hits, before.cache_hits);
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
  std::free(again);
}

TEST_P(CacheCoherence, MadviseDontneedMisses) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x41, len);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(madvise(p + kPage, kPage, MADV_DONTNEED), 0);  // one page's frames are dropped
  EXPECT_EQ(p[kPage], 0) << "MADV_DONTNEED did not drop the page";
  expect_fresh_registration(p, len, old_key, before);
  munmap(p, len);
}

TEST_P(CacheCoherence, MadviseFreeMisses) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x42, len);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  // The kernel may take the frames at any time from now on: the registration is stale.
  ASSERT_EQ(madvise(p, 2 * kPage, MADV_FREE), 0) << std::strerror(errno);
  expect_fresh_registration(p, len, old_key, before);
  munmap(p, len);
}

// process_madvise(2) on the caller's own pidfd (glibc 2.36; any advice from Linux 6.13):
// MADV_DONTNEED through it drops the pages as madvise does.  memhooks did not hook it and gave
// a stale hit; userfaultfd gets the kernel's REMOVE event.
TEST_P(CacheCoherence, ProcessMadviseDontneedMisses) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x44, len);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  if (pidfd < 0) {
    munmap(p, len);
    GTEST_SKIP() << "pidfd_open: " << std::strerror(errno);
  }
  const hmr_domain_stats before = domain_.stats();
  // Two ranges, the second page and the fourth, in the opposite order.
  const iovec ranges[2] = {{p + 3 * kPage, kPage}, {p + kPage, kPage}};
  const ssize_t advised = process_madvise(pidfd, ranges, 2, MADV_DONTNEED, 0);
  const int err = errno;
  close(pidfd);
  if (advised < 0 && (err == EINVAL || err == EPERM || err == ENOSYS)) {
    munmap(p, len);
    GTEST_SKIP() << "this kernel refuses MADV_DONTNEED through process_madvise: "
                 << std::strerror(err);
  }
  ASSERT_EQ(advised, static_cast<ssize_t>(2 * kPage)) << std::strerror(err);
  EXPECT_EQ(p[kPage], 0) << "process_madvise did not drop the page";
  expect_fresh_registration(p, len, old_key, before);
  munmap(p, len);
}

// Guard markers (MADV_GUARD_INSTALL, Linux 6.13) replace the pages; removing them leaves
// fresh zero pages at the same address.  memhooks sees the madvise; the kernel gives
// userfaultfd no event for it (a documented limit, docs/semantics.md), so that monitor is
// skipped.  memhooks gave a stale hit before.
TEST_P(CacheCoherence, GuardPagesInstalledAndRemovedMiss) {
  constexpr int kMadvGuardInstall = 102;  // include/uapi/asm-generic/mman-common.h (6.13)
  constexpr int kMadvGuardRemove = 103;
  if (domain_.monitor_name() == "userfaultfd") {
    GTEST_SKIP() << "the kernel reports no userfaultfd event for guard markers";
  }
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x43, len);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  if (madvise(p + kPage, kPage, kMadvGuardInstall) != 0) {
    const int err = errno;
    munmap(p, len);
    GTEST_SKIP() << "no guard pages on this kernel: " << std::strerror(err);
  }
  ASSERT_EQ(madvise(p + kPage, kPage, kMadvGuardRemove), 0) << std::strerror(errno);
  EXPECT_EQ(p[kPage], 0) << "the guarded page's frame survived";
  expect_fresh_registration(p, len, old_key, before);
  munmap(p, len);
}

TEST_P(CacheCoherence, MremapAwayThenMapAtTheOldAddressMisses) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x51, len);
  auto* destination = static_cast<uint8_t*>(map_anywhere(len));  // reserves an address
  ASSERT_NE(destination, nullptr);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);

  const hmr_domain_stats before = domain_.stats();
  void* moved = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, destination);
  ASSERT_EQ(moved, static_cast<void*>(destination)) << std::strerror(errno);
  EXPECT_EQ(destination[0], 0x51);
  void* q = map_at(p, len);
  if (q == nullptr) {
    munmap(destination, len);
    GTEST_SKIP() << "the kernel did not map new pages at " << static_cast<void*>(p);
  }
  std::memset(q, 0x52, len);
  expect_fresh_registration(q, len, old_key, before);

  // The moved pages at their new address are a registration of their own.
  const hmr_domain_stats at_destination = domain_.stats();
  hmr_mr* mr = domain_.reg(destination, len);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(domain_.stats().cache_hits, at_destination.cache_hits);
  uint8_t byte = 0;
  EXPECT_EQ(domain_.read(hmr_mr_key(mr), destination + 3, &byte, 1), 0) << hmr_last_error();
  EXPECT_EQ(byte, 0x51);
  EXPECT_EQ(hmr_mr_close(mr), 0);
  munmap(q, len);
  munmap(destination, len);
}

TEST_P(CacheCoherence, MremapShrinkInPlaceMisses) {
  const size_t len = 4 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  const uint64_t old_key = cache_range(p, len);
  ASSERT_TRUE(cached_);
  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(mremap(p, len, 2 * kPage, 0), static_cast<void*>(p)) << std::strerror(errno);
  void* tail = map_at(p + 2 * kPage, 2 * kPage);
  if (tail == nullptr) {
    munmap(p, 2 * kPage);
    GTEST_SKIP() << "the kernel did not map new pages after the shrunk mapping";
  }
  expect_fresh_registration(p, len, old_key, before);
  munmap(p, len);
}

TEST_P(CacheCoherence, BrkShrinkThenGrowMisses) {
  const size_t len = 4 * kPage;
  auto* const initial = static_cast<uint8_t*>(sbrk(0));
  ASSERT_NE(initial, reinterpret_cast<uint8_t*>(-1));
  const size_t pad = (kPage - va(initial) % kPage) % kPage;
  if (sbrk(static_cast<intptr_t>(pad + len)) == reinterpret_cast<void*>(-1)) {
    GTEST_SKIP() << "sbrk cannot grow the heap: " << std::strerror(errno);
  }
  uint8_t* const range = initial + pad;
  if (sbrk(0) != range + len) {
    GTEST_SKIP() << "someone else moved the program break; not shrinking it under them";
  }
  std::memset(range, 0x61, len);
  const uint64_t old_key = cache_range(range, len);
  if (sbrk(0) != range + len) {
    GTEST_SKIP() << "malloc moved the program break while registering; cannot shrink safely";
  }
  ASSERT_TRUE(cached_) << "the heap range was not cached";

  const hmr_domain_stats before = domain_.stats();
  ASSERT_NE(sbrk(-static_cast<intptr_t>(len)), reinterpret_cast<void*>(-1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(len)), reinterpret_cast<void*>(-1));
  ASSERT_EQ(sbrk(0), range + len);
  EXPECT_EQ(range[0], 0) << "the grown heap is not fresh pages";
  expect_fresh_registration(range, len, old_key, before);
  if (sbrk(0) == range + len) (void)sbrk(-static_cast<intptr_t>(pad + len));
}

TEST_P(CacheCoherence, ShmdtThenShmatMisses) {
  const size_t len = 4 * kPage;
  const int first_id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
  if (first_id < 0) GTEST_SKIP() << "shmget: " << std::strerror(errno);
  auto* p = static_cast<uint8_t*>(shmat(first_id, nullptr, 0));
  shmctl(first_id, IPC_RMID, nullptr);  // goes away with its last detach
  ASSERT_NE(p, reinterpret_cast<uint8_t*>(-1)) << std::strerror(errno);
  std::memset(p, 0x71, len);
  const uint64_t old_key = cache_range(p, len);
  if (!cached_) {
    shmdt(p);
    GTEST_SKIP() << "the " << GetParam() << " monitor does not cache SysV shared memory";
  }

  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(shmdt(p), 0) << std::strerror(errno);
  const int second_id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
  ASSERT_GE(second_id, 0) << std::strerror(errno);
  auto* q = static_cast<uint8_t*>(shmat(second_id, p, 0));  // the old address, if free
  if (q == reinterpret_cast<uint8_t*>(-1)) q = static_cast<uint8_t*>(shmat(second_id, nullptr, 0));
  shmctl(second_id, IPC_RMID, nullptr);
  ASSERT_NE(q, reinterpret_cast<uint8_t*>(-1)) << std::strerror(errno);
  std::memset(q, 0x72, len);
  if (q == p) {
    expect_fresh_registration(q, len, old_key, before);
  } else {
    hmr_mr* mr = domain_.reg(q, len);
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(hmr_mr_key(mr), old_key);
    const hmr_domain_stats after = domain_.stats();
    EXPECT_EQ(after.cache_hits, before.cache_hits);
    EXPECT_GT(after.cache_invalidations, before.cache_invalidations)
        << "shmdt did not invalidate the detached segment's entry";
    EXPECT_EQ(hmr_mr_close(mr), 0);
  }
  shmdt(q);
}

// The kernel's shmdt unmaps every mapping of the segment within its size, also those after
// a hole the application punched into the attachment (ipc/shm.c, ksys_shmdt).
TEST_P(CacheCoherence, ShmdtUnmapsWhatLiesBeyondAHoleInTheAttachment) {
  const size_t len = 3 * kPage;
  const int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
  if (id < 0) GTEST_SKIP() << "shmget: " << std::strerror(errno);
  auto* p = static_cast<uint8_t*>(shmat(id, nullptr, 0));
  shmctl(id, IPC_RMID, nullptr);
  ASSERT_NE(p, reinterpret_cast<uint8_t*>(-1)) << std::strerror(errno);
  ASSERT_EQ(munmap(p + kPage, kPage), 0);  // the hole
  uint8_t* last = p + 2 * kPage;
  std::memset(last, 0x73, kPage);
  const uint64_t old_key = cache_range(last, kPage);
  if (!cached_) {
    shmdt(p);
    GTEST_SKIP() << "the " << GetParam() << " monitor does not cache SysV shared memory";
  }

  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(shmdt(p), 0) << std::strerror(errno);
  void* q = map_at(last, kPage);
  ASSERT_NE(q, nullptr) << "shmdt left the page after the hole mapped: " << describe_mapping(last);
  std::memset(q, 0x74, kPage);
  expect_fresh_registration(q, kPage, old_key, before);
  munmap(q, kPage);
}

// ---------------------------------------------------------------------- in use

TEST_P(CacheCoherence, HeldRegistrationOutlivesItsMemoryUntilClose) {
  const size_t len = 2 * kPage;
  auto* p = static_cast<uint8_t*>(map_anywhere(len));
  ASSERT_NE(p, nullptr);
  hmr_mr* held = domain_.reg(p, len);
  ASSERT_NE(held, nullptr);
  const uint64_t key = hmr_mr_key(held);
  const uint64_t value = 0xabcdef0123456789ULL;
  ASSERT_EQ(domain_.write(key, p, &value, sizeof value), 0) << hmr_last_error();
  hmr_domain_stats before = domain_.stats();
  EXPECT_EQ(before.cache_in_use, 1u);

  ASSERT_EQ(munmap(p, len), 0);
  // A registration elsewhere orders this thread after the monitor's work on the munmap.
  Pages other(kPage);
  hmr_mr* probe = domain_.reg(other.data(), kPage);
  ASSERT_NE(probe, nullptr);
  ASSERT_EQ(hmr_mr_close(probe), 0);

  hmr_domain_stats after = domain_.stats();
  EXPECT_EQ(after.cache_invalidations, before.cache_invalidations + 1);
  EXPECT_EQ(after.nic_deregistrations, before.nic_deregistrations)
      << "the NIC registration was released under its holder";
  EXPECT_EQ(after.mr_open, before.mr_open);
  EXPECT_EQ(hmr_mr_key(held), key) << "the holder's key changed";
  EXPECT_NE(hmr_mr_desc(held), nullptr);
  // The pages are gone: RMA through the held key fails cleanly.
  uint64_t sink = 0;
  EXPECT_HMR_ERROR(domain_.read(key, p, &sink, sizeof sink), HMR_EFAULT);
  EXPECT_HMR_ERROR(domain_.write(key, p, &value, sizeof value), HMR_EFAULT);

  // New pages at the address: a new registration, while the old one is still held.
  void* q = map_at(p, len);
  if (q != nullptr) {
    const hmr_domain_stats mid = domain_.stats();
    hmr_mr* fresh = domain_.reg(q, len);
    ASSERT_NE(fresh, nullptr);
    EXPECT_NE(hmr_mr_key(fresh), key) << "STALE HIT on a held, invalidated entry";
    EXPECT_EQ(domain_.stats().cache_hits, mid.cache_hits);
    EXPECT_EQ(hmr_mr_close(fresh), 0);
  }

  before = domain_.stats();
  ASSERT_EQ(hmr_mr_close(held), 0) << hmr_last_error();
  after = domain_.stats();
  EXPECT_EQ(after.nic_deregistrations, before.nic_deregistrations + 1)
      << "closing the last holder must release the NIC registration";
  EXPECT_HMR_ERROR(domain_.read(key, p, &sink, sizeof sink), HMR_EACCES);
  if (q != nullptr) munmap(q, len);
}

// ---------------------------------------------------------------------- threads

// fork() of a multi-threaded process (a data loader starting its workers): the child has its
// parent's domains, but not the parent's threads (which may hold their locks) nor its NIC
// resources, nor its watching (memory hooks are taken out of it, and a userfaultfd watches
// the parent's address space).  The parent's domain must refuse the child with HMR_EBADF and
// a reason, never hand it what the parent cached for memory it has since replaced, and close
// there without touching the parent's registrations; a domain the child opens must cache and
// stay coherent; and the parent's cache must go on as before.
using hmr_test::kUnderThreadSanitizer;

TEST_P(CacheCoherence, ForkedChildNeverHitsWhatItsParentCached) {
  void* p = map_anywhere(kPage);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x11, kPage);
  const uint64_t old_key = cache_range(p, kPage);
  ASSERT_TRUE(cached_) << "the range was not cached: nothing to test";

  // The child reports what went wrong as bits of its exit status (its gtest is a copy).
  enum : int {
    kInheritedServed = 1, kNoReason = 2, kInheritedStats = 4, kChildOpenFailed = 8,
    kChildNotCaching = 16, kChildStale = 32, kNoRemap = 64, kInheritedCloseFailed = 128
  };
  const int failed = hmr_test::run_forked([&] {
    int wrong = 0;
    munmap(p, kPage);
    void* q = map_at(p, kPage);
    if (q == nullptr) return int{kNoRemap};
    std::memset(q, 0x22, kPage);
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain_.get(), q, kPage, kRemote, 0, 0, 0, &mr, nullptr) != -HMR_EBADF) {
      wrong |= kInheritedServed;
      if (mr != nullptr) hmr_mr_close(mr);
    } else if (std::strstr(hmr_last_error(), "fork()") == nullptr) {
      wrong |= kNoReason;
    }
    hmr_domain_stats stats;
    std::memset(&stats, 0, sizeof stats);
    stats.size = sizeof stats;
    if (hmr_domain_query_stats(domain_.get(), &stats) != -HMR_EBADF) wrong |= kInheritedStats;
    // A domain of the child's own caches, and sees the child's munmap.  Not under
    // ThreadSanitizer, whose runtime ends a child of a multi-threaded process that starts a
    // thread (as the child's userfaultfd monitor does).
    if (!kUnderThreadSanitizer) {
      CachedDomain own;
      if (!own.open(GetParam())) return wrong | kChildOpenFailed;
      void* r = map_anywhere(kPage);
      hmr_mr* first = own.reg(r, kPage);
      const uint64_t key = first != nullptr ? hmr_mr_key(first) : HMR_KEY_NOTAVAIL;
      if (first != nullptr) hmr_mr_close(first);
      const uint64_t hits = own.stats().cache_hits;
      hmr_mr* second = own.reg(r, kPage);
      if (second == nullptr || own.stats().cache_hits != hits + 1 || hmr_mr_key(second) != key) {
        wrong |= kChildNotCaching;
      }
      if (second != nullptr) hmr_mr_close(second);
      munmap(r, kPage);
      if (map_at(r, kPage) == nullptr) return wrong | kNoRemap;
      const uint64_t hits_before_remap = own.stats().cache_hits;
      hmr_mr* third = own.reg(r, kPage);
      if (third == nullptr || own.stats().cache_hits != hits_before_remap ||
          hmr_mr_key(third) == key) {
        wrong |= kChildStale;
      }
      if (third != nullptr) hmr_mr_close(third);
      munmap(r, kPage);
    }
    // The inherited objects close in the child (its copies only), once.
    if (hmr_ep_close(domain_.initiator()) != 0 || hmr_ep_close(domain_.target()) != 0 ||
        hmr_domain_close(domain_.get()) != 0 || hmr_domain_close(domain_.get()) != -HMR_EINVAL) {
      wrong |= kInheritedCloseFailed;
    }
    return wrong;
  });
  ASSERT_GE(failed, 0) << "the child could not be forked, or died of a signal";
  if (failed & kNoRemap) GTEST_SKIP() << "the kernel did not map new pages at the old address";
  EXPECT_EQ(failed & kInheritedServed, 0) << "the parent's domain registered for the child";
  EXPECT_EQ(failed & kNoReason, 0) << "the child's refusal does not name fork()";
  EXPECT_EQ(failed & kInheritedStats, 0) << "the parent's domain answered the child's stats";
  EXPECT_EQ(failed & kChildOpenFailed, 0) << "the child could not open a domain of its own";
  EXPECT_EQ(failed & kChildNotCaching, 0) << "the child's own domain does not cache";
  EXPECT_EQ(failed & kChildStale, 0) << "STALE HIT in the child's own domain after munmap";
  EXPECT_EQ(failed & kInheritedCloseFailed, 0)
      << "the child could not close the inherited domain once (and a second close succeeded)";

  // The parent's cache still holds its entry, and its monitor still watches.
  const hmr_domain_stats hits_before = domain_.stats();
  hmr_mr* again = domain_.reg(p, kPage);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(domain_.stats().cache_hits, hits_before.cache_hits + 1);
  EXPECT_EQ(hmr_mr_key(again), old_key);
  EXPECT_EQ(hmr_mr_close(again), 0);
  const hmr_domain_stats before = domain_.stats();
  ASSERT_EQ(munmap(p, kPage), 0);
  void* q = map_at(p, kPage);
  if (q == nullptr) GTEST_SKIP() << "the kernel did not map new pages at " << p;
  expect_fresh_registration(q, kPage, old_key, before);
  munmap(q, kPage);
}

// Two threads register and close random pages of a set of slots while a third unmaps and
// maps them again.  A hit on a registration made before a munmap that completed before the
// registration call started is a stale hit; it is recognised by its key: a key is first seen
// by some thread, which bounds when it was registered (before that thread read the slot's
// count of started munmaps), and any later registration call that starts after more munmaps
// of the slot have completed must not return it.
TEST_P(CacheCoherence, ConcurrentRemapsNeverYieldStaleHits) {
  constexpr size_t kSlots = 16;
  constexpr int kRegistrars = 2;
  constexpr int kIterations = 1500;
  constexpr int kRemaps = 300;

  auto* region = static_cast<uint8_t*>(map_anywhere(kSlots * kPage));
  ASSERT_NE(region, nullptr);
  struct Slot {
    std::atomic<uint64_t> started{0};    // munmaps begun
    std::atomic<uint64_t> completed{0};  // munmaps returned
    std::atomic<uint64_t> mapped{0};     // remaps finished, generation written and published
    std::atomic<uint64_t> generation{0};
    std::atomic<bool> lost{false};       // someone else took the address: left alone
  };
  std::vector<Slot> slots(kSlots);
  auto slot_address = [&](size_t s) { return region + s * kPage; };
  auto word_at = [&](size_t s) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot_address(s)));
  };

  struct Seen {
    size_t slot;
    uint64_t started_bound;  // munmaps of the slot begun when the key was first seen
  };
  std::mutex seen_mutex;
  std::unordered_map<uint64_t, Seen> seen;

  struct Report {
    uint64_t stale = 0, errors = 0, verified = 0, registrations = 0;
    std::string first;
    void fail(const std::string& what, bool is_stale) {
      if (stale + errors == 0) first = what;
      ++(is_stale ? stale : errors);
    }
  };
  std::vector<Report> reports(kRegistrars + 1);
  std::latch start(kRegistrars + 1);
  // The remapper keeps pace with the registrars (a remap per so many registrations), so the
  // two overlap for the whole run whichever is faster on this machine and monitor.
  std::atomic<uint64_t> progress{0};
  std::atomic<int> registrars_done{0};

  std::vector<hmr_ep*> initiators(kRegistrars, nullptr);
  for (hmr_ep*& ep : initiators) {
    ASSERT_EQ(hmr_ep_open(domain_.get(), nullptr, &ep), 0) << hmr_last_error();
    ASSERT_EQ(hmr_ep_connect(ep, domain_.target()), 0) << hmr_last_error();
  }

  auto registrar = [&](int t) {
    Report& report = reports[static_cast<size_t>(t)];
    uint64_t rng = 0x243F6A8885A308D3ULL + static_cast<uint64_t>(t) * 0x13198A2E03707344ULL;
    start.arrive_and_wait();
    for (int i = 0; i < kIterations; ++i) {
      progress.fetch_add(1);
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      const size_t s = (rng >> 33) % kSlots;
      Slot& slot = slots[s];
      if (slot.lost.load()) continue;
      const uint64_t started_before = slot.started.load();
      const uint64_t completed_before = slot.completed.load();
      const uint64_t mapped_before = slot.mapped.load();
      const uint64_t generation = slot.generation.load();
      hmr_mr* mr = nullptr;
      const int rc = hmr_mr_reg(domain_.get(), slot_address(s), kPage, kRemote, 0, 0, 0, &mr,
                                nullptr);
      if (rc != 0) {
        // Only a page caught unmapped may refuse.
        if (!(rc == -HMR_EFAULT && slot.started.load() != mapped_before)) {
          report.fail("hmr_mr_reg: " + std::to_string(rc) + " " + hmr_last_error(), false);
        }
        continue;
      }
      ++report.registrations;
      const uint64_t key = hmr_mr_key(mr);
      uint64_t value = ~0ULL;
      const int read_rc = hmr_ep_read(initiators[static_cast<size_t>(t)], &value, sizeof value,
                                      nullptr, va(slot_address(s)), key);
      const uint64_t started_after = slot.started.load();
      const bool stable = started_before == mapped_before && started_after == started_before;
      if (stable) {
        // No remap touched the slot from before the registration to after the read: the key
        // must reach the page the remapper published, with its generation in it.
        if (read_rc != 0) {
          report.fail("RMA read on a stable slot: " + std::to_string(read_rc) + " " +
                          hmr_last_error(), false);
        } else if (value != generation) {
          report.fail("slot " + std::to_string(s) + " read generation " +
                          std::to_string(value) + ", published " + std::to_string(generation),
                      false);
        } else {
          ++report.verified;
        }
      } else if (read_rc != 0 && read_rc != -HMR_EFAULT) {
        report.fail("RMA read during a remap: " + std::to_string(read_rc), false);
      }
      {
        std::lock_guard<std::mutex> lock(seen_mutex);
        auto [it, first_sighting] = seen.try_emplace(key, Seen{s, started_after});
        if (!first_sighting) {
          if (it->second.slot != s) {
            report.fail("key " + std::to_string(key) + " seen for slots " +
                            std::to_string(it->second.slot) + " and " + std::to_string(s),
                        false);
          } else if (completed_before > it->second.started_bound) {
            report.fail("STALE HIT: slot " + std::to_string(s) + " key " + std::to_string(key) +
                            " first seen when " + std::to_string(it->second.started_bound) +
                            " munmaps had begun, returned again after " +
                            std::to_string(completed_before) + " had completed; mapping now " +
                            describe_mapping(slot_address(s)),
                        true);
          } else {
            it->second.started_bound = std::min(it->second.started_bound, started_after);
          }
        }
      }
      const int close_rc = hmr_mr_close(mr);
      if (close_rc != 0) report.fail("hmr_mr_close: " + std::to_string(close_rc), false);
    }
    registrars_done.fetch_add(1);
  };

  auto remapper = [&] {
    Report& report = reports[kRegistrars];
    uint64_t rng = 0xA4093822299F31D0ULL;
    uint64_t next_generation = 0;
    start.arrive_and_wait();
    for (int i = 0; i < kRemaps; ++i) {
      const uint64_t due = static_cast<uint64_t>(i) * kRegistrars * kIterations / kRemaps;
      while (progress.load() < due && registrars_done.load() < kRegistrars) {
        std::this_thread::yield();
      }
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      const size_t s = (rng >> 33) % kSlots;
      Slot& slot = slots[s];
      if (slot.lost.load()) continue;
      slot.started.fetch_add(1);
      if (munmap(slot_address(s), kPage) != 0) {
        report.fail(std::string("munmap: ") + std::strerror(errno), false);
        return;
      }
      slot.completed.fetch_add(1);
      if (map_at(slot_address(s), kPage) == nullptr) {
        slot.lost.store(true);  // another mapping took the hole: never touch it again
        continue;
      }
      const uint64_t generation = ++next_generation;
      word_at(s).store(generation);
      slot.generation.store(generation);
      slot.mapped.fetch_add(1);
      ++report.verified;
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kRegistrars; ++t) threads.emplace_back(registrar, t);
  threads.emplace_back(remapper);
  for (std::thread& thread : threads) thread.join();
  for (hmr_ep* ep : initiators) EXPECT_EQ(hmr_ep_close(ep), 0) << hmr_last_error();

  uint64_t stale = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    stale += reports[i].stale;
    EXPECT_EQ(reports[i].stale + reports[i].errors, 0u)
        << (i < kRegistrars ? "registrar " : "remapper ") << i << ": " << reports[i].stale
        << " stale hits, " << reports[i].errors << " errors; first: " << reports[i].first;
  }
  EXPECT_EQ(stale, 0u);
  const hmr_domain_stats stats = domain_.stats();
  EXPECT_GT(stats.cache_hits, 0u) << "no hits at all: the test exercised nothing";
  EXPECT_GT(stats.cache_invalidations, 0u);
  EXPECT_GT(reports[kRegistrars].verified, kRemaps / 2) << "too few remaps happened";
  uint64_t verified = 0;
  for (int t = 0; t < kRegistrars; ++t) verified += reports[static_cast<size_t>(t)].verified;
  EXPECT_GT(verified, 0u) << "no registration was ever checked on a stable slot";
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.cache_in_use, 0u);
  RecordProperty("cache_hits", std::to_string(stats.cache_hits));
  RecordProperty("cache_invalidations", std::to_string(stats.cache_invalidations));
  RecordProperty("cache_uncached", std::to_string(stats.cache_uncached));
  RecordProperty("verified_reads", std::to_string(verified));
  if (std::getenv("HMR_TEST_VERBOSE") != nullptr) {
    std::printf("hits %llu misses %llu invalidations %llu uncached %llu verified %llu remaps %llu\n",
                static_cast<unsigned long long>(stats.cache_hits),
                static_cast<unsigned long long>(stats.cache_misses),
                static_cast<unsigned long long>(stats.cache_invalidations),
                static_cast<unsigned long long>(stats.cache_uncached),
                static_cast<unsigned long long>(verified),
                static_cast<unsigned long long>(reports[kRegistrars].verified));
  }

  for (size_t s = 0; s < kSlots; ++s) {
    if (!slots[s].lost.load()) munmap(slot_address(s), kPage);
  }
}

std::string monitor_test_name(const ::testing::TestParamInfo<const char*>& param) {
  return param.param;
}
INSTANTIATE_TEST_SUITE_P(Monitors, CacheCoherence, ::testing::Values("userfaultfd", "memhooks"),
                         monitor_test_name);

// ====================================================================== limits and switches

hmr_mr* reg_close_keep(CachedDomain& domain, const void* buf, size_t len) {
  hmr_mr* mr = domain.reg(buf, len);
  if (mr != nullptr) {
    EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  }
  return mr;
}

TEST(CacheLimits, CountLimitEvictsUnusedEntries) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 4);
  EXPECT_EQ(domain.negotiated().cache_max_count, 4u);
  Pages pages(12 * kPage);
  for (size_t i = 0; i < 6; ++i) reg_close_keep(domain, pages.data() + 2 * i * kPage, kPage);
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_misses, 6u);
  EXPECT_EQ(stats.cache_evictions, 2u);
  EXPECT_LE(stats.cache_regions, 4u);
  EXPECT_EQ(stats.cache_regions, 4u);
  EXPECT_EQ(stats.cache_bytes, 4 * kPage);
  EXPECT_EQ(stats.nic_deregistrations, 2u);
  EXPECT_EQ(stats.cache_uncached, 0u);
}

TEST(CacheLimits, AllInUseHandsOutWorkingUncachedRegistrations) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 4);
  Pages pages(12 * kPage);
  std::vector<hmr_mr*> held;
  for (size_t i = 0; i < 6; ++i) {
    held.push_back(domain.reg(pages.data() + 2 * i * kPage, kPage));
    ASSERT_NE(held.back(), nullptr);
  }
  hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_regions, 4u);
  EXPECT_EQ(stats.cache_in_use, 4u);
  EXPECT_EQ(stats.cache_uncached, 2u);
  EXPECT_EQ(stats.cache_evictions, 0u);
  EXPECT_EQ(stats.mr_open, 6u);
  // Every one of them moves bytes to its own pages.
  for (size_t i = 0; i < held.size(); ++i) {
    uint8_t* at = pages.data() + 2 * i * kPage + 16;
    const uint64_t value = 0x1000 + i;
    EXPECT_EQ(domain.write(hmr_mr_key(held[i]), at, &value, sizeof value), 0) << hmr_last_error();
    uint64_t landed = 0;
    std::memcpy(&landed, at, sizeof landed);
    EXPECT_EQ(landed, value);
  }
  std::vector<uint64_t> keys;
  for (hmr_mr* mr : held) keys.push_back(hmr_mr_key(mr));
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end()) << "distinct regions share a key";
  for (hmr_mr* mr : held) EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  stats = domain.stats();
  EXPECT_EQ(stats.nic_deregistrations, 2u) << "the uncached ones go with their MRs";
  EXPECT_EQ(stats.cache_regions, 4u);
  EXPECT_EQ(stats.cache_in_use, 0u);
}

TEST(CacheLimits, SizeLimitKeepsCachedBytesWithinIt) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 3 * kPage);
  EXPECT_EQ(domain.negotiated().cache_max_size, 3 * kPage);
  Pages pages(16 * kPage);
  for (size_t i = 0; i < 5; ++i) {
    reg_close_keep(domain, pages.data() + 3 * i * kPage, kPage + (i % 2) * kPage);
    EXPECT_LE(domain.stats().cache_bytes, 3 * kPage);
  }
  EXPECT_GT(domain.stats().cache_evictions, 0u);
}

void expect_no_caching(CachedDomain& domain) {
  EXPECT_EQ(domain.negotiated().cache_max_count, 0u);
  EXPECT_STREQ(domain.negotiated().cache_monitor, "disabled");
  Pages pages(2 * kPage);
  hmr_mr* a = domain.reg(pages.data(), 2 * kPage);
  hmr_mr* b = domain.reg(pages.data(), 2 * kPage);
  ASSERT_TRUE(a && b);
  EXPECT_NE(hmr_mr_key(a), hmr_mr_key(b));
  EXPECT_EQ(hmr_mr_close(a), 0);
  EXPECT_EQ(hmr_mr_close(b), 0);
  reg_close_keep(domain, pages.data(), kPage);
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.nic_registrations, 3u);
  EXPECT_EQ(stats.nic_deregistrations, 3u) << "without a cache, close deregisters";
  EXPECT_GT(stats.registration_ns, 0u);
  EXPECT_GT(stats.deregistration_ns, 0u) << "the NIC's deregistrations were not timed";
}

TEST(CacheSwitches, ZeroMaxCountFromTheEnvironmentDisablesCaching) {
  ScopedEnv env("FI_MR_CACHE_MAX_COUNT", "0");
  CachedDomain domain;
  OPEN_OR_SKIP(domain, nullptr);
  expect_no_caching(domain);
}

TEST(CacheSwitches, DisabledMonitorDisablesCaching) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "disabled");
  expect_no_caching(domain);
}

TEST(CacheSwitches, DisabledMonitorFromTheEnvironmentDisablesCaching) {
  ScopedEnv env("FI_MR_CACHE_MONITOR", "disabled");
  CachedDomain domain;
  OPEN_OR_SKIP(domain, nullptr);
  expect_no_caching(domain);
}

// What a domain gets when nothing names a monitor: memhooks where it installs (it costs the
// unmapping thread least), else userfaultfd.
std::string expected_default_monitor() {
  CachedDomain memhooks;
  if (memhooks.open("memhooks")) return "memhooks";
  return "userfaultfd";
}

TEST(CacheSwitches, DefaultCachesWithMemhooksElseUserfaultfd) {
  {
    CachedDomain explicit_uffd;
    OPEN_OR_SKIP(explicit_uffd, "userfaultfd");
  }
  if (std::getenv("FI_MR_CACHE_MONITOR") != nullptr ||
      std::getenv("FI_MR_CACHE_MAX_COUNT") != nullptr) {
    GTEST_SKIP() << "the environment chooses the cache settings";
  }
  const std::string expected = expected_default_monitor();
  for (const char* spelled : {static_cast<const char*>(nullptr), "default"}) {
    CachedDomain domain;
    OPEN_OR_SKIP(domain, spelled);
    EXPECT_EQ(domain.monitor_name(), expected) << (spelled != nullptr ? spelled : "NULL");
    EXPECT_EQ(domain.negotiated().cache_max_count, 1024u);
    EXPECT_GT(domain.negotiated().cache_max_size, 0u);
    Pages pages(kPage);
    reg_close_keep(domain, pages.data(), kPage);
    reg_close_keep(domain, pages.data(), kPage);
    EXPECT_EQ(domain.stats().cache_hits, 1u);
  }
}

// UCX's UCM patches libc's munmap when a handler for unmap events is set, so memhooks cannot
// install in a process that loaded UCX's hooks first; the default must then fall back to
// userfaultfd and stay coherent.  Run in a fresh process (this binary, re-executed with only
// this test) so the patch does not outlive the test.
constexpr const char* kUcmChild = "HMR_TEST_UCM_CHILD";

void on_ucm_event(int, void*, void*) {}

TEST(CacheSwitches, DefaultFallsBackToUserfaultfdWhereUcxPatchedMunmap) {
  if (std::getenv("FI_MR_CACHE_MONITOR") != nullptr) {
    GTEST_SKIP() << "the environment chooses the monitor";
  }
  if (std::getenv(kUcmChild) == nullptr) {
    const std::string filter =
        "--gtest_filter=CacheSwitches.DefaultFallsBackToUserfaultfdWhereUcxPatchedMunmap";
    const int status = hmr_test::run_self({filter}, {std::string(kUcmChild) + "=1"});
    EXPECT_EQ(status, 0) << "the child process failed (its output is above)";
    return;
  }
  // libc's own entries, not a sanitizer's interceptors of the same names.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr) << dlerror();
  constexpr const char* kHooked[] = {"munmap", "mmap", "mremap", "madvise", "brk", "shmdt", "shmat"};
  std::vector<std::vector<uint8_t>> before;
  for (const char* name : kHooked) {
    const auto* entry = static_cast<const uint8_t*>(dlsym(libc, name));
    ASSERT_NE(entry, nullptr) << name;
    before.emplace_back(entry, entry + 16);
  }
  // libucm is under-linked: it needs libucs's symbols loaded globally first.
  void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
  if (ucs == nullptr) GTEST_SKIP() << "UCX's libucs is not installed: " << dlerror();
  void* ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL);
  if (ucm == nullptr) GTEST_SKIP() << "UCX's libucm is not installed: " << dlerror();
  using SetHandler = int (*)(int, int, void (*)(int, void*, void*), void*);
  auto set_handler = reinterpret_cast<SetHandler>(dlsym(ucm, "ucm_set_event_handler"));
  ASSERT_NE(set_handler, nullptr) << dlerror();
  constexpr int kUcmVmUnmapped = 1 << 17;  // UCM_EVENT_VM_UNMAPPED
  ASSERT_EQ(set_handler(kUcmVmUnmapped, 0, on_ucm_event, nullptr), 0);
  std::string patched_by_ucm;
  for (size_t i = 0; i < std::size(kHooked); ++i) {
    const auto* entry = static_cast<const uint8_t*>(dlsym(libc, kHooked[i]));
    if (std::memcmp(before[i].data(), entry, 16) != 0) patched_by_ucm += std::string(" ") + kHooked[i];
  }
  const std::string expected = expected_default_monitor();
  // UCX 1.13 patches when libucm loads; a UCX that stops doing so makes this test moot.
  ASSERT_FALSE(patched_by_ucm.empty()) << "UCM patched nothing in libc: the scenario did not happen";
  EXPECT_EQ(expected, "userfaultfd") << "memhooks installed over UCM's patches of" << patched_by_ucm;

  CachedDomain domain;
  OPEN_OR_SKIP(domain, nullptr);
  EXPECT_EQ(domain.monitor_name(), expected)
      << "UCM patched libc's" << (patched_by_ucm.empty() ? " nothing" : patched_by_ucm);
  // Coherent under whichever it got: an unmapped, remapped range is a miss with a new key.
  void* first = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(first, MAP_FAILED);
  hmr_mr* old_mr = domain.reg(first, kPage);
  ASSERT_NE(old_mr, nullptr);
  const uint64_t old_key = hmr_mr_key(old_mr);
  ASSERT_EQ(hmr_mr_close(old_mr), 0);
  ASSERT_EQ(munmap(first, kPage), 0);
  void* again = mmap(first, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(again, MAP_FAILED);
  const uint64_t hits = domain.stats().cache_hits;
  hmr_mr* new_mr = domain.reg(again, kPage);
  ASSERT_NE(new_mr, nullptr);
  EXPECT_EQ(domain.stats().cache_hits, hits) << "a stale hit after munmap under UCX's hooks";
  if (again == first) {
    EXPECT_NE(hmr_mr_key(new_mr), old_key);
  }
  EXPECT_EQ(hmr_mr_close(new_mr), 0);
  munmap(again, kPage);
}

TEST(CacheFlush, ReleasesUnusedEntriesOnly) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd");
  Pages pages(8 * kPage);
  for (size_t i = 0; i < 3; ++i) reg_close_keep(domain, pages.data() + 2 * i * kPage, kPage);
  hmr_mr* held = domain.reg(pages.data() + 6 * kPage, 2 * kPage);
  ASSERT_NE(held, nullptr);
  hmr_domain_stats stats = domain.stats();
  ASSERT_EQ(stats.cache_regions, 4u);
  ASSERT_EQ(stats.nic_deregistrations, 0u);

  ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
  stats = domain.stats();
  EXPECT_EQ(stats.cache_regions, 1u);
  EXPECT_EQ(stats.cache_bytes, 2 * kPage);
  EXPECT_EQ(stats.cache_in_use, 1u);
  EXPECT_EQ(stats.nic_deregistrations, 3u);
  // The held entry still serves hits.
  hmr_mr* again = domain.reg(pages.data() + 7 * kPage, kPage);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(hmr_mr_key(again), hmr_mr_key(held));
  EXPECT_EQ(hmr_mr_close(again), 0);
  EXPECT_EQ(hmr_mr_close(held), 0);

  ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
  stats = domain.stats();
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.cache_bytes, 0u);
  EXPECT_EQ(stats.nic_deregistrations, 4u);
  EXPECT_EQ(stats.nic_registrations, 4u);
  EXPECT_HMR_ERROR(hmr_domain_cache_flush(nullptr), HMR_EINVAL);
}

TEST(CacheFlush, OnADomainWithoutCacheIsHarmless) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "disabled");
  EXPECT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error();
}

// ====================================================================== sharing rules

TEST(CacheSharing, SubRangeIsAHitWithTheSameKey) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd");
  Pages pages(4 * kPage);
  hmr_mr* whole = domain.reg(pages.data(), 4 * kPage);
  ASSERT_NE(whole, nullptr);
  hmr_mr* part = domain.reg(pages.data() + kPage + 100, 1000);
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(hmr_mr_key(part), hmr_mr_key(whole));
  hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.nic_registrations, 1u);
  EXPECT_EQ(stats.mr_open, 2u);
  // VA addressing: the shared key reaches the sub-range at its own address.
  const uint64_t value = 77;
  EXPECT_EQ(domain.write(hmr_mr_key(part), pages.data() + kPage + 100, &value, sizeof value), 0)
      << hmr_last_error();
  uint64_t landed = 0;
  std::memcpy(&landed, pages.data() + kPage + 100, sizeof landed);
  EXPECT_EQ(landed, value);
  // Closing one sharer leaves the other working.
  EXPECT_EQ(hmr_mr_close(whole), 0);
  EXPECT_EQ(domain.write(hmr_mr_key(part), pages.data() + kPage + 100, &value, sizeof value), 0)
      << hmr_last_error();
  EXPECT_EQ(hmr_mr_close(part), 0);
  EXPECT_EQ(domain.stats().nic_deregistrations, 0u) << "an unused cached entry stays registered";

  // Larger than the cached range: a miss.
  hmr_mr* larger = domain.reg(pages.data(), 4 * kPage);  // hit again (same range)
  ASSERT_NE(larger, nullptr);
  EXPECT_EQ(hmr_mr_close(larger), 0);
  Pages bigger(8 * kPage);
  stats = domain.stats();
  hmr_mr* other = domain.reg(bigger.data(), 8 * kPage);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(domain.stats().cache_misses, stats.cache_misses + 1);
  EXPECT_EQ(hmr_mr_close(other), 0);
}

TEST(CacheSharing, RangeOverlappingButNotContainedMisses) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd");
  Pages pages(4 * kPage);
  reg_close_keep(domain, pages.data(), 2 * kPage);
  hmr_mr* wider = domain.reg(pages.data() + kPage, 2 * kPage);
  ASSERT_NE(wider, nullptr);
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.cache_misses, 2u);
  EXPECT_EQ(hmr_mr_close(wider), 0);
}

TEST(CacheSharing, DifferentAccessIsAMiss) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd");
  Pages pages(2 * kPage);
  hmr_mr* rw = domain.reg(pages.data(), 2 * kPage, kRemote);
  hmr_mr* ro = domain.reg(pages.data(), 2 * kPage, HMR_REMOTE_READ);
  hmr_mr* ro_part = domain.reg(pages.data(), kPage, HMR_REMOTE_READ);
  ASSERT_TRUE(rw && ro && ro_part);
  EXPECT_NE(hmr_mr_key(rw), hmr_mr_key(ro));
  EXPECT_EQ(hmr_mr_key(ro), hmr_mr_key(ro_part));
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_misses, 2u);
  EXPECT_EQ(stats.cache_hits, 1u);
  // What a peer sees did not change by sharing: the read-only key refuses writes.
  const uint64_t value = 5;
  EXPECT_HMR_ERROR(domain.write(hmr_mr_key(ro), pages.data(), &value, sizeof value), HMR_EACCES);
  EXPECT_EQ(domain.write(hmr_mr_key(rw), pages.data(), &value, sizeof value), 0);
  for (hmr_mr* mr : {rw, ro, ro_part}) EXPECT_EQ(hmr_mr_close(mr), 0);
}

TEST(CacheSharing, RequestedKeyDomainsNeverShare) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 0, /*mode=*/0);
  Pages pages(2 * kPage);
  hmr_mr* a = reg_in(domain.get(), pages.data(), 2 * kPage, kRemote, 101);
  hmr_mr* b = reg_in(domain.get(), pages.data(), 2 * kPage, kRemote, 102);
  hmr_mr* c = reg_in(domain.get(), pages.data(), kPage, kRemote, 103);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(hmr_mr_key(a), 101u);
  EXPECT_EQ(hmr_mr_key(b), 102u);
  EXPECT_EQ(hmr_mr_key(c), 103u);
  hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.nic_registrations, 3u);
  for (hmr_mr* mr : {a, b, c}) EXPECT_EQ(hmr_mr_close(mr), 0);
  stats = domain.stats();
  EXPECT_EQ(stats.nic_deregistrations, 3u);
}

TEST(CacheSharing, WithoutVirtAddrOnlyTheSameStartShares) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 0, HMR_MR_PROV_KEY);
  Pages pages(4 * kPage);
  hmr_mr* whole = domain.reg(pages.data(), 4 * kPage);
  hmr_mr* head = domain.reg(pages.data(), kPage);
  hmr_mr* inner = domain.reg(pages.data() + kPage, kPage);
  ASSERT_TRUE(whole && head && inner);
  EXPECT_EQ(hmr_mr_key(head), hmr_mr_key(whole));
  EXPECT_NE(hmr_mr_key(inner), hmr_mr_key(whole))
      << "0-based addressing: offset 0 of the shared key is not the inner range's start";
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.cache_misses, 2u);
  for (hmr_mr* mr : {whole, head, inner}) EXPECT_EQ(hmr_mr_close(mr), 0);
}

// HMR_MR_REPORTED_BASE: the caller addresses its MRs from the base hmr_mr_raw_attr reports, so
// without VIRT_ADDR a sub-range shares the registration that contains it (the NCCL plugin's
// user buffers on tcp), and a peer's write at that base lands on the sub-range's first byte.
TEST(CacheSharing, WithoutVirtAddrAReportedBaseSharesSubRanges) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 0, HMR_MR_PROV_KEY);
  Pages pages(4 * kPage);
  std::memset(pages.data(), 0, 4 * kPage);
  hmr_mr* whole = reg_in(domain.get(), pages.data(), 4 * kPage, kRemote, 0, HMR_MR_REPORTED_BASE);
  hmr_mr* inner =
      reg_in(domain.get(), pages.data() + kPage + 8, kPage, kRemote, 0, HMR_MR_REPORTED_BASE);
  hmr_mr* plain = domain.reg(pages.data() + kPage + 8, kPage);  // addressed from 0: its own
  ASSERT_TRUE(whole && inner && plain);
  EXPECT_EQ(hmr_mr_key(inner), hmr_mr_key(whole));
  EXPECT_NE(hmr_mr_key(plain), hmr_mr_key(whole));
  uint64_t base = 1;
  uint8_t key[16];
  size_t key_size = sizeof key;
  ASSERT_EQ(hmr_mr_raw_attr(whole, &base, key, &key_size, 0), 0) << hmr_last_error();
  EXPECT_EQ(base, 0u);
  key_size = sizeof key;
  ASSERT_EQ(hmr_mr_raw_attr(inner, &base, key, &key_size, 0), 0) << hmr_last_error();
  EXPECT_EQ(base, kPage + 8) << "the inner MR's first byte, in the shared 0-based registration";
  const uint64_t value = 0x5ca1ab1e;
  ASSERT_EQ(hmr_ep_write(domain.initiator(), &value, sizeof value, nullptr, base,
                         hmr_mr_key(inner)),
            0)
      << hmr_last_error();
  uint64_t landed = 0;
  std::memcpy(&landed, pages.data() + kPage + 8, sizeof landed);
  EXPECT_EQ(landed, value);
  const hmr_domain_stats stats = domain.stats();
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.nic_registrations, 2u);
  for (hmr_mr* mr : {whole, inner, plain}) EXPECT_EQ(hmr_mr_close(mr), 0);
}

TEST(CacheSharing, RmaEventRegistrationsDoNotShare) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 0, kCachedMode | HMR_MR_RMA_EVENT,
               "require=RMA_EVENT");
  Pages pages(kPage);
  hmr_mr* a = reg_in(domain.get(), pages.data(), kPage, kRemote, 0, HMR_RMA_EVENT);
  hmr_mr* b = reg_in(domain.get(), pages.data(), kPage, kRemote, 0, HMR_RMA_EVENT);
  ASSERT_TRUE(a && b);
  EXPECT_NE(hmr_mr_key(a), hmr_mr_key(b));
  EXPECT_EQ(domain.stats().cache_hits, 0u);
  EXPECT_EQ(hmr_mr_close(a), 0);
  EXPECT_EQ(hmr_mr_close(b), 0);
}

TEST(CacheSharing, EndpointDomainsDoNotShare) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd", 0, 0, kCachedMode | HMR_MR_ENDPOINT,
               "require=ENDPOINT");
  Pages pages(kPage);
  hmr_mr* a = domain.reg(pages.data(), kPage);
  hmr_mr* b = domain.reg(pages.data(), kPage);
  ASSERT_TRUE(a && b);
  EXPECT_NE(hmr_mr_key(a), hmr_mr_key(b));
  EXPECT_EQ(domain.stats().cache_hits, 0u);
  EXPECT_EQ(hmr_mr_close(a), 0);
  EXPECT_EQ(hmr_mr_close(b), 0);
}

TEST(CacheSharing, DomainCloseReleasesCachedRegistrations) {
  CachedDomain domain;
  OPEN_OR_SKIP(domain, "userfaultfd");
  Pages pages(4 * kPage);
  hmr_mr* mr = domain.reg(pages.data(), 4 * kPage);
  ASSERT_NE(mr, nullptr);
  EXPECT_HMR_ERROR(hmr_domain_close(domain.get()), HMR_EBUSY);
  EXPECT_EQ(hmr_mr_close(mr), 0);
  EXPECT_EQ(domain.stats().cache_regions, 1u);
  domain.close();  // with one cached, unused entry: must not leak it (LSan) or fail
}

}  // namespace
