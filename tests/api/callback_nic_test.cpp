// nic = "callback": the application's own registration functions behind hmr's detection,
// cache and monitors — every call recorded, every failure carried back with its reason, and
// callbacks that call hmr themselves (hmr holds no lock while it calls back).
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memory_ops_support.h"
#include "test_support.h"

using namespace hmr_test;
using hmr_memops_test::rereg_access;
using hmr_memops_test::rereg_attr;

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

// A record of calls that hmr's own threads make too: dereg runs on hmr's reaper thread for
// memory unmapped under the cache, ordered after the test's earlier looks only through the
// kernel's userfaultfd (munmap waits for the monitor's read), which ThreadSanitizer cannot see.
// A real NIC's bookkeeping is locked for the same reason.
template <typename T>
class LockedLog {
 public:
  void push_back(const T& item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(item);
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }
  bool empty() const { return size() == 0; }
  T operator[](size_t i) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.at(i);
  }

 private:
  mutable std::mutex mutex_;
  std::vector<T> items_;
};

// A toy NIC: keys from a counter, desc = a fixed cookie, every call recorded.
struct ToyNic {
  struct Call {
    const void* addr;
    size_t len;
    uint64_t access;
    int dmabuf_fd;
  };
  std::vector<Call> registrations;
  LockedLog<hmr_nic_mr> deregistrations;
  uint64_t next_key = 100;
  int fail_reg = 0;    // a negative HMR code: reg_* fails with it
  int fail_dereg = 0;
  // Non-zero: dereg takes this long (a NIC's round trip to its firmware), so that another
  // thread may look while a deregistration is under way.
  std::chrono::microseconds dereg_takes{0};
  std::atomic<int> deregs_started{0};
  std::atomic<bool> hold_dereg{false};  // dereg waits while it is set
  uint64_t key_override = 0;  // non-zero: returned as the key
  // Called from inside reg_va, to show that hmr can be re-entered from a callback.
  void (*reenter)(ToyNic&) = nullptr;
  hmr_domain* domain = nullptr;
  int reentered = 0;
  // The optional operations.
  std::vector<hmr_nic_rereg_request> reregs;
  int fail_rereg = 0;
  struct Advice {
    const void* addr;
    size_t len;
    int write;
  };
  std::vector<Advice> advice;
  int odp_registrations = 0;
};

int toy_register(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr,
                 char* reason, size_t reason_size) {
  auto& nic = *static_cast<ToyNic*>(context);
  nic.registrations.push_back({request->addr, request->len, request->access, request->dmabuf_fd});
  nic.odp_registrations += request->on_demand_paging;
  if (nic.fail_reg != 0) {
    std::snprintf(reason, reason_size, "toy NIC refuses %zu bytes at %p", request->len,
                  request->addr);
    return nic.fail_reg;
  }
  if (nic.reenter != nullptr) nic.reenter(nic);
  mr->handle = reinterpret_cast<void*>(nic.registrations.size());
  mr->desc = &nic;
  mr->key = nic.key_override != 0 ? nic.key_override : nic.next_key++;
  return 0;
}

int toy_deregister(void* context, const hmr_nic_mr* mr, char* reason, size_t reason_size) {
  auto& nic = *static_cast<ToyNic*>(context);
  nic.deregs_started.fetch_add(1, std::memory_order_release);
  while (nic.hold_dereg.load(std::memory_order_acquire)) std::this_thread::yield();
  if (nic.dereg_takes.count() != 0) std::this_thread::sleep_for(nic.dereg_takes);
  nic.deregistrations.push_back(*mr);
  if (nic.fail_dereg != 0) {
    std::snprintf(reason, reason_size, "toy NIC lost handle %p", mr->handle);
    return nic.fail_dereg;
  }
  return 0;
}

int toy_rereg(void* context, hmr_nic_mr* mr, const hmr_nic_rereg_request* request, char* reason,
              size_t reason_size) {
  auto& nic = *static_cast<ToyNic*>(context);
  nic.reregs.push_back(*request);
  if (nic.fail_rereg != 0) {
    std::snprintf(reason, reason_size, "toy NIC cannot move handle %p", mr->handle);
    return nic.fail_rereg;
  }
  mr->key = nic.next_key++;  // a new translation, a new key, as verbs gives
  return 0;
}

int toy_advise(void* context, const hmr_nic_mr*, const void* addr, size_t len, int write, char*,
               size_t) {
  static_cast<ToyNic*>(context)->advice.push_back({addr, len, write});
  return 0;
}

hmr_nic_callbacks toy_callbacks(ToyNic& nic, size_t key_size = 4) {
  hmr_nic_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  callbacks.size = sizeof callbacks;
  callbacks.context = &nic;
  callbacks.key_size = key_size;
  callbacks.reg_va = toy_register;
  callbacks.dereg = toy_deregister;
  return callbacks;
}

hmr_domain* open_callback_domain(hmr_nic_callbacks& callbacks, const char* monitor = nullptr) {
  hmr_domain_attr attr = callback_domain_attr(callbacks, HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  attr.cache_monitor = monitor;
  hmr_domain* domain = nullptr;
  EXPECT_EQ(hmr_domain_open(&attr, &domain), 0) << hmr_last_error();
  if (domain != nullptr) {
    EXPECT_EQ(attr.nic_handle, &callbacks) << "nic_handle out: the callbacks in use";
    EXPECT_EQ(attr.mr_key_size, callbacks.key_size);
  }
  return domain;
}

// A toy NIC behind a callback domain without a cache (every registration reaches the NIC),
// with the callbacks of toy_callbacks as `change` leaves them; null domain on failure.
struct ToyDomain {
  ToyNic nic;
  hmr_nic_callbacks callbacks;
  DomainPtr domain;

  explicit ToyDomain(void (*change)(hmr_nic_callbacks&) = nullptr)
      : callbacks(toy_callbacks(nic)) {
    if (change != nullptr) change(callbacks);
    domain.reset(open_callback_domain(callbacks, "disabled"));
  }
};

TEST(CallbackNic, RegistersThroughTheCallbacksAndCachesWhatTheyReturn) {
  ToyNic nic;
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  DomainPtr domain(open_callback_domain(callbacks));
  ASSERT_TRUE(domain);
  Pages buffer(4 * kPage);
  {
    MrPtr first = reg(domain.get(), buffer.data(), 2 * kPage, kRemote);
    ASSERT_TRUE(first);
    ASSERT_EQ(nic.registrations.size(), 1u);
    EXPECT_EQ(nic.registrations[0].addr, buffer.data());
    EXPECT_EQ(nic.registrations[0].len, 2 * kPage);
    EXPECT_EQ(nic.registrations[0].access, kRemote);
    EXPECT_EQ(nic.registrations[0].dmabuf_fd, -1);
    EXPECT_EQ(hmr_mr_key(first.get()), 100u);
    EXPECT_EQ(hmr_mr_desc(first.get()), &nic);
    // The same memory again, and a range inside it: the cache serves both, no callback.
    MrPtr again = reg(domain.get(), buffer.data(), 2 * kPage, kRemote);
    MrPtr inside = reg(domain.get(), buffer.data() + kPage, kPage, kRemote);
    ASSERT_TRUE(again && inside);
    EXPECT_EQ(nic.registrations.size(), 1u);
    EXPECT_EQ(hmr_mr_key(inside.get()), 100u);
    uint64_t base = 0;
    uint8_t raw[8];
    size_t raw_size = sizeof raw;
    ASSERT_HMR_OK(hmr_mr_raw_attr(inside.get(), &base, raw, &raw_size, 0));
    EXPECT_EQ(base, reinterpret_cast<uint64_t>(buffer.data() + kPage));
    EXPECT_EQ(raw_size, 4u);
  }
  EXPECT_TRUE(nic.deregistrations.empty()) << "closed MRs stay cached";
  // Unmapping the memory: the monitor drops the entry and dereg is called with what reg gave.
  buffer.unmap();
  ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
  ASSERT_EQ(nic.deregistrations.size(), 1u);
  EXPECT_EQ(nic.deregistrations[0].key, 100u);
  EXPECT_EQ(nic.deregistrations[0].handle, reinterpret_cast<void*>(1));
  EXPECT_EQ(nic.deregistrations[0].desc, &nic);
}

// Until `count` deregistrations have begun (on whatever thread), for at most 10 s.
bool wait_for_deregs(const ToyNic& nic, int count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nic.deregs_started.load(std::memory_order_acquire) < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// hmr_domain_cache_flush promises that nothing unused is registered when it returns.  Under
// userfaultfd the registration of unmapped memory is dropped on hmr's own reaper thread (the
// monitor's thread may not call the NIC).  A flush called while that thread is inside the NIC's
// dereg must wait for it to end, not return with the range still registered.  It did return:
// a ThreadSanitizer run of the test above caught the read of what the dereg callback wrote
// with nothing ordering the two.
TEST(CallbackNic, AFlushWaitsForADeregistrationAnotherThreadIsMaking) {
  ToyNic nic;
  nic.dereg_takes = std::chrono::microseconds(300);
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  DomainPtr domain(open_callback_domain(callbacks, "userfaultfd"));
  ASSERT_TRUE(domain);
  for (int round = 1; round <= 20; ++round) {
    Pages buffer(kPage);
    MrPtr mr = reg(domain.get(), buffer.data(), kPage, kRemote);
    ASSERT_TRUE(mr);
    mr.reset();
    buffer.unmap();
    // The reaper thread is in the NIC with this round's range before the flush is called.
    ASSERT_TRUE(wait_for_deregs(nic, round)) << "round " << round << ": no deregistration began";
    ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
    ASSERT_EQ(nic.deregistrations.size(), static_cast<size_t>(round))
        << "round " << round << ": the flush returned before the unmapped range's deregistration ended";
  }
}

// "No hmr lock is held during a callback" (docs/semantics.md), also when an invalidation on
// the application's thread deregisters: hmr_mem_invalidate used to call dereg while holding
// the monitor's lock, which every domain open, domain close and device registration takes.
// A dereg that waits for the application's own lock then deadlocked with a thread that held
// that lock while it opened a domain (found by a review).  The invalidating thread's dereg
// waits here, on a flag, until the main thread has opened and closed a second domain.
TEST(CallbackNic, ADeregistrationAnInvalidationMakesHoldsNoHmrLock) {
  ToyNic nic;
  nic.hold_dereg.store(true);
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  DomainPtr domain(open_callback_domain(callbacks));
  ASSERT_TRUE(domain);
  Pages buffer(kPage);
  ASSERT_TRUE(reg(domain.get(), buffer.data(), kPage, kRemote));  // closed at once: cached, idle
  std::promise<int> invalidated;
  std::future<int> result = invalidated.get_future();
  std::thread invalidator([&] {
    invalidated.set_value(hmr_mem_invalidate(nullptr, buffer.data(), kPage));
  });
  ASSERT_TRUE(wait_for_deregs(nic, 1)) << "the invalidation never reached dereg";
  // The invalidating thread is inside dereg now.  Opening and closing another domain must
  // not wait for it.
  std::promise<int> opened;
  std::future<int> open_result = opened.get_future();
  std::thread opener([&] {
    ToyNic other_nic;
    hmr_nic_callbacks other_callbacks = toy_callbacks(other_nic);
    hmr_domain* other = open_callback_domain(other_callbacks);
    opened.set_value(other != nullptr ? hmr_domain_close(other) : -1);
  });
  const bool open_returned =
      open_result.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  nic.hold_dereg.store(false);  // let the deregistration finish either way
  opener.join();
  invalidator.join();
  EXPECT_TRUE(open_returned) << "hmr_domain_open waited for a callback NIC's dereg";
  EXPECT_EQ(open_result.get(), 0);
  EXPECT_EQ(result.get(), 0) << hmr_last_error();
  EXPECT_EQ(nic.deregistrations.size(), 1u) << "hmr_mem_invalidate returned before its dereg";
}

// Domains X and Y, each with dead entries to deregister: thread E is inside Y's dereg (an
// invalidation's second half) when this thread's invalidation reaches X's dereg, which closes
// Y.  The close must wait until E is out of Y's NIC: it returned at once, and E went on in a
// freed cache (found by a review: a thread inside any deregistration skipped every wait).
struct ClosingNics {
  std::atomic<bool> e_inside{false};
  std::atomic<bool> closing{false};
  std::atomic<bool> y_closed{false};
  std::atomic<bool> closed_while_inside{false};
  int close_rc = -1;
  hmr_domain* y = nullptr;
  void reset() {  // as new: the NICs need a global (no context), and --gtest_repeat reruns
    e_inside = closing = y_closed = closed_while_inside = false;
    close_rc = -1;
    y = nullptr;
  }
};
ClosingNics closing_nics;
int closing_reg(void*, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
  static std::atomic<uint64_t> next_key{1};
  mr->handle = nullptr;
  mr->desc = nullptr;
  mr->key = next_key.fetch_add(1);
  return 0;
}
// Callbacks keyed by closing_reg's counter, with `dereg`: for the tests whose NICs keep their
// state in globals (a dereg that closes domains needs no context).
hmr_nic_callbacks counter_key_callbacks(decltype(hmr_nic_callbacks::dereg) dereg) {
  ToyNic unused;
  hmr_nic_callbacks callbacks = toy_callbacks(unused);
  callbacks.context = nullptr;
  callbacks.reg_va = closing_reg;
  callbacks.dereg = dereg;
  return callbacks;
}
int dereg_of_y(void*, const hmr_nic_mr*, char*, size_t) {
  ClosingNics& nics = closing_nics;
  nics.e_inside.store(true);
  // Until X's dereg closes Y, and then a while longer: a close that does not wait for this
  // dereg returns meanwhile.  (A bound, not a measurement: a close that waits makes it run
  // out, and the test passes the same.)
  while (!nics.closing.load()) std::this_thread::yield();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!nics.y_closed.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  nics.closed_while_inside.store(nics.y_closed.load());
  return 0;
}
int dereg_of_x(void*, const hmr_nic_mr*, char*, size_t) {
  ClosingNics& nics = closing_nics;
  if (nics.e_inside.load() && !nics.closing.exchange(true)) {
    nics.close_rc = hmr_domain_close(nics.y);
    nics.y_closed.store(true);
  }
  return 0;
}

TEST(CallbackNic, ADomainClosedInADeregWaitsForAnotherThreadInItsNic) {
  closing_nics.reset();
  hmr_nic_callbacks x_callbacks = counter_key_callbacks(dereg_of_x);
  hmr_nic_callbacks y_callbacks = counter_key_callbacks(dereg_of_y);
  DomainPtr x(open_callback_domain(x_callbacks));
  closing_nics.y = open_callback_domain(y_callbacks);
  ASSERT_TRUE(x && closing_nics.y);
  Pages a(kPage);
  Pages b(kPage);
  ASSERT_TRUE(reg(x.get(), a.data(), kPage, kRemote));  // closed at once: cached, idle
  ASSERT_TRUE(reg(closing_nics.y, b.data(), kPage, kRemote));
  std::thread e([&] { EXPECT_EQ(hmr_mem_invalidate(nullptr, b.data(), kPage), 0); });
  while (!closing_nics.e_inside.load()) std::this_thread::yield();
  EXPECT_EQ(hmr_mem_invalidate(nullptr, a.data(), kPage), 0) << hmr_last_error();
  e.join();
  EXPECT_TRUE(closing_nics.y_closed.load()) << "X's dereg did not close Y";
  EXPECT_EQ(closing_nics.close_rc, 0);
  EXPECT_FALSE(closing_nics.closed_while_inside.load())
      << "hmr_domain_close(Y) returned while another thread was inside Y's dereg";
}

// A dereg callback that closes its own domain: the cache would be freed under the
// deregistration that is running (a crash), or on hmr's reaper thread the close waited for
// itself for ever (found by a review).  It is refused with -HMR_EBUSY and the reason.
struct SelfClosingNic {
  hmr_domain* domain = nullptr;
  int close_rc = 1;
  int deregs = 0;
};
SelfClosingNic self_closing;
int self_closing_dereg(void*, const hmr_nic_mr*, char*, size_t) {
  if (self_closing.deregs++ == 0) self_closing.close_rc = hmr_domain_close(self_closing.domain);
  return 0;
}

TEST(CallbackNic, ADomainCannotBeClosedFromItsOwnDereg) {
  self_closing = SelfClosingNic{};  // as new under --gtest_repeat
  hmr_nic_callbacks callbacks = counter_key_callbacks(self_closing_dereg);
  DomainPtr domain(open_callback_domain(callbacks));
  ASSERT_TRUE(domain);
  self_closing.domain = domain.get();
  Pages pages(4 * kPage);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reg(domain.get(), pages.data() + i * kPage, kPage, kRemote));  // cached, idle
  }
  EXPECT_EQ(hmr_mem_invalidate(nullptr, pages.data(), 4 * kPage), 0) << hmr_last_error();
  EXPECT_EQ(self_closing.deregs, 4);
  EXPECT_EQ(self_closing.close_rc, -HMR_EBUSY);
}

// Memory hooks run in whatever thread unmaps, small stacks included: a notification there must
// take little stack.  It took 48 KiB (two arrays of one entry per possible sink) in every
// munmap of a process with a cached registration, so a thread with a 64 KiB stack that had used
// 12 KiB died in munmap (found by a review).
struct SmallStackUnmap {
  void* buffer = nullptr;
  size_t len = 0;
  int rc = -1;
};
void* unmap_deep_in_a_small_stack(void* argument) {
  auto* unmap = static_cast<SmallStackUnmap*>(argument);
  volatile char used[20 * 1024];  // part of the stack, as the thread's own frames might be
  used[0] = 1;
  used[sizeof used - 1] = 1;
  unmap->rc = munmap(unmap->buffer, unmap->len) + used[0] - 1;
  return nullptr;
}

TEST(CallbackNic, AMemoryHookInAThreadWithASmallStackReturns) {
  ToyNic nic;
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  hmr_domain_attr hooked = callback_domain_attr(callbacks, HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  hooked.cache_monitor = "memhooks";
  hmr_domain* raw = nullptr;
  if (hmr_domain_open(&hooked, &raw) != 0) {
    GTEST_SKIP() << "memhooks cannot start in this process: " << hmr_last_error();
  }
  DomainPtr domain(raw);
  void* buffer = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
  ASSERT_NE(buffer, MAP_FAILED);
  ASSERT_TRUE(reg(domain.get(), buffer, 4 * kPage, kRemote));  // cached, idle: watched
  SmallStackUnmap unmap{buffer, 4 * kPage};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 64 * 1024), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, unmap_deep_in_a_small_stack, &unmap), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(unmap.rc, 0);
  ASSERT_HMR_OK(hmr_domain_cache_flush(domain.get()));
  EXPECT_EQ(nic.deregistrations.size(), 1u) << "the unmapped range is still registered";
}

// A thread that was deregistering a domain's dead entries when another thread called fork()
// does not exist in the child, and never says it is done: the child's calls on that domain
// must not wait for it.  (Its statistics and close waited for ever, when an inherited domain
// still served the child; now the child is refused at once, HMR_EBADF, and closes its copy.)
// Domain `first`'s dereg holds hmr's reaper thread, so that the application's own flush of
// `second` takes that domain's dead entry; the fork comes while that flush is inside
// `second`'s dereg.
TEST(CallbackNic, AForkedChildClosesWhileItsParentDeregisters) {
  ToyNic first_nic, second_nic;
  hmr_nic_callbacks first_callbacks = toy_callbacks(first_nic);
  hmr_nic_callbacks second_callbacks = toy_callbacks(second_nic);
  DomainPtr first(open_callback_domain(first_callbacks, "userfaultfd"));
  DomainPtr second(open_callback_domain(second_callbacks, "userfaultfd"));
  ASSERT_TRUE(first && second);
  Pages first_buffer(kPage), second_buffer(kPage);
  ASSERT_TRUE(MrPtr(reg(first.get(), first_buffer.data(), kPage, kRemote)));
  ASSERT_TRUE(MrPtr(reg(second.get(), second_buffer.data(), kPage, kRemote)));
  first_nic.hold_dereg.store(true);
  second_nic.hold_dereg.store(true);
  first_buffer.unmap();
  ASSERT_TRUE(wait_for_deregs(first_nic, 1)) << "the reaper thread never deregistered";
  second_buffer.unmap();  // its dead entry waits: the reaper is held in the first domain
  std::thread flusher([&] { EXPECT_EQ(hmr_domain_cache_flush(second.get()), 0) << hmr_last_error(); });
  ASSERT_TRUE(wait_for_deregs(second_nic, 1)) << "the flush never deregistered";
  first_nic.hold_dereg.store(false);  // (fork() waits for the reaper to finish its batch)
  const int child = run_forked([&] {
    second_nic.hold_dereg.store(false);  // the child's own copy
    hmr_domain_stats stats{};
    stats.size = sizeof stats;
    if (hmr_domain_query_stats(second.get(), &stats) != -HMR_EBADF) return 2;
    if (hmr_domain_close(second.release()) != 0) return 3;
    return 0;
  });
  second_nic.hold_dereg.store(false);
  flusher.join();
  EXPECT_EQ(child, 0) << "the child's statistics were not refused (2), its close failed (3), "
                         "or it hung until its alarm (-1)";
}

TEST(CallbackNic, FailuresReachTheCallerWithTheCallbacksReason) {
  ToyNic nic;
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  DomainPtr domain(open_callback_domain(callbacks, "disabled"));
  ASSERT_TRUE(domain);
  Pages buffer(kPage);
  nic.fail_reg = -HMR_ENOMEM;
  hmr_mr* mr = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), buffer.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr),
            -HMR_ENOMEM);
  EXPECT_EQ(mr, nullptr);
  EXPECT_NE(std::strstr(hmr_last_error(), "toy NIC refuses 4096 bytes"), nullptr)
      << hmr_last_error();
  EXPECT_NE(std::strstr(hmr_last_error(), "reg_va"), nullptr) << hmr_last_error();

  // A callback returning something that is not an HMR code.
  nic.fail_reg = 5;
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), buffer.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr),
                   HMR_EIO);
  EXPECT_NE(std::strstr(hmr_last_error(), "returned 5"), nullptr) << hmr_last_error();
  EXPECT_EQ(mr, nullptr);
  nic.fail_reg = 0;

  // A key wider than key_size: refused, and the registration given back to the NIC.
  nic.key_override = 0x1'0000'0000ULL;
  const size_t dereg_before = nic.deregistrations.size();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), buffer.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr),
                   HMR_EINVAL);
  EXPECT_EQ(nic.deregistrations.size(), dereg_before + 1);
  nic.key_override = 0;

  // dereg failing: hmr_mr_close says so (uncached domain: close deregisters now).
  ASSERT_HMR_OK(hmr_mr_reg(domain.get(), buffer.data(), kPage, kRemote, 0, 0, 0, &mr, nullptr));
  nic.fail_dereg = -HMR_EIO;
  const int rc = hmr_mr_close(mr);
  nic.fail_dereg = 0;
  if (rc != 0) {
    EXPECT_EQ(rc, -HMR_EIO);
    EXPECT_NE(std::strstr(hmr_last_error(), "toy NIC lost handle"), nullptr) << hmr_last_error();
  } else {
    ADD_FAILURE() << "a failed dereg callback was not reported by hmr_mr_close";
  }
}

// From inside reg_va: query the domain, register (a miss: reg_va again, nested) and close
// another buffer in the same domain.  A lock held across the callback would deadlock here.
Pages* g_other = nullptr;
void reenter_same_domain(ToyNic& nic) {
  if (nic.reentered++ != 0) return;  // only from the outer registration
  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(nic.domain, &stats), 0) << hmr_last_error();
  hmr_mr* inner = nullptr;
  EXPECT_EQ(hmr_mr_reg(nic.domain, g_other->data(), kPage, kRemote, 0, 0, 0, &inner, nullptr), 0)
      << hmr_last_error();
  if (inner != nullptr) {
    EXPECT_EQ(hmr_mr_close(inner), 0) << hmr_last_error();
  }
}

// A callback domain over `callbacks` whose cache watches memory with `monitor`; null (with
// hmr_last_error) when it cannot open.
hmr_domain* open_monitored_callback_domain(hmr_nic_callbacks& callbacks, const char* monitor) {
  hmr_domain_attr attr = callback_domain_attr(callbacks, HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  attr.cache_monitor = monitor;
  hmr_domain* raw = nullptr;
  return hmr_domain_open(&attr, &raw) == 0 ? raw : nullptr;
}

TEST(CallbackNic, CallbacksMayCallHmr) {
  for (const char* monitor : {"disabled", "userfaultfd", "memhooks"}) {
    SCOPED_TRACE(monitor);
    ToyNic nic;
    hmr_nic_callbacks callbacks = toy_callbacks(nic);
    hmr_domain* raw = open_monitored_callback_domain(callbacks, monitor);
    if (raw == nullptr) {
      // memhooks does not start everywhere (ThreadSanitizer, a process where UCX hooked first).
      ASSERT_STREQ(monitor, "memhooks") << hmr_last_error();
      continue;
    }
    DomainPtr domain(raw);
    Pages mine(kPage);
    Pages other(kPage);
    g_other = &other;
    nic.domain = domain.get();
    nic.reenter = reenter_same_domain;
    MrPtr mr = reg(domain.get(), mine.data(), kPage, kRemote);
    ASSERT_TRUE(mr);
    EXPECT_EQ(nic.reentered, 2) << "the nested registration called reg_va too";
    EXPECT_EQ(nic.registrations.size(), 2u);
    g_other = nullptr;
  }
}

// From inside reg_va of a first registration of cached host memory: bind an event queue.  The
// MR being registered is open from before the NIC is called, whichever handle it becomes, so
// binding must be refused as it is with any MR open.
hmr_eq* g_queue = nullptr;
int g_bind_result = 1;
void bind_queue_meanwhile(ToyNic& nic) {
  if (nic.reentered++ != 0) return;
  g_bind_result = hmr_domain_bind(nic.domain, hmr_eq_fid(g_queue), HMR_REG_MR);
}

TEST(CallbackNic, AnEventQueueCannotBeBoundWhileAFirstRegistrationIsInTheNic) {
  for (const char* monitor : {"userfaultfd", "memhooks"}) {
    SCOPED_TRACE(monitor);
    ToyNic nic;
    hmr_nic_callbacks callbacks = toy_callbacks(nic);
    hmr_domain* raw = open_monitored_callback_domain(callbacks, monitor);
    if (raw == nullptr) continue;  // not every monitor starts everywhere
    DomainPtr domain(raw);
    hmr_eq* queue = nullptr;
    ASSERT_HMR_OK(hmr_eq_open(nullptr, &queue));
    EqPtr queue_owner(queue);
    g_queue = queue;
    g_bind_result = 1;
    nic.domain = domain.get();
    nic.reenter = bind_queue_meanwhile;
    Pages pages(kPage);
    MrPtr mr = reg(domain.get(), pages.data(), kPage, kRemote);
    ASSERT_TRUE(mr);
    EXPECT_EQ(nic.reentered, 1);
    EXPECT_EQ(g_bind_result, -HMR_EBUSY) << "bound while an MR was being registered";
    mr.reset();
    nic.reenter = nullptr;
    EXPECT_EQ(hmr_domain_bind(domain.get(), hmr_eq_fid(queue), HMR_REG_MR), 0)
        << "with nothing open, binding works (and a refused bind left nothing behind)";
    g_queue = nullptr;
    domain.reset();  // before the queue it is bound to
  }
}

TEST(CallbackNic, DmabufRegistrationsGoToRegDmabuf) {
  ToyNic nic;
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  callbacks.caps = HMR_NIC_CB_DMABUF;
  callbacks.reg_dmabuf = toy_register;
  DomainPtr domain(open_callback_domain(callbacks));
  ASSERT_TRUE(domain);
  hmr_md_attr md;
  std::memset(&md, 0, sizeof md);
  md.size = sizeof md;
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &md));
  EXPECT_NE(md.flags & HMR_MD_FLAG_DMABUF, 0u);
  EXPECT_EQ(md.flags & HMR_MD_FLAG_PEER_DIRECT, 0u);

  // The caller's own dma-buf (any fd stands in: the toy NIC only records it).
  const int fd = memfd_create("callback-nic-test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 2 * kPage), 0);
  hmr_mr_dmabuf dmabuf{fd, kPage, kPage, reinterpret_cast<void*>(0x10000)};
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.dmabuf = &dmabuf;
  attr.access = kRemote;
  attr.iface = HMR_HMEM_SYSTEM;
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_regattr(domain.get(), &attr, HMR_MR_DMABUF, &mr));
  ASSERT_EQ(nic.registrations.size(), 1u);
  EXPECT_EQ(nic.registrations[0].dmabuf_fd, fd);
  EXPECT_EQ(nic.registrations[0].addr, reinterpret_cast<void*>(0x10000));
  ASSERT_HMR_OK(hmr_mr_close(mr));
  close(fd);
}

TEST(CallbackNic, BadCallbackStructsAreRefused) {
  ToyNic nic;
  hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  attr.nic = "callback";
  hmr_domain* domain = reinterpret_cast<hmr_domain*>(0x1);
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);  // no nic_handle

  auto expect_refused = [&](hmr_nic_callbacks callbacks, int code, const char* what) {
    attr.nic_handle = &callbacks;
    EXPECT_EQ(hmr_domain_open(&attr, &domain), -code) << what;
    EXPECT_STRNE(hmr_last_error(), "") << what;
    attr.nic_handle = nullptr;
  };
  hmr_nic_callbacks good = toy_callbacks(nic);
  hmr_nic_callbacks bad = good;
  bad.size = 0;
  expect_refused(bad, HMR_EINVAL, "size 0");
  bad = good;
  bad.reg_va = nullptr;
  expect_refused(bad, HMR_EINVAL, "no reg_va");
  bad = good;
  bad.dereg = nullptr;
  expect_refused(bad, HMR_EINVAL, "no dereg");
  bad = good;
  bad.key_size = 0;
  expect_refused(bad, HMR_EINVAL, "key_size 0");
  bad = good;
  bad.key_size = 9;
  expect_refused(bad, HMR_EINVAL, "key_size 9");
  bad = good;
  bad.caps = 1ULL << 40;
  expect_refused(bad, HMR_EBADFLAGS, "unknown caps");
  bad = good;
  bad.caps = HMR_NIC_CB_DMABUF;
  expect_refused(bad, HMR_EINVAL, "DMABUF without reg_dmabuf");
  bad = good;
  bad.reg_dmabuf = toy_register;
  expect_refused(bad, HMR_EINVAL, "reg_dmabuf without DMABUF");
  bad = good;
  bad.required_mr_mode = HMR_MR_RAW;
  expect_refused(bad, HMR_ENODATA, "a mode the application does not support");
  bad = good;
  bad.size = offsetof(hmr_nic_callbacks, dereg);
  expect_refused(bad, HMR_EINVAL, "a size that cuts off a required callback");
  bad = good;
  bad.caps = HMR_NIC_CB_IMPLICIT_ODP;
  expect_refused(bad, HMR_EINVAL, "IMPLICIT_ODP without ODP");
  bad = good;
  bad.advise = toy_advise;
  expect_refused(bad, HMR_EINVAL, "advise without ODP (advice is for ODP registrations)");
  {
    // A garbage size, with the struct at the end of the last readable page: refused without a
    // read past it (it read up to `size`, and crashed).
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    auto* pages = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(pages, MAP_FAILED);
    ASSERT_EQ(mprotect(pages + page, page, PROT_NONE), 0);
    auto* at_the_edge = reinterpret_cast<hmr_nic_callbacks*>(pages + page - sizeof(hmr_nic_callbacks));
    *at_the_edge = good;
    at_the_edge->size = 2 * page;
    attr.nic_handle = at_the_edge;
    EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);
    EXPECT_NE(std::string(hmr_last_error()).find("size"), std::string::npos) << hmr_last_error();
    attr.nic_handle = nullptr;
    munmap(pages, 2 * page);
  }
  attr.nic_handle = &good;
  attr.nic_options = "key_size=4";
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, &domain), HMR_EINVAL);  // options belong to the struct
  EXPECT_EQ(domain, reinterpret_cast<hmr_domain*>(0x1)) << "outputs are written only on success";
  EXPECT_TRUE(nic.registrations.empty());
}

}  // namespace

// ---------------------------------------------------------------- optional operations ----

TEST(CallbackNic, ReregGoesToTheRereregCallbackWithTheNewRangeAndKey) {
  ToyDomain toy([](hmr_nic_callbacks& callbacks) { callbacks.rereg = toy_rereg; });
  ASSERT_TRUE(toy.domain);
  EXPECT_EQ(hmr_md_query_op(toy.domain.get(), HMR_MD_OP_REREG, nullptr, 0), 1);
  Pages first(kPage), second(kPage);
  MrPtr mr = reg(toy.domain.get(), first.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  EXPECT_EQ(hmr_mr_key(mr.get()), 100u);

  iovec moved = {second.data(), kPage};
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.mr_iov = &moved;
  attr.iov_count = 1;
  attr.access = HMR_REMOTE_READ;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION | HMR_MR_REREG_ACCESS, &attr));
  ASSERT_EQ(toy.nic.reregs.size(), 1u);
  EXPECT_EQ(toy.nic.reregs[0].addr, second.data());
  EXPECT_EQ(toy.nic.reregs[0].len, kPage);
  EXPECT_EQ(toy.nic.reregs[0].has_access, 1);
  EXPECT_EQ(toy.nic.reregs[0].access, HMR_REMOTE_READ);
  EXPECT_EQ(toy.nic.reregs[0].nic_pd, nullptr);
  EXPECT_EQ(hmr_mr_key(mr.get()), 101u) << "the key the callback wrote back";
  uint64_t base = 0;
  uint8_t raw[8];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, reinterpret_cast<uint64_t>(second.data()));

  // A failure carries the callback's reason, and the MR is then only closable (the contract
  // of the rereg callback); close still deregisters it.
  toy.nic.fail_rereg = -HMR_EIO;
  attr.access = kRemote;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EIO);
  EXPECT_NE(std::strstr(hmr_last_error(), "toy NIC cannot move"), nullptr) << hmr_last_error();
  EXPECT_EQ(hmr_mr_key(mr.get()), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(mr.get()), nullptr);
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  const size_t before = toy.nic.deregistrations.size();
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  EXPECT_EQ(toy.nic.deregistrations.size(), before + 1);
}

// A zero-byte MR at NULL (allowed: an exchange of every rank's keys may include one) is
// VA-addressed all the same: moved by rereg, a peer addresses it by its new address.  The
// adapter once told "VA-addressed" from "0-based" by a base of 0, and kept 0.
TEST(CallbackNic, AZeroByteMrAtNullMovedByReregIsAddressedByItsNewAddress) {
  ToyDomain toy([](hmr_nic_callbacks& callbacks) { callbacks.rereg = toy_rereg; });
  ASSERT_TRUE(toy.domain);
  MrPtr mr = reg(toy.domain.get(), nullptr, 0, kRemote);
  ASSERT_TRUE(mr) << hmr_last_error();
  Pages moved_to(kPage);
  iovec moved = {moved_to.data(), kPage};
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.mr_iov = &moved;
  attr.iov_count = 1;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION, &attr));
  uint64_t base = 1;
  uint8_t raw[8];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, reinterpret_cast<uint64_t>(moved_to.data()));
}

// A cached MR moved to another protection domain goes through a private copy: when the NIC
// refuses to move the copy, the MR never left the shared registration, and the reason says so
// rather than pass on what the NIC said of the copy ("only closable") as if of the MR (found
// by a review).  The MR keeps its key and is still a cached registration.
TEST(CallbackNic, AFailedMoveOfACachedMrLeavesItAsItWasAndSaysSo) {
  ToyNic nic;
  hmr_nic_callbacks callbacks = toy_callbacks(nic);
  callbacks.rereg = toy_rereg;
  DomainPtr domain(open_callback_domain(callbacks));
  ASSERT_TRUE(domain);
  Pages buffer(kPage);
  MrPtr mr = reg(domain.get(), buffer.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  nic.fail_rereg = -HMR_EIO;
  int some_pd = 0;
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.nic_pd = &some_pd;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_PD, &attr), HMR_EIO);
  EXPECT_NE(std::strstr(hmr_last_error(), "toy NIC cannot move"), nullptr) << hmr_last_error();
  EXPECT_NE(std::strstr(hmr_last_error(), "this MR is as it was"), nullptr) << hmr_last_error();
  EXPECT_EQ(hmr_mr_key(mr.get()), key);
  hmr_mr_info info{};
  info.size = sizeof info;
  ASSERT_HMR_OK(hmr_mr_query(mr.get(), &info));
  EXPECT_EQ(info.cached, 1);
}

int toy_rereg_to_a_wide_key(void* context, hmr_nic_mr* mr, const hmr_nic_rereg_request*, char*,
                            size_t) {
  auto& nic = *static_cast<ToyNic*>(context);
  mr->handle = reinterpret_cast<void*>(0xb);  // the callback made a new registration...
  mr->key = uint64_t{1} << 40;                // ...whose key does not fit key_size 4
  nic.reregs.push_back({});
  return 0;
}

TEST(CallbackNic, ARereggedKeyHmrRefusesStillGoesBackToDereg) {
  ToyDomain toy([](hmr_nic_callbacks& callbacks) { callbacks.rereg = toy_rereg_to_a_wide_key; });
  ASSERT_TRUE(toy.domain);
  Pages buffer(kPage);
  MrPtr mr = reg(toy.domain.get(), buffer.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_EIO);
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_EQ(toy.nic.deregistrations.size(), 1u);
  EXPECT_EQ(toy.nic.deregistrations[0].handle, reinterpret_cast<void*>(0xb))
      << "dereg must get the registration the callback made, not the one it replaced";
}

TEST(CallbackNic, WithoutOptionalCallbacksTheOperationsAreEnosys) {
  ToyDomain toy;
  ASSERT_TRUE(toy.domain);
  for (int op = 0; op < HMR_MD_OP_COUNT; ++op) {
    char reason[160] = {};
    EXPECT_EQ(
        hmr_md_query_op(toy.domain.get(), static_cast<hmr_md_op>(op), reason, sizeof reason), 0);
    EXPECT_NE(std::strstr(reason, "callback NIC"), nullptr) << reason;
  }
  Pages buffer(kPage);
  MrPtr mr = reg(toy.domain.get(), buffer.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_ENOSYS);
  EXPECT_NE(std::strstr(hmr_last_error(), "rereg is NULL"), nullptr) << hmr_last_error();
  hmr_mr* odp = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_reg(toy.domain.get(), buffer.data(), kPage, kRemote, 0, 0, HMR_MR_ODP,
                              &odp, nullptr),
                   HMR_ENOSYS);
  EXPECT_EQ(hmr_mr_key(mr.get()), 100u) << "the MR is untouched";
}

TEST(CallbackNic, OdpRegistrationsAndAdviceReachTheCallbacks) {
  ToyDomain toy([](hmr_nic_callbacks& callbacks) {
    callbacks.caps = HMR_NIC_CB_ODP;
    callbacks.advise = toy_advise;
  });
  ASSERT_TRUE(toy.domain);
  EXPECT_EQ(hmr_md_query_op(toy.domain.get(), HMR_MD_OP_ODP, nullptr, 0), 1);
  EXPECT_EQ(hmr_md_query_op(toy.domain.get(), HMR_MD_OP_ADVISE, nullptr, 0), 1);
  EXPECT_EQ(hmr_md_query_op(toy.domain.get(), HMR_MD_OP_IMPLICIT_ODP, nullptr, 0), 0);
  Pages buffer(4 * kPage);
  hmr_mr* raw = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(toy.domain.get(), buffer.data(), 4 * kPage, HMR_REMOTE_WRITE, 0, 0,
                           HMR_MR_ODP, &raw, nullptr));
  MrPtr odp(raw);
  EXPECT_EQ(toy.nic.odp_registrations, 1);
  ASSERT_HMR_OK(hmr_mem_advise(odp.get(), buffer.data() + kPage, 2 * kPage, HMR_MADV_WILLNEED));
  ASSERT_EQ(toy.nic.advice.size(), 1u);
  EXPECT_EQ(toy.nic.advice[0].addr, buffer.data() + kPage);
  EXPECT_EQ(toy.nic.advice[0].len, 2 * kPage);
  EXPECT_EQ(toy.nic.advice[0].write, 1) << "the MR is written remotely";
  // A pinned MR has nothing to prefetch: the callback is not asked.
  MrPtr pinned = reg(toy.domain.get(), buffer.data(), kPage, kRemote);
  ASSERT_TRUE(pinned);
  ASSERT_HMR_OK(hmr_mem_advise(pinned.get(), buffer.data(), kPage, HMR_MADV_WILLNEED));
  EXPECT_EQ(toy.nic.advice.size(), 1u);
  EXPECT_EQ(toy.nic.odp_registrations, 1);
}

TEST(CallbackNic, StructsOfTheFirstVersionStillOpen) {
  // A caller built before rereg and advise existed passes the shorter struct.
  ToyDomain toy([](hmr_nic_callbacks& callbacks) {
    callbacks.size = offsetof(hmr_nic_callbacks, rereg);
    callbacks.rereg = toy_rereg;  // beyond its size: must not be read
  });
  ASSERT_TRUE(toy.domain);
  EXPECT_EQ(hmr_md_query_op(toy.domain.get(), HMR_MD_OP_REREG, nullptr, 0), 0);
}
