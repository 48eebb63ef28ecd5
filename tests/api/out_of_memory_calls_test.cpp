// Out of memory in the C ABI's other calls (out_of_memory_test.cpp has domain open and
// registration): for each scenario, a sequence of calls on a sim domain runs with the n-th
// allocation of the calling thread failed, for n = 1, 2, ... until a run meets no failure.
// Each call then returns 0 or -HMR_ENOMEM with a reason (a later call of the sequence is not
// made after a failure), what the calls made is closed afterwards without failing, and the
// domain closes: nothing half-made is left counted, and (under ASan, LeakSanitizer) nothing
// leaks.
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <ostream>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/api/failing_allocator.h"
#include "tests/api/test_support.h"
#include "tests/fakes/fake_ibverbs_control.h"

namespace {

using hmr_test::allocation_failure::disarm;
using hmr_test::allocation_failure::fail_nth;

constexpr uint64_t kAppMode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr size_t kPage = 4096;
constexpr uint64_t kMostRounds = 5000;

// What a scenario made, closed after each run in the order that lets each close succeed.
// Room for everything is taken before the failure is armed: the test's own code must not be
// the one that runs out.
struct Made {
  Made() {
    windows.reserve(4);
    rkeys.reserve(4);
    indirect.reserve(4);
    mrs.reserve(4);
    endpoints.reserve(4);
  }
  std::vector<hmr_mw*> windows;
  std::vector<hmr_rkey*> rkeys;
  std::vector<hmr_mr*> indirect;  // before the MRs they reach
  std::vector<hmr_mr*> mrs;
  std::vector<hmr_ep*> endpoints;
  hmr_eq* queue = nullptr;  // after the domain

  void close_before_domain() {
    for (hmr_mw* window : windows) EXPECT_EQ(hmr_mw_close(window), 0) << hmr_last_error();
    for (hmr_rkey* rkey : rkeys) EXPECT_EQ(hmr_rkey_release(rkey), 0) << hmr_last_error();
    for (hmr_mr* mr : indirect) EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    for (hmr_mr* mr : mrs) EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    for (hmr_ep* ep : endpoints) EXPECT_EQ(hmr_ep_close(ep), 0) << hmr_last_error();
  }
  void close_after_domain() {
    if (queue != nullptr) {
      EXPECT_EQ(hmr_eq_close(queue), 0) << hmr_last_error();
    }
  }
};

// One scenario: `prepare` runs unarmed (what the calls need), `calls` armed; `calls` returns
// the first nonzero rc of its sequence, or 0, and records what it made in `made`.
struct Scenario {
  const char* name;
  std::function<void(hmr_domain*, Made&)> prepare;
  std::function<int(hmr_domain*, Made&)> calls;
  const char* nic_options = nullptr;
  uint64_t app_mode = kAppMode;
  const char* nic = "sim";
};

void PrintTo(const Scenario& scenario, std::ostream* out) { *out << scenario.name; }

// Runs `calls` in order until one fails; its rc.  (No std::function: a capture too large for
// its inline room is allocated, and the test must not allocate while a failure is armed.)
template <typename... Calls>
int in_turn(Calls&&... calls) {
  int rc = 0;
  ((rc == 0 ? (rc = calls()) : 0), ...);
  return rc;
}

uint8_t* buffer(const hmr_test::Pages& pages, size_t page) { return pages.data() + page * kPage; }

// The pages every scenario works on: a static area, so that the lambdas below can name it.
hmr_test::Pages& pages() {
  static hmr_test::Pages area(16 * kPage);
  return area;
}

int reg(hmr_domain* domain, size_t page, size_t count, uint64_t access, Made& made,
        uint64_t flags = 0) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, buffer(pages(), page), count * kPage, access, 0, 0, flags,
                            &mr, nullptr);
  if (rc == 0) made.mrs.push_back(mr);
  return rc;
}

// Before main(), so before the first verbs domain: the adapter reads it when it loads.
[[maybe_unused]] const bool kFakeVerbsChosen = [] {
  setenv("HMR_IBVERBS_LIBRARY", HMR_FAKE_IBVERBS_PATH, 1);
  return true;
}();

// How many objects of `kind` ("mrs", "pds", "contexts") the fake libibverbs holds now (the
// same library object the adapter loaded: dlopen of the same path).
int fake_verbs_live(const char* kind) {
  static const auto live = [] {
    void* library = dlopen(HMR_FAKE_IBVERBS_PATH, RTLD_NOW | RTLD_LOCAL);
    return library == nullptr
               ? nullptr
               : reinterpret_cast<fake_ibverbs_live_fn>(dlsym(library, "fake_ibverbs_live"));
  }();
  return live != nullptr ? live(kind) : -1;
}

class OutOfMemoryCalls : public ::testing::TestWithParam<Scenario> {
 protected:
  // What the process does once (the first domain loads the runtimes and starts the monitor).
  static void SetUpTestSuite() {
    hmr_test::DomainPtr domain = hmr_test::open_domain(kAppMode);
    hmr_test::Pages pages(kPage);
    { hmr_test::MrPtr mr = hmr_test::reg(domain.get(), pages.data(), kPage, kRemote); }
  }
};

TEST_P(OutOfMemoryCalls, EachAllocationFailsCleanly) {
  const Scenario& scenario = GetParam();
  uint64_t nth = 1;
  for (; nth < kMostRounds; ++nth) {
    hmr_domain_attr attr = hmr_test::domain_attr(scenario.app_mode, scenario.nic_options);
    attr.nic = scenario.nic;
    hmr_domain* domain = nullptr;
    ASSERT_EQ(hmr_domain_open(&attr, &domain), 0) << scenario.name << ": " << hmr_last_error();
    Made made;
    std::memset(pages().data(), 0, pages().size());
    if (scenario.prepare) scenario.prepare(domain, made);
    ASSERT_FALSE(HasFailure()) << "preparing " << scenario.name;
    fail_nth(nth);
    const int rc = scenario.calls(domain, made);
    const bool failed = disarm();
    if (rc != 0) {
      EXPECT_EQ(rc, -HMR_ENOMEM) << scenario.name << ", allocation " << nth << " failed: "
                                 << hmr_last_error();
      EXPECT_STRNE(hmr_last_error(), "") << scenario.name << ", allocation " << nth;
    }
    made.close_before_domain();
    EXPECT_EQ(hmr_domain_close(domain), 0)
        << scenario.name << ", allocation " << nth << ": " << hmr_last_error();
    made.close_after_domain();
    if (std::strcmp(scenario.nic, "verbs") == 0) {
      // (A leaked MR failed the close above; closing the context destroyed it.)
      for (const char* kind : {"mrs", "pds", "contexts", "destroyed_by_close"}) {
        EXPECT_EQ(fake_verbs_live(kind), 0) << scenario.name << ", allocation " << nth << ": "
                                            << kind << " left at the fake libibverbs";
      }
    }
    if (HasFailure() || !failed) break;
  }
  EXPECT_LT(nth, kMostRounds);
  EXPECT_GT(nth, 1u) << scenario.name << " allocated nothing: this test proves nothing";
}

const Scenario kScenarios[] = {
    {"hmr_mr_regv of two segments (uncached)", nullptr,
     [](hmr_domain* domain, Made& made) {
       const iovec segments[2] = {{buffer(pages(), 0), kPage}, {buffer(pages(), 2), kPage}};
       hmr_mr* mr = nullptr;
       const int rc = hmr_mr_regv(domain, segments, 2, kRemote, 0, 0, 0, &mr, nullptr);
       if (rc == 0) made.mrs.push_back(mr);
       return rc;
     }},
    {"hmr_mr_reg with a key the application chose",
     nullptr,
     [](hmr_domain* domain, Made& made) {
       hmr_mr* mr = nullptr;
       const int rc = hmr_mr_reg(domain, buffer(pages(), 0), kPage, kRemote, 0, 77, 0, &mr,
                                 nullptr);
       if (rc == 0) made.mrs.push_back(mr);
       return rc;
     },
     nullptr, HMR_MR_VIRT_ADDR},
    {"hmr_rkey_pack, hmr_rkey_unpack and hmr_rkey_query",
     [](hmr_domain* domain, Made& made) { EXPECT_EQ(reg(domain, 0, 2, kRemote, made), 0); },
     [](hmr_domain* domain, Made& made) {
       std::array<uint8_t, 256> blob{};
       size_t len = blob.size();
       hmr_rkey* rkey = nullptr;
       hmr_rkey_info info{};
       info.size = sizeof info;
       return in_turn([&] { return hmr_rkey_pack(made.mrs[0], blob.data(), &len); },
                       [&] {
                         const int rc = hmr_rkey_unpack(domain, blob.data(), len, &rkey);
                         if (rc == 0) made.rkeys.push_back(rkey);
                         return rc;
                       },
                       [&] { return hmr_rkey_query(rkey, &info); });
     }},
    {"hmr_ep_open, hmr_ep_connect, hmr_ep_write and hmr_ep_read",
     [](hmr_domain* domain, Made& made) {
       EXPECT_EQ(reg(domain, 0, 1, kRemote, made), 0);  // the target
     },
     [](hmr_domain* domain, Made& made) {
       hmr_ep_attr attr{};
       attr.size = sizeof attr;
       hmr_ep* ends[2] = {};
       uint64_t word = 42;
       const uint64_t target = reinterpret_cast<uintptr_t>(buffer(pages(), 0));
       const uint64_t key = hmr_mr_key(made.mrs[0]);
       return in_turn([&] {
                         for (hmr_ep*& end : ends) {
                           if (const int rc = hmr_ep_open(domain, &attr, &end); rc != 0) return rc;
                           made.endpoints.push_back(end);
                         }
                         return 0;
                       },
                       [&] { return hmr_ep_connect(ends[0], ends[1]); },
                       [&] { return hmr_ep_write(ends[0], &word, sizeof word, nullptr, target, key); },
                       [&] { return hmr_ep_read(ends[0], &word, sizeof word, nullptr, target, key); });
     }},
    {"asynchronous registration through an event queue",
     [](hmr_domain* domain, Made& made) {
       hmr_eq_attr attr{};
       attr.size = sizeof attr;
       EXPECT_EQ(hmr_eq_open(&attr, &made.queue), 0) << hmr_last_error();
       EXPECT_EQ(hmr_domain_bind(domain, reinterpret_cast<hmr_fid*>(made.queue), HMR_REG_MR), 0)
           << hmr_last_error();
     },
     [](hmr_domain* domain, Made& made) {
       return in_turn([&] { return reg(domain, 0, 2, kRemote, made); },
                       [&] {
                         uint32_t event = 0;
                         hmr_eq_entry entry{};
                         const int rc = hmr_eq_sread(made.queue, &event, &entry, -1, 0);
                         return rc < 0 ? rc : 0;
                       });
     }},
    // The bind itself under each failure (its worker thread, the thread's state): a failed
    // bind leaves the domain unbound, and a registration then completes at once.
    {"hmr_domain_bind, then a registration",
     [](hmr_domain*, Made& made) {
       hmr_eq_attr attr{};
       attr.size = sizeof attr;
       EXPECT_EQ(hmr_eq_open(&attr, &made.queue), 0) << hmr_last_error();
     },
     [](hmr_domain* domain, Made& made) {
       return in_turn(
           [&] { return hmr_domain_bind(domain, reinterpret_cast<hmr_fid*>(made.queue), HMR_REG_MR); },
           [&] { return reg(domain, 0, 2, kRemote, made); });
     }},
    {"hmr_mr_rereg onto another range",
     [](hmr_domain* domain, Made& made) { EXPECT_EQ(reg(domain, 0, 1, kRemote, made), 0); },
     [](hmr_domain*, Made& made) {
       const iovec range = {buffer(pages(), 4), 2 * kPage};
       hmr_mr_rereg_attr attr{};
       attr.size = sizeof attr;
       attr.mr_iov = &range;
       attr.iov_count = 1;
       return hmr_mr_rereg(made.mrs[0], HMR_MR_REREG_TRANSLATION, &attr);
     }},
    {"hmr_mw_alloc and hmr_mw_bind",
     [](hmr_domain* domain, Made& made) {
       EXPECT_EQ(reg(domain, 0, 2, kRemote | HMR_MW_BIND, made), 0);
     },
     [](hmr_domain* domain, Made& made) {
       hmr_mw* window = nullptr;
       uint64_t key = 0;
       return in_turn([&] {
                         const int rc = hmr_mw_alloc(domain, HMR_MW_TYPE_1, &window);
                         if (rc == 0) made.windows.push_back(window);
                         return rc;
                       },
                       [&] {
                         return hmr_mw_bind(window, made.mrs[0], buffer(pages(), 0), 64,
                                            HMR_REMOTE_WRITE, nullptr, &key);
                       });
     }},
    {"hmr_mr_reg_indirect over two MRs",
     [](hmr_domain* domain, Made& made) {
       EXPECT_EQ(reg(domain, 0, 1, kRemote, made), 0);
       EXPECT_EQ(reg(domain, 2, 1, kRemote, made), 0);
     },
     [](hmr_domain* domain, Made& made) {
       const hmr_mr_segment segments[2] = {{made.mrs[0], buffer(pages(), 0), kPage},
                                           {made.mrs[1], buffer(pages(), 2), kPage}};
       hmr_mr* indirect = nullptr;
       const int rc = hmr_mr_reg_indirect(domain, segments, 2, kRemote, &indirect);
       if (rc == 0) made.indirect.push_back(indirect);
       return rc;
     }},
    // libfabric's own allocations are malloc's and not failed here: these fail the ofi
    // adapter's (its registration records, keys, the packed key's provider name).
    {"ofi (shm): a registration, its packed key and an unpack",
     nullptr,
     [](hmr_domain* domain, Made& made) {
       std::array<uint8_t, 512> blob{};
       size_t len = blob.size();
       hmr_rkey* rkey = nullptr;
       return in_turn([&] { return reg(domain, 0, 2, kRemote, made); },
                      [&] { return hmr_rkey_pack(made.mrs[0], blob.data(), &len); },
                      [&] {
                        const int rc = hmr_rkey_unpack(domain, blob.data(), len, &rkey);
                        if (rc == 0) made.rkeys.push_back(rkey);
                        return rc;
                      });
     },
     "provider=shm", kAppMode | HMR_MR_ALLOCATED, "ofi"},
    // The fake libibverbs (HMR_IBVERBS_LIBRARY, set before main) refuses ibv_dealloc_pd while
    // an MR is left on the PD, as the kernel does: a leaked ibv_mr fails the domain's close
    // (-HMR_EIO).
    {"verbs (fake ConnectX): a registration and its packed key",
     nullptr,
     [](hmr_domain* domain, Made& made) {
       std::array<uint8_t, 512> blob{};
       size_t len = blob.size();
       return in_turn([&] { return reg(domain, 0, 2, kRemote, made); },
                      [&] { return hmr_rkey_pack(made.mrs[0], blob.data(), &len); });
     },
     "device=fake_mlx5_0;relaxed_ordering=off",
     HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY, "verbs"},
};


INSTANTIATE_TEST_SUITE_P(Calls, OutOfMemoryCalls, ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<Scenario>& param) {
                           return "scenario" + std::to_string(param.index);
                         });

}  // namespace
