// A registration made while another thread unmaps or drops the same pages is never filed
// for later registrations of the new memory at that address.
//
// The software NIC pins nothing (it moves bytes by virtual address), so a registration of
// old pages cannot be told from one of new pages through it.  Here a callback NIC pins as a
// kernel driver does, in miniature: its reg_va reads the page's first word, a stamp that
// each generation of the memory carries, through /proc/self/mem (which fails on an unmapped
// address, as pinning would), and hands it back as the key.  A registration whose key is an
// older stamp than the memory's is a registration of pages that are gone.
//
// Thread A, in rounds: changes the page (munmap and a fresh mmap at the same address, an
// mmap MAP_FIXED over it, or madvise(MADV_DONTNEED)), stamps the new page, registers it and
// checks the key.  Thread B registers and closes the same address all the while, so some of
// its registrations run while A's call is under way.  Before the fix, memhooks told the
// caches only before the syscall, and about a third of A's rounds got B's filed
// registration of the old page (two thirds with madvise).
//
// Not covered, documented in docs/semantics.md: userfaultfd's REMOVE event (madvise) comes
// before the kernel drops the pages and nothing comes after, so under the userfaultfd monitor
// a registration racing the application's own madvise of the same range may be filed.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>

#include "test_support.h"

namespace {

constexpr size_t kPage = 4096;
constexpr int kRounds = 3000;

enum class Change { unmap_and_map, map_fixed_over, madvise_dontneed };

struct Case {
  const char* monitor;
  Change change;
  const char* name;
};

void PrintTo(const Case& test, std::ostream* out) { *out << test.name; }

// The stamp at the registration's first page, read as a driver's pinning would find it.
int mem_fd = -1;

int pin_and_stamp(void*, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char* reason,
                  size_t reason_size) {
  uint32_t stamp = 0;
  if (pread(mem_fd, &stamp, sizeof stamp, static_cast<off_t>(reinterpret_cast<uintptr_t>(request->addr))) != sizeof stamp) {
    std::snprintf(reason, reason_size, "nothing mapped at %#llx",
                  static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(request->addr)));
    return -HMR_EFAULT;
  }
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = stamp;
  return 0;
}

int unpin(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

// A callback NIC registering with `reg_va`, and the domains opened on it.
class CallbackNic {
 public:
  using RegVa = decltype(hmr_nic_callbacks::reg_va);
  explicit CallbackNic(RegVa reg_va) {
    callbacks_.size = sizeof callbacks_;
    callbacks_.key_size = 8;
    callbacks_.reg_va = reg_va;
    callbacks_.dereg = unpin;
  }
  // hmr_domain_open's answer for a domain whose cache `monitor` watches.
  int open(const char* monitor, hmr_domain** domain) {
    hmr_domain_attr attr{};
    attr.size = sizeof attr;
    attr.nic = "callback";
    attr.nic_handle = &callbacks_;
    attr.mr_mode = HMR_MR_BASIC;
    attr.cache_monitor = monitor;
    return hmr_domain_open(&attr, domain);
  }

 private:
  hmr_nic_callbacks callbacks_{};
};

uint8_t* map_page() {
  void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return page == MAP_FAILED ? nullptr : static_cast<uint8_t*>(page);
}

class RegistrationDuringChange : public ::testing::TestWithParam<Case> {};

TEST_P(RegistrationDuringChange, IsNeverFiledForTheNewMemory) {
  const Case& test = GetParam();
  if (hmr_test::kUnderThreadSanitizer && std::strcmp(test.monitor, "memhooks") == 0) {
    GTEST_SKIP() << "memhooks is not available under ThreadSanitizer";
  }
  mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(mem_fd, 0) << std::strerror(errno);

  CallbackNic nic(pin_and_stamp);
  hmr_domain* domain = nullptr;
  const int opened = nic.open(test.monitor, &domain);
  if (opened == -HMR_ENOSYS) GTEST_SKIP() << test.monitor << ": " << hmr_last_error();
  ASSERT_EQ(opened, 0) << hmr_last_error();

  uint8_t* page = map_page();
  ASSERT_NE(page, nullptr);
  uint32_t stamp = 1;
  std::memcpy(page, &stamp, sizeof stamp);

  // The page the racing thread registers: another one when the kernel gave the address to
  // someone else between our munmap and mmap (a thread of the sanitizer's runtime, say).
  std::atomic<uint8_t*> current{page};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> racing{0};
  std::thread racer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      hmr_mr* mr = nullptr;
      if (hmr_mr_reg(domain, current.load(), kPage, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr) ==
          0) {
        hmr_mr_close(mr);
        racing.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });

  int stale = 0, moved = 0;
  std::string first_stale, failure;
  for (int round = 0; round < kRounds && failure.empty(); ++round) {
    switch (test.change) {
      case Change::unmap_and_map:
        if (munmap(page, kPage) != 0) {
          failure = std::string("munmap: ") + std::strerror(errno);
        } else if (void* again = mmap(page, kPage, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
                   again != page) {
          if (again != MAP_FAILED) munmap(again, kPage);  // a kernel taking it as a hint
          page = map_page();  // somewhere else: this round tests nothing, the next ones do
          ++moved;
          if (page == nullptr) failure = "no memory for a page";
          current.store(page);
        }
        break;
      case Change::map_fixed_over:
        if (mmap(page, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) != page) {
          failure = std::string("mmap(MAP_FIXED): ") + std::strerror(errno);
        }
        break;
      case Change::madvise_dontneed:
        if (madvise(page, kPage, MADV_DONTNEED) != 0) {
          failure = std::string("madvise: ") + std::strerror(errno);
        }
        break;
    }
    if (!failure.empty()) break;
    ++stamp;
    std::memcpy(page, &stamp, sizeof stamp);
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain, page, kPage, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr) != 0) {
      failure = std::string("hmr_mr_reg: ") + hmr_last_error();
      break;
    }
    const uint64_t key = hmr_mr_key(mr);
    // 0: B registered the new page before it was stamped, which is the new memory.
    if (key != 0 && key != stamp) {
      if (stale++ == 0) {
        first_stale = "round " + std::to_string(round) + ": the memory carries stamp " +
                      std::to_string(stamp) + ", the registration handed out was made of stamp " +
                      std::to_string(key);
      }
    }
    if (hmr_mr_close(mr) != 0) failure = std::string("hmr_mr_close: ") + hmr_last_error();
  }
  stop.store(true);
  racer.join();
  EXPECT_EQ(failure, "");
  EXPECT_LT(moved, kRounds / 10) << "the kernel gave the address to someone else in " << moved
                                 << " of " << kRounds << " rounds: too few rounds tested";
  EXPECT_EQ(stale, 0) << stale << " of " << kRounds << " registrations were of pages gone; "
                      << first_stale;
  EXPECT_GT(racing.load(), 0u) << "the racing thread never registered";

  if (page != nullptr) munmap(page, kPage);
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
  close(mem_fd);
}

// A registration counted as a hit in `domain`'s statistics, or not.
uint64_t cache_hits(hmr_domain* domain) {
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats.cache_hits;
}

int stamp_one(void*, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = 1;
  return 0;
}

// A parent thread inside a hook when another forks leaves its mark in the child, where that
// thread does not exist to end it: the child must not inherit the mark (before, in 12 of 50
// forks the child never cached the page the parent's thread was dropping).
TEST(RegistrationDuringChange, AForkedChildInheritsNoMarkOfItsParentsThreads) {
  if (hmr_test::kUnderThreadSanitizer) GTEST_SKIP() << "memhooks is not available under TSan";
  CallbackNic nic(stamp_one);
  hmr_domain* parent = nullptr;
  ASSERT_EQ(nic.open("memhooks", &parent), 0) << hmr_last_error();
  uint8_t* page = map_page();
  ASSERT_NE(page, nullptr);
  std::atomic<bool> stop{false};
  std::thread dropper([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      page[0] = 1;
      madvise(page, kPage, MADV_DONTNEED);
    }
  });
  constexpr int kForks = 30;
  int not_cached = 0, failed = 0;
  for (int i = 0; i < kForks; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      // The child's own domain: the second registration of the page is a hit.
      hmr_domain* domain = nullptr;
      if (nic.open("memhooks", &domain) != 0) _exit(3);
      for (int round = 0; round < 2; ++round) {
        hmr_mr* mr = nullptr;
        if (hmr_mr_reg(domain, page, kPage, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr) != 0) _exit(4);
        hmr_mr_close(mr);
      }
      _exit(cache_hits(domain) == 1 ? 0 : 10);
    }
    ASSERT_GT(child, 0) << std::strerror(errno);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 10) {
      ++not_cached;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  stop.store(true);
  dropper.join();
  EXPECT_EQ(not_cached, 0) << "children that never cached a page nobody changes in them";
  EXPECT_EQ(failed, 0) << "children that failed to open a domain or register";
  munmap(page, kPage);
  EXPECT_EQ(hmr_domain_close(parent), 0) << hmr_last_error();
}

INSTANTIATE_TEST_SUITE_P(
    Changes, RegistrationDuringChange,
    ::testing::Values(Case{"memhooks", Change::unmap_and_map, "memhooks_munmap"},
                      Case{"memhooks", Change::map_fixed_over, "memhooks_mmap_fixed"},
                      Case{"memhooks", Change::madvise_dontneed, "memhooks_madvise"},
                      Case{"userfaultfd", Change::unmap_and_map, "userfaultfd_munmap"},
                      Case{"userfaultfd", Change::map_fixed_over, "userfaultfd_mmap_fixed"}),
    [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

}  // namespace
