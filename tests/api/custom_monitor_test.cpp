// Cache monitors supplied by the application (hmr_monitor_import, libfabric's "mr_cache"
// import): hmr calls start/stop/subscribe/unsubscribe/valid, the application reports changes
// with hmr_monitor_notify.  The contract is docs/semantics.md ("Registration cache") and
// include/hmr/hmr.h ("custom monitors").
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace {

using hmr_test::domain_attr;
using hmr_test::Pages;

constexpr size_t kPage = 4096;
constexpr uint64_t kCachedMode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

// What hmr did to the monitor, recorded through the context pointer.
struct Recorder {
  std::atomic<int> starts{0}, stops{0}, subscribes{0}, unsubscribes{0}, valid_calls{0};
  std::atomic<int> valid_answer{1};
  std::atomic<int> start_rc{0};
  std::atomic<int> subscribe_rc{0};
  std::mutex mutex;
  std::vector<std::pair<uintptr_t, size_t>> subscribed;    // every subscribe, in order
  std::vector<std::pair<uintptr_t, size_t>> unsubscribed;  // every unsubscribe, in order
};

int record_start(void* context) {
  auto* r = static_cast<Recorder*>(context);
  r->starts.fetch_add(1);
  return r->start_rc.load();
}
void record_stop(void* context) { static_cast<Recorder*>(context)->stops.fetch_add(1); }
int record_subscribe(void* context, const void* addr, size_t len) {
  auto* r = static_cast<Recorder*>(context);
  const int rc = r->subscribe_rc.load();
  if (rc == 0) {
    r->subscribes.fetch_add(1);
    std::lock_guard<std::mutex> lock(r->mutex);
    r->subscribed.emplace_back(reinterpret_cast<uintptr_t>(addr), len);
  }
  return rc;
}
void record_unsubscribe(void* context, const void* addr, size_t len) {
  auto* r = static_cast<Recorder*>(context);
  r->unsubscribes.fetch_add(1);
  std::lock_guard<std::mutex> lock(r->mutex);
  r->unsubscribed.emplace_back(reinterpret_cast<uintptr_t>(addr), len);
}
int record_valid(void* context, const void* addr, size_t len) {
  (void)addr;
  (void)len;
  auto* r = static_cast<Recorder*>(context);
  r->valid_calls.fetch_add(1);
  return r->valid_answer.load();
}

hmr_monitor_ops make_ops(const char* name, Recorder* recorder, bool with_valid = false) {
  hmr_monitor_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.size = sizeof ops;
  ops.name = name;
  ops.context = recorder;
  ops.start = record_start;
  ops.stop = record_stop;
  ops.subscribe = record_subscribe;
  ops.unsubscribe = record_unsubscribe;
  ops.valid = with_valid ? record_valid : nullptr;
  return ops;
}

hmr_domain* open_with_monitor(const char* monitor, hmr_domain_attr* out = nullptr) {
  hmr_domain_attr attr = domain_attr(kCachedMode);
  attr.cache_monitor = monitor;
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  if (out != nullptr) *out = attr;
  return rc == 0 ? domain : nullptr;
}

hmr_domain_stats stats_of(hmr_domain* domain) {
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

hmr_mr* reg(hmr_domain* domain, const void* buf, size_t len, uint64_t access = kRemote) {
  hmr_mr* mr = nullptr;
  const int rc = hmr_mr_reg(domain, buf, len, access, 0, 0, 0, &mr, nullptr);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return rc == 0 ? mr : nullptr;
}

// One imported monitor per test (names are process-wide), closed at the end.
class CustomMonitor : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = std::string("test-monitor-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void import(bool with_valid = false) {
    hmr_monitor_ops ops = make_ops(name_.c_str(), &recorder_, with_valid);
    ASSERT_EQ(hmr_monitor_import(&ops, &monitor_), 0) << hmr_last_error();
    ASSERT_NE(monitor_, nullptr);
  }
  void TearDown() override {
    if (monitor_ != nullptr) {
      EXPECT_EQ(hmr_monitor_close(monitor_), 0) << hmr_last_error();
    }
  }

  std::string name_;
  Recorder recorder_;
  hmr_monitor* monitor_ = nullptr;
};

// ------------------------------------------------------------------ use by name

TEST_F(CustomMonitor, DomainUsesItByNameAndSubscribesOnAMiss) {
  ASSERT_NO_FATAL_FAILURE(import());
  EXPECT_EQ(recorder_.starts.load(), 0) << "started before any domain used it";
  hmr_domain_attr attr{};
  hmr_domain* domain = open_with_monitor(name_.c_str(), &attr);
  ASSERT_NE(domain, nullptr);
  ASSERT_NE(attr.cache_monitor, nullptr);
  EXPECT_STREQ(attr.cache_monitor, name_.c_str());
  EXPECT_GT(attr.cache_max_count, 0u);
  EXPECT_EQ(recorder_.starts.load(), 1);

  Pages pages(4 * kPage);
  hmr_mr* first = reg(domain, pages.data(), 4 * kPage);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(recorder_.subscribes.load(), 1);
  {
    std::lock_guard<std::mutex> lock(recorder_.mutex);
    ASSERT_EQ(recorder_.subscribed.size(), 1u);
    // The watched range must cover what was registered.
    const uintptr_t start = recorder_.subscribed[0].first;
    const uintptr_t end = start + recorder_.subscribed[0].second;
    EXPECT_LE(start, reinterpret_cast<uintptr_t>(pages.data()));
    EXPECT_GE(end, reinterpret_cast<uintptr_t>(pages.data()) + 4 * kPage);
  }
  hmr_mr* second = reg(domain, pages.data() + kPage, kPage);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(recorder_.subscribes.load(), 1) << "a hit must not subscribe";
  EXPECT_EQ(hmr_mr_key(second), hmr_mr_key(first));
  hmr_domain_stats stats = stats_of(domain);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.cache_misses, 1u);
  EXPECT_EQ(stats.nic_registrations, 1u);

  ASSERT_HMR_OK(hmr_mr_close(second));
  ASSERT_HMR_OK(hmr_mr_close(first));
  EXPECT_EQ(recorder_.unsubscribes.load(), 0) << "an unused cached entry stays subscribed";
  ASSERT_HMR_OK(hmr_domain_close(domain));
  EXPECT_EQ(recorder_.unsubscribes.load(), recorder_.subscribes.load())
      << "closing the domain must withdraw every subscription";
  {
    std::lock_guard<std::mutex> lock(recorder_.mutex);
    EXPECT_EQ(recorder_.unsubscribed, recorder_.subscribed);
  }
  ASSERT_HMR_OK(hmr_monitor_close(monitor_));
  monitor_ = nullptr;
  EXPECT_EQ(recorder_.stops.load(), recorder_.starts.load());
}

TEST_F(CustomMonitor, UncacheableRegistrationsDoNotSubscribe) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain_attr attr = domain_attr(0);  // requested keys: never shared, never cached
  attr.cache_monitor = name_.c_str();
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  Pages pages(kPage);
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data(), kPage, kRemote, 0, 7, 0, &mr, nullptr));
  EXPECT_EQ(recorder_.subscribes.load(), 0);
  ASSERT_HMR_OK(hmr_mr_close(mr));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// ------------------------------------------------------------------ notify and valid

TEST_F(CustomMonitor, NotifyOverACachedRangeInvalidatesIt) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  Pages pages(4 * kPage);
  hmr_mr* mr = reg(domain, pages.data(), 4 * kPage);
  ASSERT_NE(mr, nullptr);
  const uint64_t old_key = hmr_mr_key(mr);
  ASSERT_HMR_OK(hmr_mr_close(mr));
  hmr_domain_stats stats = stats_of(domain);
  ASSERT_EQ(stats.cache_regions, 1u);
  ASSERT_EQ(stats.nic_deregistrations, 0u);

  // One page in the middle changed.
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data() + 2 * kPage, kPage));
  stats = stats_of(domain);
  EXPECT_EQ(stats.cache_invalidations, 1u);
  EXPECT_EQ(stats.cache_regions, 0u);
  EXPECT_EQ(stats.nic_deregistrations, 1u) << "an unused invalidated entry is released at once";
  EXPECT_EQ(recorder_.unsubscribes.load(), 1);

  mr = reg(domain, pages.data(), 4 * kPage);
  ASSERT_NE(mr, nullptr);
  stats = stats_of(domain);
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.cache_misses, 2u);
  EXPECT_EQ(stats.nic_registrations, 2u);
  EXPECT_NE(hmr_mr_key(mr), old_key);
  EXPECT_EQ(recorder_.subscribes.load(), 2);
  ASSERT_HMR_OK(hmr_mr_close(mr));

  // A range next to the entry, not overlapping it, leaves it alone.
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data() + 4 * kPage, kPage));
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data() - kPage, kPage));
  stats = stats_of(domain);
  EXPECT_EQ(stats.cache_invalidations, 1u);
  EXPECT_EQ(stats.cache_regions, 1u);
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

TEST_F(CustomMonitor, NotifyOfAHeldRegistrationKeepsItForItsHolder) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  Pages pages(kPage);
  hmr_mr* held = reg(domain, pages.data(), kPage);
  ASSERT_NE(held, nullptr);
  const uint64_t key = hmr_mr_key(held);
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data(), kPage));
  hmr_domain_stats stats = stats_of(domain);
  EXPECT_EQ(stats.cache_invalidations, 1u);
  EXPECT_EQ(stats.nic_deregistrations, 0u) << "deregistered under its holder";
  EXPECT_EQ(hmr_mr_key(held), key);

  // The holder's key still moves bytes (the memory itself is still there).
  hmr_ep* target = nullptr;
  hmr_ep* initiator = nullptr;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, &target));
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, &initiator));
  ASSERT_HMR_OK(hmr_ep_connect(initiator, target));
  const uint64_t value = 0x1234567890abcdefULL;
  EXPECT_EQ(hmr_ep_write(initiator, &value, sizeof value, nullptr,
                         reinterpret_cast<uint64_t>(pages.data()), key),
            0)
      << hmr_last_error();
  uint64_t landed = 0;
  std::memcpy(&landed, pages.data(), sizeof landed);
  EXPECT_EQ(landed, value);

  // A new registration of the range does not share the dropped entry.
  hmr_mr* fresh = reg(domain, pages.data(), kPage);
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(hmr_mr_key(fresh), key);
  EXPECT_EQ(stats_of(domain).cache_hits, 0u);

  ASSERT_HMR_OK(hmr_mr_close(held));
  stats = stats_of(domain);
  EXPECT_EQ(stats.nic_deregistrations, 1u) << "the last holder's close must release it";
  EXPECT_HMR_ERROR(hmr_ep_write(initiator, &value, sizeof value, nullptr,
                                reinterpret_cast<uint64_t>(pages.data()), key),
                   HMR_EACCES);
  ASSERT_HMR_OK(hmr_mr_close(fresh));
  ASSERT_HMR_OK(hmr_ep_close(initiator));
  ASSERT_HMR_OK(hmr_ep_close(target));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

TEST_F(CustomMonitor, NotifyReachesEveryDomainUsingTheMonitor) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain* a = open_with_monitor(name_.c_str());
  hmr_domain* b = open_with_monitor(name_.c_str());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(recorder_.starts.load(), 1) << "start is idempotent";
  Pages pages(kPage);
  ASSERT_HMR_OK(hmr_mr_close(reg(a, pages.data(), kPage)));
  ASSERT_HMR_OK(hmr_mr_close(reg(b, pages.data(), kPage)));
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data(), 1));
  EXPECT_EQ(stats_of(a).cache_invalidations, 1u);
  EXPECT_EQ(stats_of(b).cache_invalidations, 1u);
  EXPECT_EQ(stats_of(a).cache_regions, 0u);
  EXPECT_EQ(stats_of(b).cache_regions, 0u);
  ASSERT_HMR_OK(hmr_domain_close(a));
  ASSERT_HMR_OK(hmr_domain_close(b));
}

TEST_F(CustomMonitor, ValidReturningZeroForcesAMiss) {
  ASSERT_NO_FATAL_FAILURE(import(/*with_valid=*/true));
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  Pages pages(2 * kPage);
  hmr_mr* mr = reg(domain, pages.data(), 2 * kPage);
  ASSERT_NE(mr, nullptr);
  const uint64_t first_key = hmr_mr_key(mr);
  ASSERT_HMR_OK(hmr_mr_close(mr));

  // Still valid: a hit, after asking.
  mr = reg(domain, pages.data(), kPage);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(hmr_mr_key(mr), first_key);
  EXPECT_GE(recorder_.valid_calls.load(), 1);
  ASSERT_HMR_OK(hmr_mr_close(mr));
  hmr_domain_stats stats = stats_of(domain);
  EXPECT_EQ(stats.cache_hits, 1u);

  recorder_.valid_answer = 0;
  const int calls_before = recorder_.valid_calls.load();
  mr = reg(domain, pages.data(), kPage);
  ASSERT_NE(mr, nullptr);
  EXPECT_GT(recorder_.valid_calls.load(), calls_before);
  EXPECT_NE(hmr_mr_key(mr), first_key) << "an entry the monitor called invalid was handed out";
  stats = stats_of(domain);
  EXPECT_EQ(stats.cache_misses, 2u);
  EXPECT_EQ(stats.cache_invalidations, 1u);
  EXPECT_EQ(stats.nic_deregistrations, 1u);
  ASSERT_HMR_OK(hmr_mr_close(mr));
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

// A registration the monitor's valid() turns into a miss counts as a miss only, never also as
// a hit (hits + misses must equal the registrations asked for).
TEST_F(CustomMonitor, InvalidHitIsNotCountedAsAHit) {
  ASSERT_NO_FATAL_FAILURE(import(/*with_valid=*/true));
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  Pages pages(kPage);
  ASSERT_HMR_OK(hmr_mr_close(reg(domain, pages.data(), kPage)));
  ASSERT_HMR_OK(hmr_mr_close(reg(domain, pages.data(), kPage)));  // valid: a hit
  recorder_.valid_answer = 0;
  ASSERT_HMR_OK(hmr_mr_close(reg(domain, pages.data(), kPage)));  // invalid: a miss
  const hmr_domain_stats stats = stats_of(domain);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.cache_misses, 2u);
  EXPECT_EQ(stats.cache_hits + stats.cache_misses, stats.registrations);
  ASSERT_HMR_OK(hmr_domain_close(domain));
}

TEST_F(CustomMonitor, RefusedSubscriptionRegistersUncached) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  recorder_.subscribe_rc = -HMR_ENOMEM;
  Pages pages(kPage);
  hmr_mr* a = reg(domain, pages.data(), kPage);
  ASSERT_NE(a, nullptr) << "a monitor that cannot watch must not fail the registration";
  ASSERT_HMR_OK(hmr_mr_close(a));
  hmr_domain_stats stats = stats_of(domain);
  EXPECT_EQ(stats.cache_regions, 0u) << "an unwatched range was cached";
  EXPECT_EQ(stats.cache_uncached, 1u);
  EXPECT_EQ(stats.nic_deregistrations, 1u);
  recorder_.subscribe_rc = 0;
  hmr_mr* b = reg(domain, pages.data(), kPage);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(stats_of(domain).cache_hits, 0u);
  ASSERT_HMR_OK(hmr_mr_close(b));
  ASSERT_HMR_OK(hmr_domain_close(domain));
  EXPECT_EQ(recorder_.unsubscribes.load(), recorder_.subscribes.load());
}

// ------------------------------------------------------------------ lifetime

TEST_F(CustomMonitor, CloseWhileADomainUsesItIsBusy) {
  ASSERT_NO_FATAL_FAILURE(import());
  hmr_domain* domain = open_with_monitor(name_.c_str());
  ASSERT_NE(domain, nullptr);
  EXPECT_HMR_ERROR(hmr_monitor_close(monitor_), HMR_EBUSY);
  // Still usable after the refused close.
  Pages pages(kPage);
  ASSERT_HMR_OK(hmr_mr_close(reg(domain, pages.data(), kPage)));
  ASSERT_HMR_OK(hmr_monitor_notify(monitor_, pages.data(), kPage));
  EXPECT_EQ(stats_of(domain).cache_invalidations, 1u);
  ASSERT_HMR_OK(hmr_domain_close(domain));
  EXPECT_EQ(hmr_monitor_close(monitor_), 0) << hmr_last_error();
  monitor_ = nullptr;
}

TEST_F(CustomMonitor, ClosedMonitorNameIsFreeAgain) {
  ASSERT_NO_FATAL_FAILURE(import());
  ASSERT_HMR_OK(hmr_monitor_close(monitor_));
  monitor_ = nullptr;
  // Unknown now.
  hmr_domain_attr attr = domain_attr(kCachedMode);
  attr.cache_monitor = name_.c_str();
  hmr_domain* domain = nullptr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_ENOENT);
  EXPECT_EQ(domain, nullptr);
  // And importable again.
  ASSERT_NO_FATAL_FAILURE(import());
}

TEST_F(CustomMonitor, StartFailureFailsDomainOpen) {
  ASSERT_NO_FATAL_FAILURE(import());
  recorder_.start_rc = -HMR_EIO;
  hmr_domain_attr attr = domain_attr(kCachedMode);
  attr.cache_monitor = name_.c_str();
  hmr_domain* domain = nullptr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EIO);
  EXPECT_EQ(domain, nullptr);
  // The failed open left no user behind: the monitor closes.
  ASSERT_HMR_OK(hmr_monitor_close(monitor_));
  monitor_ = nullptr;
  EXPECT_EQ(recorder_.stops.load(), 0) << "stop without a successful start";
}

TEST_F(CustomMonitor, UnknownMonitorNameFailsDomainOpen) {
  hmr_domain_attr attr = domain_attr(kCachedMode);
  attr.cache_monitor = "no-such-monitor-anywhere";
  hmr_domain* domain = nullptr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_ENOENT);
  EXPECT_EQ(domain, nullptr);
}

// ------------------------------------------------------------------ bad arguments

TEST_F(CustomMonitor, ImportRejectsBadOps) {
  hmr_monitor* out = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(nullptr, &out), HMR_EINVAL);
  hmr_monitor_ops ops = make_ops(name_.c_str(), &recorder_);
  EXPECT_HMR_ERROR(hmr_monitor_import(&ops, nullptr), HMR_EINVAL);

  hmr_monitor_ops no_size = ops;
  no_size.size = 0;
  EXPECT_HMR_ERROR(hmr_monitor_import(&no_size, &out), HMR_EINVAL);

  hmr_monitor_ops missing = ops;
  missing.start = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);
  missing = ops;
  missing.stop = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);
  missing = ops;
  missing.subscribe = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);
  missing = ops;
  missing.unsubscribe = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);
  missing = ops;
  missing.name = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);
  missing.name = "";
  EXPECT_HMR_ERROR(hmr_monitor_import(&missing, &out), HMR_EINVAL);

  for (const char* reserved : {"userfaultfd", "disabled", "memhooks"}) {
    hmr_monitor_ops named = ops;
    named.name = reserved;
    SCOPED_TRACE(reserved);
    EXPECT_HMR_ERROR(hmr_monitor_import(&named, &out), HMR_EINVAL);
  }
  EXPECT_EQ(out, nullptr) << "output written on failure";
  EXPECT_EQ(recorder_.starts.load(), 0);
}

TEST_F(CustomMonitor, DuplicateNameIsBusy) {
  ASSERT_NO_FATAL_FAILURE(import());
  Recorder other;
  hmr_monitor_ops ops = make_ops(name_.c_str(), &other);
  hmr_monitor* second = nullptr;
  EXPECT_HMR_ERROR(hmr_monitor_import(&ops, &second), HMR_EBUSY);
  EXPECT_EQ(second, nullptr);
}

TEST_F(CustomMonitor, NotifyAndCloseRejectBadArguments) {
  ASSERT_NO_FATAL_FAILURE(import());
  Pages pages(kPage);
  EXPECT_HMR_ERROR(hmr_monitor_notify(monitor_, pages.data(), 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_monitor_notify(monitor_, reinterpret_cast<void*>(UINTPTR_MAX - 10), 100),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_monitor_notify(nullptr, pages.data(), kPage), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_monitor_close(nullptr), HMR_EINVAL);
  // A notify for a range nobody caches is fine.
  EXPECT_EQ(hmr_monitor_notify(monitor_, pages.data(), kPage), 0) << hmr_last_error();
}

}  // namespace
