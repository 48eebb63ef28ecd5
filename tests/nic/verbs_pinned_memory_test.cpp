// Under pressure, in bytes (docs/semantics.md): a verbs NIC pins every page it registers and the
// kernel refuses past RLIMIT_MEMLOCK (ib_umem_get, -ENOMEM), unless the process has
// CAP_IPC_LOCK — which containers give few processes and which root here has.  So the test runs
// in a child of its own that drops CAP_IPC_LOCK and sets RLIMIT_MEMLOCK to 256 KiB, under each
// host monitor.  The fake libibverbs charges pages and refuses as the kernel does; hmr must
// count what it holds pinned (idle cached registrations included), give back idle ones
// before passing the limit, retry after a refusal it did not foresee, refuse with a reason when
// everything is in use, and never fail threads that stay below the limit.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/nic/verbs_test_fixture.h"
#include "util/memlock_limit.h"

namespace hmr::testing {
namespace {

constexpr const char* kChild = "HMR_TEST_MEMLOCK_CHILD";
constexpr const char* kChildMonitor = "HMR_TEST_MEMLOCK_MONITOR";
constexpr uint64_t kLimit = 256 * 1024;
constexpr size_t kBuffer = 16 * 1024;  // 4 pages: 16 fit under the limit
constexpr size_t kBuffers = 64;

class VerbsPinnedMemory : public VerbsDomainTest {
 protected:
  hmr_domain_stats stats() {
    hmr_domain_stats s{};
    s.size = sizeof s;
    EXPECT_EQ(hmr_domain_query_stats(domain_, &s), 0) << hmr_last_error();
    return s;
  }
  uint64_t fake_pinned_bytes() const {
    return static_cast<uint64_t>(fake().live("pinned_pages")) * 4096;
  }
};

TEST_F(VerbsPinnedMemory, RlimitMemlockBoundsWhatHmrHoldsPinned) {
  if (std::getenv(kChild) == nullptr) {
    for (const char* monitor : {"memhooks", "userfaultfd"}) {
      const int status = hmr_test::run_self(
          {"--gtest_filter=VerbsPinnedMemory.RlimitMemlockBoundsWhatHmrHoldsPinned"},
          {std::string(kChild) + "=1", std::string(kChildMonitor) + "=" + monitor});
      EXPECT_EQ(status, 0) << "the child under " << monitor << " failed (its output is above)";
    }
    return;
  }
  const char* monitor = std::getenv(kChildMonitor);
  ASSERT_TRUE(hmr_test::drop_cap_ipc_lock()) << std::strerror(errno);
  ASSERT_FALSE(has_cap_ipc_lock());
  ASSERT_TRUE(hmr_test::set_memlock(kLimit)) << std::strerror(errno);

  attr_ = hmr_domain_attr{};
  attr_.size = sizeof attr_;
  attr_.nic = "verbs";
  attr_.nic_options = kFakeConnectX;
  attr_.mr_mode = kVerbsBasicMode;
  attr_.cache_monitor = monitor;
  attr_.cache_max_count = 100000;  // the pinning limit, not the cache's count, is the bound
  int opened = hmr_domain_open(&attr_, &domain_);
  if (opened == -HMR_EOPNOTSUPP || opened == -HMR_ENOSYS) {  // (memhooks under TSan, say)
    fds_before_ = open_fd_count();  // what the attempt started lives as long as the process
    GTEST_SKIP() << monitor << " cannot start here: " << hmr_last_error();
  }
  ASSERT_EQ(opened, 0) << hmr_last_error();
  // The monitor and the deferred-deregistration thread keep their fds for the life of the
  // process once started: the fd count that must come back is the one after a first domain.
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
  fds_before_ = open_fd_count();
  attr_.nic_handle = nullptr;
  attr_.cache_monitor = monitor;
  ASSERT_EQ(hmr_domain_open(&attr_, &domain_), 0) << hmr_last_error();

  hmr_md_attr md{};
  md.size = sizeof md;
  ASSERT_EQ(hmr_md_query(domain_, &md), 0) << hmr_last_error();
  EXPECT_EQ(md.max_pinned_bytes, kLimit);
  ASSERT_NE(md.max_pinned_bytes_source, nullptr);
  EXPECT_STREQ(md.max_pinned_bytes_source, "rlimit_memlock");

  auto* mapping = static_cast<uint8_t*>(mmap(nullptr, 2 * kBuffers * kBuffer,
                                             PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mapping, MAP_FAILED);
  std::memset(mapping, 1, 2 * kBuffers * kBuffer);
  auto buffer = [&](size_t i) { return mapping + 2 * i * kBuffer; };  // a gap between buffers

  // 1. Distinct buffers registered and closed stay cached, idle and pinned: four times more
  //    than the limit holds, every registration succeeds, and neither hmr's account nor the
  //    kernel's (the fake's pinned_vm) ever passes the limit.
  for (size_t i = 0; i < kBuffers; ++i) {
    hmr_test::MrPtr mr = reg(buffer(i), kBuffer, kRemoteAccess);
    ASSERT_TRUE(mr) << "buffer " << i;
    EXPECT_LE(fake_pinned_bytes(), kLimit);
    EXPECT_LE(stats().nic_pinned_bytes, kLimit);
  }
  hmr_domain_stats after_fill = stats();
  EXPECT_GE(after_fill.cache_pressure_evictions, kBuffers - kLimit / kBuffer);
  EXPECT_EQ(after_fill.nic_refusals, 0u);
  EXPECT_EQ(after_fill.nic_pinned_bytes, fake_pinned_bytes()) << "hmr counts as the kernel does";
  EXPECT_EQ(after_fill.nic_registrations_held, static_cast<uint64_t>(fake().live("mrs")));

  // 2. Everything in use: 16 buffers open fill the limit, and the 17th is refused with the
  //    kernel's ENOMEM and a reason that names the limit and what hmr holds.
  {
    std::vector<hmr_test::MrPtr> open;
    for (size_t i = 0; i < kLimit / kBuffer; ++i) {
      open.push_back(reg(buffer(i), kBuffer, kRemoteAccess));
      ASSERT_TRUE(open.back()) << "buffer " << i;
    }
    hmr_mr* refused = nullptr;
    EXPECT_EQ(hmr_mr_reg(domain_, buffer(kBuffers - 1), kBuffer, kRemoteAccess, 0, 0, 0, &refused,
                         nullptr),
              -HMR_ENOMEM);
    const std::string reason = hmr_last_error();
    EXPECT_TRUE(contains(reason, "RLIMIT_MEMLOCK")) << reason;
    EXPECT_TRUE(contains(reason, "262144 bytes")) << reason;
    EXPECT_EQ(stats().nic_refusals, 1u);
  }

  // 3. One registration larger than the limit: no eviction can make room, so it is refused at
  //    once, and the idle cache is left alone.
  {
    const uint64_t evictions_before = stats().cache_pressure_evictions;
    hmr_mr* refused = nullptr;
    EXPECT_EQ(hmr_mr_reg(domain_, mapping, 2 * kLimit, kRemoteAccess, 0, 0, 0, &refused, nullptr),
              -HMR_ENOMEM);
    EXPECT_TRUE(contains(hmr_last_error(), "more than")) << hmr_last_error();
    EXPECT_EQ(stats().cache_pressure_evictions, evictions_before);
  }

  // 4. A refusal hmr did not foresee: the limit is lowered after the domain read it, so the
  //    kernel refuses first; hmr gives back idle registrations and tries again.
  ASSERT_TRUE(hmr_test::set_memlock(kLimit / 2));
  {
    const uint64_t retries_before = stats().nic_refusal_retries;
    for (size_t i = kBuffers - 4; i < kBuffers; ++i) {
      hmr_test::MrPtr mr = reg(buffer(i), kBuffer, kRemoteAccess);
      ASSERT_TRUE(mr) << "buffer " << i;
      EXPECT_LE(fake_pinned_bytes(), kLimit / 2);
    }
    EXPECT_GT(stats().nic_refusal_retries, retries_before);
  }
  ASSERT_TRUE(hmr_test::set_memlock(kLimit));

  // 5. Four threads, each holding at most three buffers open (192 KiB together, under the
  //    limit), over all 64 buffers: no registration fails, whatever is idle.
  std::atomic<int> failures{0};
  std::atomic<uint64_t> most_pinned{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(t + 1);
      std::vector<hmr_mr*> held;
      for (int step = 0; step < 1500; ++step) {
        if (held.size() == 3 || (!held.empty() && random() % 2 == 0)) {
          const size_t victim = random() % held.size();
          hmr_mr_close(held[victim]);
          held.erase(held.begin() + static_cast<long>(victim));
          continue;
        }
        hmr_mr* mr = nullptr;
        if (hmr_mr_reg(domain_, buffer(random() % kBuffers), kBuffer, kRemoteAccess, 0, 0, 0, &mr,
                       nullptr) != 0) {
          failures.fetch_add(1);
          continue;
        }
        held.push_back(mr);
        const uint64_t pinned = fake_pinned_bytes();
        uint64_t most = most_pinned.load();
        while (pinned > most && !most_pinned.compare_exchange_weak(most, pinned)) {
        }
      }
      for (hmr_mr* mr : held) hmr_mr_close(mr);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << "threads below the limit were refused: " << hmr_last_error();
  EXPECT_LE(most_pinned.load(), kLimit);

  // Nothing open: flushing the cache gives back every pinned page.
  ASSERT_EQ(hmr_domain_cache_flush(domain_), 0) << hmr_last_error();
  EXPECT_EQ(stats().nic_pinned_bytes, 0u);
  EXPECT_EQ(fake_pinned_bytes(), 0u);
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
  munmap(mapping, 2 * kBuffers * kBuffer);
}

// Where the bound comes from when nothing limits pinning: root here has CAP_IPC_LOCK, an ODP
// domain pins nothing.
TEST_F(VerbsPinnedMemory, SaysWhereThePinningBoundComesFrom) {
  ASSERT_EQ(open_domain(kFakeConnectX, nullptr, kVerbsBasicMode), 0) << hmr_last_error();
  hmr_md_attr md{};
  md.size = sizeof md;
  ASSERT_EQ(hmr_md_query(domain_, &md), 0) << hmr_last_error();
  const MemlockLimit memlock = memlock_limit_in_force();
  if (memlock.cap_ipc_lock) {
    EXPECT_STREQ(md.max_pinned_bytes_source, "cap_ipc_lock");
    EXPECT_EQ(md.max_pinned_bytes, 0u);
  } else if (!memlock.bounded) {
    EXPECT_STREQ(md.max_pinned_bytes_source, "unlimited");
  } else {
    EXPECT_STREQ(md.max_pinned_bytes_source, "rlimit_memlock");
    EXPECT_EQ(md.max_pinned_bytes, memlock.bytes);
  }
  std::vector<uint8_t> buffer(3 * 4096 + 100);
  hmr_test::MrPtr mr = reg(buffer.data() + 100, 2 * 4096, kRemoteAccess);
  ASSERT_TRUE(mr);
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  ASSERT_EQ(hmr_domain_query_stats(domain_, &stats), 0);
  EXPECT_EQ(stats.nic_pinned_bytes, 3u * 4096) << "every page the range touches";
  EXPECT_EQ(stats.nic_pinned_bytes, fake_pinned_bytes());
  EXPECT_EQ(stats.nic_registrations_held, 1u);
  // Re-registered in place (this domain caches nothing) onto one aligned page: the account
  // follows the device's pages (ibv_rereg_mr with IBV_REREG_MR_CHANGE_TRANSLATION).
  iovec moved{buffer.data() + (4096 - reinterpret_cast<uintptr_t>(buffer.data()) % 4096), 4096};
  hmr_mr_rereg_attr rereg{};
  rereg.size = sizeof rereg;
  rereg.mr_iov = &moved;
  rereg.iov_count = 1;
  ASSERT_EQ(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION, &rereg), 0) << hmr_last_error();
  ASSERT_EQ(hmr_domain_query_stats(domain_, &stats), 0);
  EXPECT_EQ(stats.nic_pinned_bytes, 4096u);
  EXPECT_EQ(stats.nic_pinned_bytes, fake_pinned_bytes());
  mr.reset();
  EXPECT_EQ(fake_pinned_bytes(), 0u);
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;

  ASSERT_EQ(open_domain("device=fake_mlx5_0;relaxed_ordering=off;odp=on", nullptr,
                        kVerbsBasicMode & ~HMR_MR_ALLOCATED),
            0)
      << hmr_last_error();
  md = hmr_md_attr{};
  md.size = sizeof md;
  ASSERT_EQ(hmr_md_query(domain_, &md), 0) << hmr_last_error();
  EXPECT_STREQ(md.max_pinned_bytes_source, "not_pinned");
}

}  // namespace
}  // namespace hmr::testing
