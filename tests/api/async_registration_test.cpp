// Asynchronous registration: a domain bound to an event queue with HMR_REG_MR completes every
// registration through HMR_MR_COMPLETE events (docs/semantics.md, "Asynchronous registration").
// Every wait is bounded by an event-queue timeout or a deadline; nothing sleeps.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using namespace hmr_test;  // owners (DomainPtr, MrPtr, ...) and reg/open_ep/open_cntr

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr int kTimeoutMs = 5000;  // a bound on a wait for an event, never a delay

// An event queue and a domain bound to it.  The domain is declared after the queue, so it
// is closed first (a queue cannot close while a domain is bound to it).
struct AsyncDomain {
  EqPtr eq;
  DomainPtr domain;
  explicit operator bool() const { return eq && domain; }
};
AsyncDomain open_async_domain(uint64_t app_mode = 0, const char* options = nullptr) {
  AsyncDomain async;
  hmr_eq* eq = nullptr;
  EXPECT_EQ(hmr_eq_open(nullptr, &eq), 0) << hmr_last_error();
  async.eq.reset(eq);
  async.domain.reset(open_sim_domain(app_mode, options));
  if (async) {
    EXPECT_EQ(hmr_domain_bind(async.domain.get(), hmr_eq_fid(eq), HMR_REG_MR), 0)
        << hmr_last_error();
  }
  return async;
}

struct hmr_eq_entry empty_entry() {
  struct hmr_eq_entry entry;
  std::memset(&entry, 0, sizeof entry);
  return entry;
}

struct hmr_domain_stats stats_of(hmr_domain* domain) {
  struct hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_EQ(hmr_domain_query_stats(domain, &stats), 0) << hmr_last_error();
  return stats;
}

// Expects the queue to be empty now: no completion and no error entry.
void expect_no_event(hmr_eq* eq) {
  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  const int rc = hmr_eq_read(eq, &event, &entry, 0);
  EXPECT_EQ(rc, -HMR_EAGAIN) << "unexpected event " << event << " for fid " << entry.fid
                             << " context " << entry.context << ": " << hmr_last_error();
}

TEST(AsyncRegistration, CompletesWithFidAndContext) {
  Pages pages(kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  int marker = 0;
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 5, 0, &mr,
                           &marker));
  ASSERT_NE(mr, nullptr) << "*mr must be written before the registration completes";
  MrPtr owned(mr);

  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  ASSERT_EQ(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), 1) << hmr_last_error();
  EXPECT_EQ(event, static_cast<uint32_t>(HMR_MR_COMPLETE));
  EXPECT_EQ(entry.fid, reinterpret_cast<hmr_fid*>(mr));
  EXPECT_EQ(entry.context, &marker);

  // Completed: the key and descriptor are available and a peer can use the MR.
  EXPECT_EQ(hmr_mr_key(mr), 5u);
  EXPECT_NE(hmr_mr_desc(mr), nullptr);
  EpPtr target_ep;
  EpPtr initiator_ep;
  {
    hmr_ep* ep = nullptr;
    ASSERT_HMR_OK(hmr_ep_open(async.domain.get(), nullptr, &ep));
    target_ep.reset(ep);
    ASSERT_HMR_OK(hmr_ep_open(async.domain.get(), nullptr, &ep));
    initiator_ep.reset(ep);
  }
  ASSERT_HMR_OK(hmr_ep_connect(initiator_ep.get(), target_ep.get()));
  const uint64_t value = 0x5150;
  ASSERT_HMR_OK(hmr_ep_write(initiator_ep.get(), &value, sizeof value, nullptr, 0, 5));
  EXPECT_EQ(std::memcmp(pages.data(), &value, sizeof value), 0);
  initiator_ep.reset();

  expect_no_event(async.eq.get());
  event = 0;
  EXPECT_HMR_ERROR(hmr_eq_sread(async.eq.get(), &event, &entry, 1, 0), HMR_ETIMEDOUT);
  EXPECT_EQ(stats_of(async.domain.get()).registrations, 1u);
}

TEST(AsyncRegistration, ManyRegistrationsEachCompleteOnce) {
  constexpr size_t kCount = 64;
  Pages pages(kCount * kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  std::vector<int> contexts(kCount);
  std::vector<MrPtr> mrs(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    hmr_mr* mr = nullptr;
    ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data() + i * kPage, kPage, kRemote, 0,
                             1000 + i, 0, &mr, &contexts[i]));
    ASSERT_NE(mr, nullptr);
    mrs[i].reset(mr);
  }

  std::vector<int> seen(kCount, 0);
  for (size_t n = 0; n < kCount; ++n) {
    uint32_t event = 0;
    struct hmr_eq_entry entry = empty_entry();
    ASSERT_EQ(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), 1)
        << "after " << n << " events: " << hmr_last_error();
    ASSERT_EQ(event, static_cast<uint32_t>(HMR_MR_COMPLETE));
    const int* context = static_cast<const int*>(entry.context);
    ASSERT_TRUE(context >= contexts.data() && context < contexts.data() + kCount)
        << "unknown context " << entry.context;
    const size_t index = static_cast<size_t>(context - contexts.data());
    ++seen[index];
    EXPECT_EQ(entry.fid, reinterpret_cast<hmr_fid*>(mrs[index].get())) << index;
    EXPECT_EQ(hmr_mr_key(mrs[index].get()), 1000 + index);
  }
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(seen[i], 1) << "context " << i;
  expect_no_event(async.eq.get());

  struct hmr_domain_stats stats = stats_of(async.domain.get());
  EXPECT_EQ(stats.registrations, kCount);
  EXPECT_EQ(stats.mr_open, kCount);
  EXPECT_EQ(stats.mr_bytes, kCount * kPage);
}

// The MR handle is written before its completion can be read (docs/semantics.md): a thread
// that reads the event and uses the handle the registering call wrote (libfabric's pattern:
// the context names the request, the request holds the MR) must find it there.  hmr wrote it
// after it had handed the MR to its worker, so the event could be read first (found by a
// review: 10-95 of 20000 completions on a loaded machine).  Here the write itself is held up:
// the application's slot is on a read-only page, and the fault handler lets the write go on
// only once a reader thread has read the event, or after 200 ms.  Written first, the reader
// finds the handle; written after the submission, it finds the slot empty.
namespace written_late {
char* slot_page = nullptr;
std::atomic<bool> event_read{false};
void hold_the_write(int, siginfo_t* info, void*) {
  auto* address = static_cast<char*>(info->si_addr);
  if (address < slot_page || address >= slot_page + kPage) abort();  // not the test's fault
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t deadline = now.tv_sec * 1000000000LL + now.tv_nsec + 200 * 1000000LL;
  while (!event_read.load()) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec * 1000000000LL + now.tv_nsec > deadline) break;
    sched_yield();
  }
  mprotect(slot_page, kPage, PROT_READ | PROT_WRITE);
}
}  // namespace written_late

TEST(AsyncRegistration, TheHandleIsWrittenBeforeItsCompletionCanBeRead) {
  Pages pages(kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  written_late::slot_page = static_cast<char*>(page);
  written_late::event_read = false;
  auto* slot = reinterpret_cast<hmr_mr* volatile*>(page);
  *slot = nullptr;
  struct sigaction hold {};
  hold.sa_sigaction = written_late::hold_the_write;
  hold.sa_flags = SA_SIGINFO;
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGSEGV, &hold, &saved), 0);

  hmr_fid* completed = nullptr;
  hmr_mr* found = nullptr;
  std::thread reader([&] {
    uint32_t event = 0;
    struct hmr_eq_entry entry = empty_entry();
    if (hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0) == 1) {
      completed = entry.fid;
      found = *slot;  // what the application finds when its event arrives
    }
    written_late::event_read = true;
  });
  ASSERT_EQ(mprotect(page, kPage, PROT_READ), 0);
  const int rc = hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 7, 0,
                            const_cast<hmr_mr**>(slot), nullptr);
  reader.join();
  EXPECT_EQ(sigaction(SIGSEGV, &saved, nullptr), 0);
  ASSERT_HMR_OK(rc);
  MrPtr owned(*slot);
  ASSERT_NE(completed, nullptr) << "no completion";
  EXPECT_EQ(found, reinterpret_cast<hmr_mr*>(completed))
      << "the completion was read before the handle was written";
  owned.reset();
  munmap(page, kPage);
}

// Both ends of a pipe, closed by the test, never by hmr.
struct Pipe {
  Pipe() { EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int fds[2] = {-1, -1};
};

TEST(AsyncRegistration, FailureCompletesWithErrorEntry) {
  Pipe pipe;
  ASSERT_GE(pipe.fds[0], 0);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);

  // A pipe passes the synchronous checks (fd >= 0, len > 0) but cannot be mapped: the
  // registration fails inside the NIC, on the worker.
  hmr_mr_dmabuf dmabuf = {};
  dmabuf.fd = pipe.fds[0];
  dmabuf.offset = 0;
  dmabuf.len = kPage;
  dmabuf.base_addr = nullptr;
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.dmabuf = &dmabuf;
  attr.access = kRemote;
  attr.requested_key = 9;
  int marker = 0;
  attr.context = &marker;
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_regattr(async.domain.get(), &attr, HMR_MR_DMABUF, &mr));
  ASSERT_NE(mr, nullptr);
  MrPtr owned(mr);  // a failed MR must still be closed

  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  EXPECT_HMR_ERROR(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), HMR_EAVAIL);
  EXPECT_HMR_ERROR(hmr_eq_read(async.eq.get(), &event, &entry, 0), HMR_EAVAIL);

  struct hmr_eq_err_entry err;
  std::memset(&err, 0, sizeof err);
  ASSERT_EQ(hmr_eq_readerr(async.eq.get(), &err, 0), 1) << hmr_last_error();
  EXPECT_EQ(err.fid, reinterpret_cast<hmr_fid*>(mr));
  EXPECT_EQ(err.context, &marker);
  EXPECT_GT(err.err, 0);
  EXPECT_NE(err.err, HMR_EAVAIL);
  EXPECT_NE(std::string(err.reason, strnlen(err.reason, sizeof err.reason)), "");
  EXPECT_LT(strnlen(err.reason, sizeof err.reason), sizeof err.reason) << "reason not terminated";

  EXPECT_EQ(hmr_mr_key(mr), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(mr), nullptr);
  expect_no_event(async.eq.get());
  EXPECT_HMR_ERROR(hmr_eq_readerr(async.eq.get(), &err, 0), HMR_EAGAIN);
  EXPECT_EQ(stats_of(async.domain.get()).registrations, 0u);

  ASSERT_HMR_OK(hmr_mr_close(owned.release()));
  // hmr never closes the caller's fd.
  EXPECT_NE(fcntl(pipe.fds[0], F_GETFD), -1);
}

TEST(AsyncRegistration, BadArgumentsStillFailSynchronously) {
  Pages pages(kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_reg(async.domain.get(), pages.data(), kPage, 1ULL << 20, 0, 1, 0, &mr,
                              nullptr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 1, 1, 0, &mr,
                              nullptr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_reg(async.domain.get(), nullptr, kPage, kRemote, 0, 1, 0, &mr, nullptr),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 1, 1ULL << 20,
                              &mr, nullptr),
                   HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 1, 0, nullptr,
                              nullptr),
                   HMR_EINVAL);
  hmr_mr_dmabuf dmabuf = {};
  dmabuf.fd = -1;
  dmabuf.len = kPage;
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.dmabuf = &dmabuf;
  attr.access = kRemote;
  EXPECT_HMR_ERROR(hmr_mr_regattr(async.domain.get(), &attr, HMR_MR_DMABUF, &mr), HMR_EBADF);
  EXPECT_EQ(mr, nullptr);
  expect_no_event(async.eq.get());
  EXPECT_EQ(stats_of(async.domain.get()).mr_open, 0u);
}

TEST(AsyncRegistration, ClosingPendingMrsWithdrawsTheirEvents) {
  constexpr size_t kCount = 32;
  Pages pages(kCount * kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  std::vector<int> contexts(kCount);
  std::vector<MrPtr> mrs(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    hmr_mr* mr = nullptr;
    ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data() + i * kPage, kPage, kRemote, 0,
                             1 + i, 0, &mr, &contexts[i]));
    mrs[i].reset(mr);
    if (i % 2 == 0) {
      ASSERT_HMR_OK(hmr_mr_close(mrs[i].release()));  // pending or completed-but-unread
    }
  }
  std::vector<int> seen(kCount, 0);
  for (size_t n = 0; n < kCount / 2; ++n) {
    uint32_t event = 0;
    struct hmr_eq_entry entry = empty_entry();
    ASSERT_EQ(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), 1)
        << "after " << n << " events: " << hmr_last_error();
    const int* context = static_cast<const int*>(entry.context);
    ASSERT_TRUE(context >= contexts.data() && context < contexts.data() + kCount);
    const size_t index = static_cast<size_t>(context - contexts.data());
    EXPECT_EQ(index % 2, 1u) << "an event names closed MR " << index;
    ++seen[index];
  }
  for (size_t i = 1; i < kCount; i += 2) EXPECT_EQ(seen[i], 1) << i;
  expect_no_event(async.eq.get());
  EXPECT_EQ(stats_of(async.domain.get()).mr_open, kCount / 2);
}

TEST(AsyncRegistration, CompletedButUnreadEventIsWithdrawnOnClose) {
  Pages pages(2 * kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  int closed_context = 0;
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 1, 0, &mr,
                           &closed_context));
  MrPtr closing(mr);
  // The key becomes available when the registration completes; its event is then queued
  // (or about to be).  Bounded by a deadline, not a sleep.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (hmr_mr_key(closing.get()) == HMR_KEY_NOTAVAIL &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(hmr_mr_key(closing.get()), 1u) << "registration did not complete in time";
  ASSERT_HMR_OK(hmr_mr_close(closing.release()));

  // A later registration's event arrives; the closed one's never does.
  int later_context = 0;
  ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data() + kPage, kPage, kRemote, 0, 2, 0, &mr,
                           &later_context));
  MrPtr later(mr);
  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  ASSERT_EQ(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), 1) << hmr_last_error();
  EXPECT_EQ(entry.context, &later_context) << "event of a closed MR was delivered";
  EXPECT_EQ(entry.fid, reinterpret_cast<hmr_fid*>(later.get()));
  expect_no_event(async.eq.get());
}

// An indirect key registers at once, even in a domain bound to an event queue: it has no
// completion, and its close must not wait for one (it hung for ever, and the domain could never
// close: found by a review).  The close runs on a thread of its own so that the test fails
// instead of hanging.
TEST(AsyncRegistration, AnIndirectKeyClosesWithoutACompletion) {
  Pages pages(4 * kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data(), pages.size(), kRemote, 0, 0, 0,
                           &mr, nullptr));
  MrPtr owned(mr);
  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  ASSERT_EQ(hmr_eq_sread(async.eq.get(), &event, &entry, kTimeoutMs, 0), 1) << hmr_last_error();
  struct hmr_mr_segment segment = {mr, pages.data(), kPage};
  hmr_mr* indirect = nullptr;
  const int rc = hmr_mr_reg_indirect(async.domain.get(), &segment, 1, HMR_REMOTE_READ, &indirect);
  if (rc == -HMR_ENOSYS) GTEST_SKIP() << hmr_last_error();
  ASSERT_HMR_OK(rc);
  std::promise<int> closed;
  std::future<int> result = closed.get_future();
  std::thread closer([&closed, indirect] { closed.set_value(hmr_mr_close(indirect)); });
  if (result.wait_for(std::chrono::milliseconds(kTimeoutMs)) != std::future_status::ready) {
    std::fprintf(stderr, "hmr_mr_close of an indirect key in an asynchronous domain did not "
                         "return within %d ms\n", kTimeoutMs);
    std::_Exit(1);
  }
  closer.join();
  EXPECT_EQ(result.get(), 0) << hmr_last_error();
  expect_no_event(async.eq.get());
}

TEST(AsyncRegistration, EventQueueBusyWhileDomainBound) {
  Pages pages(kPage);
  AsyncDomain async = open_async_domain();
  ASSERT_TRUE(async);
  hmr_mr* mr = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg(async.domain.get(), pages.data(), kPage, kRemote, 0, 1, 0, &mr,
                           nullptr));
  MrPtr owned(mr);
  EXPECT_HMR_ERROR(hmr_eq_close(async.eq.get()), HMR_EBUSY);
  EXPECT_HMR_ERROR(hmr_domain_close(async.domain.get()), HMR_EBUSY);  // an MR is open
  ASSERT_HMR_OK(hmr_mr_close(owned.release()));
  EXPECT_HMR_ERROR(hmr_eq_close(async.eq.get()), HMR_EBUSY);
  ASSERT_HMR_OK(hmr_domain_close(async.domain.release()));
  EXPECT_EQ(hmr_eq_close(async.eq.release()), 0) << hmr_last_error();
}

TEST(AsyncRegistration, BindRules) {
  hmr_eq* eq_raw = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, &eq_raw));
  EqPtr eq(eq_raw);
  DomainPtr domain(open_sim_domain(0));
  ASSERT_TRUE(domain);
  hmr_ep* ep_raw = nullptr;
  ASSERT_HMR_OK(hmr_ep_open(domain.get(), nullptr, &ep_raw));
  EpPtr ep(ep_raw);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain.get(), hmr_eq_fid(eq.get()), 0), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain.get(), hmr_ep_fid(ep.get()), HMR_REG_MR), HMR_EINVAL);
  ASSERT_HMR_OK(hmr_domain_bind(domain.get(), hmr_eq_fid(eq.get()), HMR_REG_MR));
  EXPECT_HMR_ERROR(hmr_domain_bind(domain.get(), hmr_eq_fid(eq.get()), HMR_REG_MR), HMR_EBUSY);
}

}  // namespace

namespace {

// A NIC whose registrations wait until the test opens its gate, and which records the inode of
// the dma-buf it was handed.
struct GatedNic {
  std::atomic<bool> open{false};
  std::atomic<unsigned long> inode{0};
};
int gated_register(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char*,
                   size_t) {
  auto& nic = *static_cast<GatedNic*>(context);
  while (!nic.open.load()) std::this_thread::yield();
  struct stat status{};
  if (request->dmabuf_fd >= 0 && fstat(request->dmabuf_fd, &status) == 0) {
    nic.inode = static_cast<unsigned long>(status.st_ino);
  }
  mr->handle = reinterpret_cast<void*>(uintptr_t{1});
  mr->key = 7;
  return 0;
}
int gated_deregister(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

}  // namespace

// An asynchronous registration of the caller's dma-buf runs after hmr_mr_regattr returned,
// when the caller may have closed its fd (it may after a synchronous call; libfabric's verbs
// and EFA register at once even under FI_REG_MR).  The worker used the fd number, by then
// another file's: the registration named the wrong buffer.
TEST(AsyncRegistration, TheCallersDmabufIsKeptUntilTheWorkerRegistersIt) {
  GatedNic nic;
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(&nic, HMR_NIC_CB_DMABUF, gated_register, gated_deregister);
  hmr_domain_attr attr =
      hmr_test::callback_domain_attr(callbacks, HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  hmr_eq* eq = nullptr;
  ASSERT_EQ(hmr_eq_open(nullptr, &eq), 0) << hmr_last_error();
  EqPtr queue(eq);
  hmr_domain* raw = nullptr;
  ASSERT_EQ(hmr_domain_open(&attr, &raw), 0) << hmr_last_error();
  DomainPtr domain(raw);
  ASSERT_EQ(hmr_domain_bind(domain.get(), hmr_eq_fid(eq), HMR_REG_MR), 0) << hmr_last_error();

  const int mine = memfd_create("async-dmabuf-mine", MFD_CLOEXEC);
  ASSERT_GE(mine, 0);
  ASSERT_EQ(ftruncate(mine, 2 * 4096), 0);
  struct stat status{};
  ASSERT_EQ(fstat(mine, &status), 0);
  const auto my_inode = static_cast<unsigned long>(status.st_ino);
  hmr_mr_dmabuf dmabuf{mine, 0, 4096, reinterpret_cast<void*>(0x10000)};
  hmr_mr_attr mr_attr;
  std::memset(&mr_attr, 0, sizeof mr_attr);
  mr_attr.size = sizeof mr_attr;
  mr_attr.dmabuf = &dmabuf;
  mr_attr.access = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
  mr_attr.iface = HMR_HMEM_SYSTEM;
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_regattr(domain.get(), &mr_attr, HMR_MR_DMABUF, &mr), 0) << hmr_last_error();
  // The caller lets go of its fd, and the number goes to another file.
  close(mine);
  const int other = memfd_create("async-dmabuf-other", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  nic.open = true;
  uint32_t event = 0;
  struct hmr_eq_entry entry = empty_entry();
  ASSERT_EQ(hmr_eq_sread(eq, &event, &entry, 30000, 0), 1) << hmr_last_error();
  EXPECT_EQ(nic.inode.load(), my_inode) << "the worker registered another file than the caller's";
  EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  close(other);
}
