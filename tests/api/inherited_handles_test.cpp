// Handles a forked child inherited from its parent.  The parent's objects keep their locks,
// which the parent's other threads may hold for ever in the child (those threads do not exist
// there), and their NIC resources, which are the parent's.  A child that registered through
// its parent's domain while the parent's threads registered hung in 15 of 40 forks (a probe of
// the fourteenth-session design, which let an inherited domain serve the child uncached: the
// entry pool's mutex, the sim NIC's lock).  Now every call on an inherited handle answers
// -HMR_EBADF with the reason, every close of one succeeds (touching only the child's copy of
// the handle), and the child opens domains of its own.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "memory_ops_support.h"

// Set by a forked child just before it ends through exit(): LeakSanitizer's check at exit
// cannot scan the parent's threads, which the child does not have ("Running thread N was not
// suspended. False leaks are possible."), so a block only one of them held at the fork (the
// thread-local last error of hmr's reaper after a failed call, an invalidation's list on the
// watcher's stack) was reported as leaked and the child exited 1: the ASan build's
// hmr_api_tests failed so once in CI (a helper reproduced it by making the reaper fail a call
// at the fork).  The parent's own check is unaffected.
namespace {
volatile int leak_check_unsound_in_this_child = 0;
}  // namespace
// LeakSanitizer's documented hook (sanitizer/lsan_interface.h), read by its check at exit;
// an ordinary unused function in the other builds.
extern "C" int __lsan_is_turned_off();
extern "C" int __lsan_is_turned_off() { return leak_check_unsound_in_this_child; }

namespace {

using hmr_test::Pages;

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr uint64_t kMode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_ALLOCATED;

// In the child: counts a call that did not answer `expected`, or whose reason does not say
// why, and names it on stderr (gtest assertions made in a child are lost).
struct ChildChecks {
  int wrong = 0;

  void expect(const char* call, int rc, int expected = -HMR_EBADF) {
    if (rc != expected) {
      std::fprintf(stderr, "in the forked child: %s returned %d, not %d (%s)\n", call, rc,
                   expected, hmr_last_error());
      ++wrong;
    } else if (expected == -HMR_EBADF && std::strstr(hmr_last_error(), "fork()") == nullptr) {
      std::fprintf(stderr, "in the forked child: %s: the reason does not name fork(): %s\n",
                   call, hmr_last_error());
      ++wrong;
    }
  }
};

#define CHILD_EXPECT(checks, call, ...) (checks).expect(#call, (call)__VA_OPT__(, ) __VA_ARGS__)

// A domain for the child, without a cache: a cache's monitor starts a thread, and
// ThreadSanitizer's runtime ends a child of a multi-threaded process that starts one.  (A
// caching domain in a child: CacheCoherence.ForkedChildNeverHitsWhatItsParentCached.)
hmr_domain* open_child_domain() {
  hmr_domain_attr attr = hmr_test::domain_attr(kMode);
  attr.cache_monitor = "disabled";
  hmr_domain* domain = nullptr;
  return hmr_domain_open(&attr, &domain) == 0 ? domain : nullptr;
}

// How a child ended, from waitpid's status.
std::string child_ending(int status) {
  if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
  if (WTERMSIG(status) == SIGALRM) return "hung (its alarm)";
  return "died of signal " + std::to_string(WTERMSIG(status));
}

// Forks `forks` children one after another; each runs `in_child` under a 10 s alarm and exits
// with what it returns.  "" when every child exited 0, else how the first that did not ended.
std::string fork_children(int forks, const std::function<int()>& in_child) {
  for (int f = 0; f < forks; ++f) {
    const pid_t child = fork();
    if (child < 0) return std::string("fork: ") + std::strerror(errno);
    if (child == 0) {
      alarm(10);
      _exit(in_child());
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return "child " + std::to_string(f) + " of " + std::to_string(forks) + " " +
             child_ending(status);
    }
  }
  return "";
}

int no_monitor_start(void*) { return 0; }
void no_monitor_stop(void*) {}
int no_monitor_subscribe(void*, const void*, size_t) { return 0; }
void no_monitor_unsubscribe(void*, const void*, size_t) {}

TEST(InheritedHandles, EveryCallOnAParentsObjectIsRefusedInAForkedChildAndItsCloseSucceeds) {
  hmr_domain* domain = hmr_test::open_sim_domain(kMode);
  ASSERT_NE(domain, nullptr);
  hmr_domain* peer_domain = hmr_test::open_sim_domain(kMode);
  ASSERT_NE(peer_domain, nullptr);
  Pages pages(4 * kPage);
  // A full-path MR (windows may bind it), a cache hit's, and one of each other kind.
  hmr_mr* full = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data(), kPage, kRemote | HMR_MW_BIND, 0, 0, 0, &full,
                           nullptr));
  hmr_mr* first = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data() + kPage, kPage, kRemote, 0, 0, 0, &first,
                           nullptr));
  hmr_mr* hit = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data() + kPage, kPage, kRemote, 0, 0, 0, &hit,
                           nullptr));
  hmr_mw* window = nullptr;
  ASSERT_HMR_OK(hmr_mw_alloc(domain, HMR_MW_TYPE_2, &window));
  uint8_t packed[HMR_RKEY_PACKED_MAX];
  size_t packed_len = sizeof packed;
  ASSERT_HMR_OK(hmr_rkey_pack(full, packed, &packed_len));
  hmr_rkey* rkey = nullptr;
  ASSERT_HMR_OK(hmr_rkey_unpack(domain, packed, packed_len, &rkey));
  hmr_cntr_attr cntr_attr{sizeof cntr_attr, 0};
  hmr_cntr* counter = nullptr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, &cntr_attr, &counter));
  hmr_ep_attr ep_attr{sizeof ep_attr, 0};
  hmr_ep* endpoint = nullptr;
  hmr_ep* peer = nullptr;
  ASSERT_HMR_OK(hmr_ep_open(domain, &ep_attr, &endpoint));
  ASSERT_HMR_OK(hmr_ep_open(peer_domain, &ep_attr, &peer));
  ASSERT_HMR_OK(hmr_ep_connect(endpoint, peer));
  hmr_eq_attr eq_attr;
  std::memset(&eq_attr, 0, sizeof eq_attr);
  eq_attr.size = sizeof eq_attr;
  hmr_eq* queue = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(&eq_attr, &queue));
  hmr_monitor_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.size = sizeof ops;
  ops.name = "inherited-handles-test";
  ops.start = no_monitor_start;
  ops.stop = no_monitor_stop;
  ops.subscribe = no_monitor_subscribe;
  ops.unsubscribe = no_monitor_unsubscribe;
  hmr_monitor* monitor = nullptr;
  ASSERT_HMR_OK(hmr_monitor_import(&ops, &monitor));

  const int wrong = hmr_test::run_forked([&] {
    ChildChecks checks;
    // Every call that takes a domain.
    hmr_mr* mr = nullptr;
    CHILD_EXPECT(checks, hmr_mr_reg(domain, pages.data() + 2 * kPage, kPage, kRemote, 0, 0, 0,
                                    &mr, nullptr));
    CHILD_EXPECT(checks, hmr_mr_reg(domain, pages.data() + kPage, kPage, kRemote, 0, 0, 0, &mr,
                                    nullptr));  // what the parent has cached: no hit either
    const iovec segment = {pages.data(), kPage};
    CHILD_EXPECT(checks, hmr_mr_regv(domain, &segment, 1, kRemote, 0, 0, 0, &mr, nullptr));
    hmr_mr_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.mr_iov = &segment;
    attr.iov_count = 1;
    attr.access = kRemote;
    CHILD_EXPECT(checks, hmr_mr_regattr(domain, &attr, 0, &mr));
    if (mr != nullptr) ++checks.wrong;
    hmr_domain_stats stats;
    std::memset(&stats, 0, sizeof stats);
    stats.size = sizeof stats;
    CHILD_EXPECT(checks, hmr_domain_query_stats(domain, &stats));
    CHILD_EXPECT(checks, hmr_domain_cache_flush(domain));
    CHILD_EXPECT(checks, hmr_domain_bind(domain, hmr_eq_fid(queue), 0));
    hmr_md_attr md;
    std::memset(&md, 0, sizeof md);
    md.size = sizeof md;
    CHILD_EXPECT(checks, hmr_md_query(domain, &md));
    CHILD_EXPECT(checks, hmr_mem_invalidate(domain, pages.data(), kPage));
    CHILD_EXPECT(checks, hmr_mr_unmap_key(domain, 1));
    hmr_rkey* unpacked = nullptr;
    CHILD_EXPECT(checks, hmr_rkey_unpack(domain, packed, packed_len, &unpacked));
    hmr_cntr* new_counter = nullptr;
    CHILD_EXPECT(checks, hmr_cntr_open(domain, &cntr_attr, &new_counter));
    hmr_ep* new_endpoint = nullptr;
    CHILD_EXPECT(checks, hmr_ep_open(domain, &ep_attr, &new_endpoint));
    hmr_mw* new_window = nullptr;
    CHILD_EXPECT(checks, hmr_mw_alloc(domain, HMR_MW_TYPE_2, &new_window));
    // Every call that takes an MR, of either kind.
    for (hmr_mr* inherited : {full, hit}) {
      if (hmr_mr_key(inherited) != HMR_KEY_NOTAVAIL || hmr_mr_desc(inherited) != nullptr) {
        std::fprintf(stderr, "in the forked child: an inherited MR's key or desc answered\n");
        ++checks.wrong;
      }
      hmr_mr_info info;
      std::memset(&info, 0, sizeof info);
      info.size = sizeof info;
      CHILD_EXPECT(checks, hmr_mr_query(inherited, &info));
      size_t len = sizeof packed;
      CHILD_EXPECT(checks, hmr_rkey_pack(inherited, packed, &len));
      CHILD_EXPECT(checks, hmr_mem_advise(inherited, pages.data(), kPage, HMR_MADV_WILLNEED));
      CHILD_EXPECT(checks, hmr_mr_bind(inherited, hmr_cntr_fid(counter), 0));
      CHILD_EXPECT(checks, hmr_mr_enable(inherited));
    }
    uint64_t key = 0;
    CHILD_EXPECT(checks, hmr_mw_bind(window, full, pages.data(), 64, HMR_REMOTE_READ, nullptr,
                                     &key));
    CHILD_EXPECT(checks, hmr_mw_invalidate(window, nullptr));
    hmr_rkey_info rkey_info;
    std::memset(&rkey_info, 0, sizeof rkey_info);
    rkey_info.size = sizeof rkey_info;
    CHILD_EXPECT(checks, hmr_rkey_query(rkey, &rkey_info));
    uint64_t value = 0;
    CHILD_EXPECT(checks, hmr_cntr_read(counter, &value));
    CHILD_EXPECT(checks, hmr_ep_connect(endpoint, peer));
    CHILD_EXPECT(checks, hmr_ep_write(endpoint, pages.data(), 64, nullptr,
                                      reinterpret_cast<uint64_t>(pages.data()), 1));
    uint32_t event = 0;
    hmr_eq_entry entry;
    CHILD_EXPECT(checks, hmr_eq_read(queue, &event, &entry, 0));
    CHILD_EXPECT(checks, hmr_monitor_notify(monitor, pages.data(), kPage));

    // An inherited MR as a piece of an indirect key in a domain of the child's own.
    if (hmr_domain* own = open_child_domain()) {
      const hmr_mr_segment piece = {full, pages.data(), 64};
      hmr_mr* indirect = nullptr;
      CHILD_EXPECT(checks, hmr_mr_reg_indirect(own, &piece, 1, kRemote, &indirect));
      CHILD_EXPECT(checks, hmr_domain_close(own), 0);
    } else {
      return checks.wrong + 100;
    }

    // Every close succeeds once, in any order (the domain before what it holds), and the
    // handle is closed after it.
    CHILD_EXPECT(checks, hmr_domain_close(domain), 0);
    CHILD_EXPECT(checks, hmr_domain_close(domain), -HMR_EINVAL);
    CHILD_EXPECT(checks, hmr_mr_close(full), 0);
    CHILD_EXPECT(checks, hmr_mr_close(full), -HMR_EINVAL);
    CHILD_EXPECT(checks, hmr_mr_close(hit), 0);
    CHILD_EXPECT(checks, hmr_mr_close(first), 0);
    CHILD_EXPECT(checks, hmr_mr_close(hit), -HMR_EINVAL);
    CHILD_EXPECT(checks, hmr_mw_close(window), 0);
    CHILD_EXPECT(checks, hmr_rkey_release(rkey), 0);
    CHILD_EXPECT(checks, hmr_cntr_close(counter), 0);
    CHILD_EXPECT(checks, hmr_ep_close(endpoint), 0);
    CHILD_EXPECT(checks, hmr_ep_close(peer), 0);
    CHILD_EXPECT(checks, hmr_ep_close(peer), -HMR_EINVAL);
    CHILD_EXPECT(checks, hmr_eq_close(queue), 0);
    CHILD_EXPECT(checks, hmr_monitor_close(monitor), 0);
    CHILD_EXPECT(checks, hmr_domain_close(peer_domain), 0);

    // A domain of the child's own works, on the memory the parent registered.
    hmr_domain* own = open_child_domain();
    if (own == nullptr) return checks.wrong + 100;
    CHILD_EXPECT(checks, hmr_mr_reg(own, pages.data() + kPage, kPage, kRemote, 0, 0, 0, &mr,
                                    nullptr), 0);
    if (mr != nullptr) CHILD_EXPECT(checks, hmr_mr_close(mr), 0);
    CHILD_EXPECT(checks, hmr_domain_close(own), 0);
    // The parent's imported monitor is forgotten: a domain cannot take it by name (it would
    // never hear of a change, its handle being the parent's), and the name is free again.
    if (!hmr_test::kUnderThreadSanitizer) {  // (its device cache starts hmr's reaper thread)
      hmr_domain_attr monitored = hmr_test::domain_attr(kMode);
      monitored.cache_monitor = ops.name;
      hmr_domain* stale = nullptr;
      CHILD_EXPECT(checks, hmr_domain_open(&monitored, &stale), -HMR_ENOENT);
    }
    hmr_monitor* childs_monitor = nullptr;
    CHILD_EXPECT(checks, hmr_monitor_import(&ops, &childs_monitor), 0);
    if (childs_monitor != nullptr) CHILD_EXPECT(checks, hmr_monitor_close(childs_monitor), 0);
    return checks.wrong;
  });
  ASSERT_GE(wrong, 0) << "the child could not be forked, died of a signal or hung";
  EXPECT_EQ(wrong, 0) << "calls in the forked child answered wrongly (named above)";

  // Nothing changed for the parent: its objects work and close as ever.
  EXPECT_NE(hmr_mr_key(hit), HMR_KEY_NOTAVAIL);
  uint64_t value = 1;
  EXPECT_EQ(hmr_cntr_read(counter, &value), 0) << hmr_last_error();
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_EQ(hmr_mr_query(full, &info), 0) << hmr_last_error();
  ASSERT_HMR_OK(hmr_monitor_close(monitor));
  ASSERT_HMR_OK(hmr_eq_close(queue));
  ASSERT_HMR_OK(hmr_ep_close(endpoint));
  ASSERT_HMR_OK(hmr_ep_close(peer));
  ASSERT_HMR_OK(hmr_cntr_close(counter));
  ASSERT_HMR_OK(hmr_rkey_release(rkey));
  ASSERT_HMR_OK(hmr_mw_close(window));
  ASSERT_HMR_OK(hmr_mr_close(hit));
  ASSERT_HMR_OK(hmr_mr_close(first));
  ASSERT_HMR_OK(hmr_mr_close(full));
  ASSERT_HMR_OK(hmr_domain_close(peer_domain));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// fork() while the parent's threads register, close, flush and unmap through a domain (a data
// loader starting its workers while the training threads run): no child may hang or fail.
// Each child asks the parent's domain (refused at once), closes it, and registers through a
// domain of its own.  Children that hang are killed by their 10 s alarm, and the first one
// ends the test.
// (Not under an AddressSanitizer runtime that leaves its allocator's locks held in a forked
// child: the child can hang in its own malloc there, whatever hmr does; the other builds run
// it.  tests/sanitizer_build.h says which runtimes and why.)
TEST(InheritedHandles, AChildForkedWhileThreadsRegisterNeverHangs) {
  if (hmr_test::kAddressSanitizerMayHangForkedChildren) {
    GTEST_SKIP() << "this AddressSanitizer runtime does not hold its allocator's locks across "
                    "fork(): a child of threads that allocate can hang in malloc "
                    "(tests/sanitizer_build.h); the GCC and ThreadSanitizer builds run this test";
  }
  hmr_domain_attr attr = hmr_test::domain_attr(kMode);
  attr.cache_max_count = 64;  // evictions too
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      constexpr size_t kBuffers = 96;
      std::vector<void*> buffers(kBuffers);
      for (void*& buffer : buffers) {
        buffer = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
      }
      for (unsigned n = 1; !stop.load(std::memory_order_relaxed); ++n) {
        void*& buffer = buffers[n % kBuffers];
        hmr_mr* mr = nullptr;
        if (hmr_mr_reg(domain, buffer, kPage + (n % 2) * kPage, kRemote, 0, 0, 0, &mr,
                       nullptr) == 0) {
          hmr_mr_close(mr);
        }
        if (n % 97 == 0) hmr_domain_cache_flush(domain);
        if (t == 1 && n % 13 == 0) {  // memory going away under the cache
          munmap(buffer, 2 * kPage);
          buffer = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
        }
      }
      for (void* buffer : buffers) munmap(buffer, 2 * kPage);
    });
  }
  Pages child_pages(kPage);
  const std::string failure = fork_children(40, [&] {
    hmr_mr* mr = nullptr;
    if (hmr_mr_reg(domain, child_pages.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr) !=
        -HMR_EBADF) {
      return 1;
    }
    if (hmr_domain_close(domain) != 0) return 2;
    hmr_domain* own = open_child_domain();
    if (own == nullptr) return 3;
    for (int i = 0; i < 3; ++i) {
      if (hmr_mr_reg(own, child_pages.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr) != 0) {
        return 4;
      }
      hmr_mr_close(mr);
    }
    return hmr_domain_close(own) == 0 ? 0 : 5;
  });
  stop = true;
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failure, "") << "(1: the parent's domain was not refused; 2: its close failed; 3-5: "
                            "the child's own domain failed)";
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// A range of 64 MiB or more is pre-faulted by hmr's registration pool, whose worker threads
// stay in the parent.  A child of such a process that ends through exit() — static
// destructors, as a C or C++ program returning from main does — ends, with a large
// registration of its own first (its own workers).  Before, it waited for ever in exit(),
// destroying the pool's condition variable for the parent's workers.  (Where the pool has no
// worker — HMR_REG_THREADS=1, or one CPU — there is nothing to leave behind and this passes
// either way; tests/core/fork_safe_pools_test.cpp asks for one.)
TEST(InheritedHandles, AChildOfAProcessThatRegisteredALargeRangeEndsThroughExit) {
  constexpr size_t kLarge = size_t{64} << 20;  // HMR_REG_PREFAULT_MIN's default
  hmr_domain_attr attr = hmr_test::domain_attr(kMode);
  attr.cache_monitor = "disabled";
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  Pages large(kLarge);
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain, large.data(), kLarge, kRemote, 0, 0, 0, &mr, nullptr));
  std::fflush(nullptr);  // so that the child's exit() writes nothing the parent had buffered
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    alarm(10);
    hmr_domain* own = open_child_domain();
    if (own == nullptr) _exit(3);
    // (ThreadSanitizer ends a forked child that starts a thread: one page there.)
    const size_t length = hmr_test::kUnderThreadSanitizer ? kPage : kLarge;
    hmr_mr* own_mr = nullptr;
    if (hmr_mr_reg(own, large.data(), length, kRemote, 0, 0, 0, &own_mr, nullptr) != 0) _exit(4);
    if (hmr_mr_close(own_mr) != 0 || hmr_domain_close(own) != 0) _exit(5);
    leak_check_unsound_in_this_child = 1;
    exit(0);  // hung here, under its alarm
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child " << child_ending(status);
  ASSERT_HMR_OK(hmr_mr_close(mr));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// The links between the software NIC's endpoints are process-wide (core/endpoint.cpp): a
// parent's thread connecting or closing endpoints at the fork held their lock, and a child
// connecting endpoints of its own domain waited for it for ever.
// (Not under an AddressSanitizer runtime that leaves its allocator's locks held in a forked
// child: the linking thread allocates, as AChildForkedWhileThreadsRegisterNeverHangs's do.)
TEST(InheritedHandles, AChildConnectsItsOwnEndpointsWhileAParentThreadLinksOthers) {
  if (hmr_test::kAddressSanitizerMayHangForkedChildren) {
    GTEST_SKIP() << "this AddressSanitizer runtime does not hold its allocator's locks across "
                    "fork(): a child of a thread that allocates can hang in malloc "
                    "(tests/sanitizer_build.h); the GCC and ThreadSanitizer builds run this test";
  }
  hmr_domain* domain = open_child_domain();  // (no cache: no thread of hmr's)
  ASSERT_NE(domain, nullptr) << hmr_last_error();
  std::atomic<bool> stop{false};
  std::thread linking([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      hmr_ep* a = nullptr;
      hmr_ep* b = nullptr;
      if (hmr_ep_open(domain, nullptr, &a) != 0 || hmr_ep_open(domain, nullptr, &b) != 0) break;
      for (int i = 0; i < 16; ++i) (void)hmr_ep_connect(a, b);
      hmr_ep_close(a);
      hmr_ep_close(b);
    }
  });
  const std::string failure = fork_children(40, [] {
    hmr_domain* own = open_child_domain();
    if (own == nullptr) return 3;
    hmr_ep* a = nullptr;
    hmr_ep* b = nullptr;
    if (hmr_ep_open(own, nullptr, &a) != 0 || hmr_ep_open(own, nullptr, &b) != 0) return 4;
    if (hmr_ep_connect(a, b) != 0) return 5;
    if (hmr_ep_close(a) != 0 || hmr_ep_close(b) != 0 || hmr_domain_close(own) != 0) return 6;
    return 0;
  });
  stop = true;
  linking.join();
  EXPECT_EQ(failure, "") << "(3-6: the child's own domain or endpoints failed)";
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

}  // namespace
