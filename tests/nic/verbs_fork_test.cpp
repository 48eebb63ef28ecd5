// Fork and pinned memory on the verbs NIC (nic/verbs/fork_protection.h), against the fake
// libibverbs, which keeps fork protection as libibverbs does (libibverbs/memory.c): on a kernel
// that does not copy pinned pages on fork, ibv_fork_init makes every registration by address
// madvise(MADV_DONTFORK) — for real here — so a forked child has none of those pages; on one
// that does (5.13+), ibv_is_fork_initialized says IBV_FORK_UNNEEDED and nothing is needed.
// hmr's decision is once per process, so each scenario runs in a forked child that plays a new
// process, and checks its own grandchild.
#include <hmr/hmr.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nic/verbs/fork_protection.h"
#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

constexpr size_t kPage = kTestPage;

// Whether `address` is mapped in the calling process (/proc/self/maps).
bool mapped(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto wanted = reinterpret_cast<uintptr_t>(address);
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long low = 0, high = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &low, &high) == 2 && wanted >= low &&
        wanted < high) {
      return true;
    }
  }
  return false;
}

// Runs `scenario` in a forked child; its exit code (0: every check held).  A check that fails
// in the child prints why and exits with its line number.
template <typename Scenario>
int in_child(Scenario scenario) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) _exit(scenario());
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHILD_CHECK(condition)                                                     \
  do {                                                                             \
    if (!(condition)) {                                                            \
      std::fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #condition,     \
                   hmr_last_error());                                              \
      return __LINE__ % 200 + 1;                                                   \
    }                                                                              \
  } while (0)

// In a child that plays a fresh process on a kernel that does (or does not) copy pinned pages:
// opens a verbs domain with `options`, registers a page, forks, and answers whether the
// grandchild still had the page, plus what hmr decided.
struct Outcome {
  int code = -1;
  bool grandchild_had_page = false;
  bool hugepages_safe = false;  // RDMAV_HUGEPAGES_SAFE=1 in the child after its registration
};

class VerbsForkTest : public VerbsTest {
 protected:
  enum class Outside { nothing, pinned, on_demand };
  Outcome run(int kernel_copies, const char* options, Outside register_first_outside = Outside::nothing) {
    Outcome outcome;
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return outcome;
    outcome.code = in_child([&]() -> int {
      close(pipe_fds[0]);
      fake().reset();
      fake().set_fork_kernel(kernel_copies);
      verbs::forget_fork_protection_decision();
      void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      CHILD_CHECK(page != MAP_FAILED);
      std::memset(page, 7, kPage);
      AppPd* outside = nullptr;
      if (register_first_outside != Outside::nothing) {
        // The application registered memory itself before hmr's first domain.
        outside = new AppPd(fake(), 0);
        static std::vector<char> mine(kPage);
        const int access = register_first_outside == Outside::on_demand
                               ? verbs::IBV_ACCESS_ON_DEMAND | verbs::IBV_ACCESS_LOCAL_WRITE
                               : 0;
        CHILD_CHECK(fake().reg_mr(outside->pd(), mine.data(), kPage, access) != nullptr);
      }
      hmr_domain_attr attr{};
      attr.size = sizeof attr;
      attr.nic = "verbs";
      attr.nic_options = options;
      attr.mr_mode = kVerbsBasicMode;
      attr.cache_monitor = "disabled";
      hmr_domain* domain = nullptr;
      CHILD_CHECK(hmr_domain_open(&attr, &domain) == 0);
      hmr_mr* mr = nullptr;
      CHILD_CHECK(hmr_mr_reg(domain, page, kPage, kRemoteAccess, 0, 0, 0, &mr, nullptr) == 0);
      const verbs::ForkProtection decided = verbs::fork_protection_now();
      std::fflush(nullptr);
      const pid_t grandchild = fork();
      if (grandchild == 0) _exit(mapped(page) ? 1 : 0);
      int status = 0;
      CHILD_CHECK(waitpid(grandchild, &status, 0) == grandchild && WIFEXITED(status));
      const char* hugepages = getenv("RDMAV_HUGEPAGES_SAFE");
      const std::string report = std::to_string(WEXITSTATUS(status)) + " " +
                                 (hugepages != nullptr && std::string(hugepages) == "1" ? "H" : "-") +
                                 " " + decided.state;
      CHILD_CHECK(write(pipe_fds[1], report.data(), report.size()) ==
                  static_cast<ssize_t>(report.size()));
      CHILD_CHECK(hmr_mr_close(mr) == 0);
      CHILD_CHECK(hmr_domain_close(domain) == 0);
      return 0;
    });
    close(pipe_fds[1]);
    char buffer[128] = {};
    const ssize_t got = read(pipe_fds[0], buffer, sizeof buffer - 1);
    close(pipe_fds[0]);
    if (got > 0) {
      outcome.grandchild_had_page = buffer[0] == '1';
      outcome.hugepages_safe = got > 2 && buffer[2] == 'H';
      state = got > 4 ? std::string(buffer + 4, static_cast<size_t>(got) - 4) : std::string();
    }
    return outcome;
  }
  std::string state;
};

// A kernel that does not copy pinned pages (before 5.13): hmr turns protection on before its
// first registration, so a forked child has no registered pages to write (and the parent's
// pages stay the NIC's).  Before, hmr never called ibv_fork_init.
TEST_F(VerbsForkTest, OnAKernelWithoutCopyOnForkHmrTurnsProtectionOn) {
  const Outcome outcome = run(/*kernel_copies=*/0, kFakeConnectX);
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "initialized");
  EXPECT_FALSE(outcome.grandchild_had_page) << "the registered page went to the child";
  // RDMAV_HUGEPAGES_SAFE costs every registration of the process a read of /proc/self/smaps:
  // it is the application's to set (docs/api.md), never hmr's.
  EXPECT_FALSE(outcome.hugepages_safe);
}

// A kernel that copies pinned pages: nothing to do, and a child keeps every page.
TEST_F(VerbsForkTest, OnAKernelWithCopyOnForkNothingIsNeeded) {
  const Outcome outcome = run(/*kernel_copies=*/1, kFakeConnectX);
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "unneeded");
  EXPECT_TRUE(outcome.grandchild_had_page);
  EXPECT_FALSE(outcome.hugepages_safe);
}

// fork=off leaves it to the application; fork=init protects whatever the kernel says.
TEST_F(VerbsForkTest, TheOptionDecides) {
  Outcome outcome = run(0, "device=fake_mlx5_0;relaxed_ordering=off;fork=off");
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "off");
  EXPECT_TRUE(outcome.grandchild_had_page);
  outcome = run(0, "device=fake_mlx5_0;relaxed_ordering=off;fork=init");
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "initialized");
  EXPECT_FALSE(outcome.grandchild_had_page);
}

// Memory the application registered before hmr's first domain makes ibv_fork_init too late
// (EINVAL): hmr says so, and goes on.
TEST_F(VerbsForkTest, TooLateIsSaidNotFatal) {
  const Outcome outcome = run(0, kFakeConnectX, Outside::pinned);
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "failed");
}

// An ODP registration pins nothing, and libibverbs does not mark its range DONTFORK: it does
// not make ibv_fork_init too late (the fake said it did).
TEST_F(VerbsForkTest, AnEarlierOdpRegistrationIsNotTooLate) {
  const Outcome outcome = run(0, kFakeConnectX, Outside::on_demand);
  ASSERT_EQ(outcome.code, 0);
  EXPECT_EQ(state, "initialized");
}

TEST_F(VerbsForkTest, BadOptionValueIsRefused) {
  Result<std::unique_ptr<nic::Nic>> refused = try_open("fork=sometimes");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.status().reason(), "fork")) << refused.status().reason();
}

}  // namespace
}  // namespace hmr::testing
