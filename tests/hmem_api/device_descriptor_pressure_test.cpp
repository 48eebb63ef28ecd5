// Device memory when the process runs out of file descriptors (docs/semantics.md, "Under
// pressure"): every cached dma-buf registration keeps its allocation's export open, an fd, so
// a pool of many allocations can fill the table (1024 entries by default).  A driver's export
// that then fails is answered by giving back idle device registrations and trying again; with
// every export held by an MR in use, the registration fails with the reason, and no host
// shadow (a copy that would stay cached) is taken instead.  The fake CUDA driver makes each
// export with memfd_create, which fails with EMFILE at RLIMIT_NOFILE as the real driver's fd
// does; hmr does not rely on the code the driver gives for it.
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/hmem_api/fake_cuda_driver.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

// Threads held at their start until the test lets them go, and joined on every way out of a
// test (an ASSERT's return included).  `all_running()` waits until each has begun to run, not
// only been created: UndefinedBehaviorSanitizer checks a new thread's std::thread state
// (-fsanitize=vptr) when the thread first runs, and that check opens a pipe, which a full
// table refuses -- a false "invalid vptr" report.  CI saw it twice: once with the thread
// created after the table filled, once with it created before but first scheduled after.
class HeldThreads {
 public:
  HeldThreads() = default;
  HeldThreads(const HeldThreads&) = delete;
  HeldThreads& operator=(const HeldThreads&) = delete;
  ~HeldThreads() { let_go_and_join(); }

  template <typename Body>
  void add(Body body) {
    threads_.emplace_back([this, body] {
      running_.fetch_add(1);
      while (!go_.load()) std::this_thread::yield();
      body();
    });
  }
  void all_running() const {
    while (running_.load() < threads_.size()) std::this_thread::yield();
  }
  void let_go() { go_.store(true); }
  void let_go_and_join() {
    let_go();
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  std::atomic<bool> go_{false};
  std::atomic<size_t> running_{0};
  std::vector<std::thread> threads_;
};

// The process's descriptor table made full, with `spare` numbers left free: the soft
// RLIMIT_NOFILE is lowered to one past the highest open fd, and the holes below it are taken
// by eventfds, `spare` of which are closed again.  Restored (fillers closed, limit back) when
// it goes.  Meanwhile only hmr opens descriptors: exports, and its look at the table.
class FullDescriptorTable {
 public:
  explicit FullDescriptorTable(size_t spare) {
    EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &before_), 0);
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    }
    rlimit lowered = before_;
    lowered.rlim_cur = static_cast<rlim_t>(highest) + 1;
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
    for (;;) {
      const int filler = eventfd(0, EFD_CLOEXEC);
      if (filler < 0) {
        EXPECT_EQ(errno, EMFILE);
        break;
      }
      fillers_.push_back(filler);
    }
    for (size_t i = 0; i < spare; ++i) {
      if (fillers_.empty()) {
        lowered.rlim_cur += 1;  // no hole to give back: one more number instead
        EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
        continue;
      }
      ::close(fillers_.back());
      fillers_.pop_back();
    }
  }
  ~FullDescriptorTable() {
    for (int fd : fillers_) ::close(fd);
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &before_), 0);
  }
  FullDescriptorTable(const FullDescriptorTable&) = delete;
  FullDescriptorTable& operator=(const FullDescriptorTable&) = delete;

  // Whether another descriptor could be opened now.
  static bool room() {
    const int probe = eventfd(0, EFD_CLOEXEC);
    if (probe < 0) return false;
    ::close(probe);
    return true;
  }

 private:
  rlimit before_{};
  std::vector<int> fillers_;
};

// A NIC that imports every dma-buf it is given (checking the fd is one, as a real import's
// dma_buf_get does) and registers host memory too, counting both.
struct ImportingNic {
  std::atomic<int> dmabuf_calls{0}, bad_fds{0}, va_calls{0};
  std::atomic<int> refusals_to_come{0};  // registrations refused for resources (HMR_ENOMEM)
  std::atomic<uint64_t> next_key{1};
};

int importing_register(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr,
                       char* reason, size_t reason_size) {
  auto& nic = *static_cast<ImportingNic*>(context);
  if (nic.refusals_to_come.load() > 0 && nic.refusals_to_come.fetch_sub(1) > 0) {
    std::snprintf(reason, reason_size, "importing NIC: out of keys, for a moment");
    return -HMR_ENOMEM;
  }
  if (request->dmabuf_fd >= 0) {
    struct stat st {};
    if (fstat(request->dmabuf_fd, &st) != 0) {
      nic.bad_fds.fetch_add(1);
      std::snprintf(reason, reason_size, "importing NIC: fd %d is not open", request->dmabuf_fd);
      return -HMR_EBADF;
    }
    nic.dmabuf_calls.fetch_add(1);
  } else {
    nic.va_calls.fetch_add(1);
  }
  return hmr_test::hand_out_key(mr, nic.next_key);
}

int importing_deregister(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

// A callback domain on `nic` (importing dma-bufs, and whatever else `caps` names), opened with
// hmr_domain_attr.flags `flags`; null (and a test failure) on error.
DomainPtr open_importing_domain(ImportingNic& nic, uint64_t caps = HMR_NIC_CB_DMABUF,
                                uint64_t flags = 0) {
  hmr_nic_callbacks callbacks = callback_nic(&nic, caps, importing_register, importing_deregister);
  return open_callback_domain(callbacks, flags);
}

constexpr size_t kAllocationSize = 65536;

std::vector<std::unique_ptr<FakeAllocation>> allocations(size_t count) {
  std::vector<std::unique_ptr<FakeAllocation>> made;
  for (size_t i = 0; i < count; ++i) made.push_back(std::make_unique<FakeAllocation>(0, kAllocationSize));
  return made;
}

// Before the first test, a giving back with descriptors to spare: a NIC's refusal for
// resources, answered by giving back an idle device registration and its export.  Under
// UndefinedBehaviorSanitizer every virtual call's type is checked (-fsanitize=vptr) the first
// time its pair of static and dynamic types is seen, and that check opens a pipe, which a
// full table refuses: a false "invalid vptr" report.  The giving back's calls (the domain's
// pressure relief, its device cache's backend) were first made with the table full when these
// tests ran alone; run with the others, the earlier DevicePressure tests made them first.
class DeviceDescriptorPressure : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    ImportingNic nic;
    DomainPtr domain = open_importing_domain(nic);
    ASSERT_TRUE(domain);
    auto memory = allocations(2);
    ASSERT_TRUE(register_ok(domain.get(), memory[0]->get(), kAllocationSize));
    nic.refusals_to_come.store(1);
    ASSERT_TRUE(register_ok(domain.get(), memory[1]->get(), kAllocationSize));
    EXPECT_EQ(stats_of(domain.get()).cache_pressure_evictions, 1u)
        << "the warm-up gave nothing back: the giving back's first calls may meet a full table";
  }
};

TEST_F(DeviceDescriptorPressure, IdleExportsAreGivenBackWhenTheTableIsFull) {
  ImportingNic nic;
  DomainPtr domain = open_importing_domain(nic);
  ASSERT_TRUE(domain);
  auto memory = allocations(25);
  // 24 of them registered and closed: idle in the device cache, an export (an fd) each.
  const int fds_before = open_fd_count();
  for (size_t i = 0; i < 24; ++i) {
    MrPtr mr = register_ok(domain.get(), memory[i]->get(), kAllocationSize);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_DMABUF);
  }
  EXPECT_EQ(open_fd_count(), fds_before + 24) << "the idle registrations do not hold an export each";
  const uint64_t evictions_before = stats_of(domain.get()).cache_pressure_evictions;
  {
    const FullDescriptorTable full(0);
    ASSERT_FALSE(FullDescriptorTable::room()) << "the table is not full: the test proves nothing";
    // The 25th needs an export of its own: idle ones go back to make room.  Then every one
    // again, twice, each needing an export the table has no room for until another goes.
    for (int round = 0; round < 3; ++round) {
      for (size_t i = round == 0 ? 24 : 0; i < memory.size(); ++i) {
        hmr_mr* mr = nullptr;
        ASSERT_EQ(register_attr(domain.get(), memory[i]->get(), kAllocationSize, HMR_HMEM_SYSTEM,
                                0, 0, &mr),
                  0)
            << "allocation " << i << " (round " << round << "): " << hmr_last_error();
        EXPECT_EQ(mr_info(mr).path, HMR_MR_PATH_DMABUF);
        EXPECT_EQ(hmr_mr_close(mr), 0);
      }
    }
  }
  EXPECT_GT(stats_of(domain.get()).cache_pressure_evictions, evictions_before);
  EXPECT_EQ(nic.bad_fds.load(), 0);
  EXPECT_EQ(nic.va_calls.load(), 0);
}

// Every export held by an open MR: nothing to give back, so the registration fails with the
// code and a reason that names the cause and what to do, and no host shadow is registered in
// its place although copies are allowed.  Once one MR closes, its idle registration goes back
// for the next.
TEST_F(DeviceDescriptorPressure, ExportsAllInUseFailWithTheReasonAndNoShadow) {
  ImportingNic nic;
  DomainPtr domain = open_importing_domain(nic, HMR_NIC_CB_DMABUF, HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  auto memory = allocations(9);
  std::vector<MrPtr> open;
  for (size_t i = 0; i < 8; ++i) open.push_back(register_ok(domain.get(), memory[i]->get(), kAllocationSize));
  {
    const FullDescriptorTable full(0);
    hmr_mr* ninth = nullptr;
    EXPECT_EQ(register_attr(domain.get(), memory[8]->get(), kAllocationSize, HMR_HMEM_SYSTEM, 0, 0,
                            &ninth),
              -HMR_ENOMEM);
    EXPECT_EQ(ninth, nullptr);
    const std::string reason = hmr_last_error();
    EXPECT_NE(reason.find("no file descriptor left"), std::string::npos) << reason;
    EXPECT_NE(reason.find("cuMemGetHandleForAddressRange"), std::string::npos) << reason;
    EXPECT_NE(reason.find("ulimit -n"), std::string::npos) << reason;
    EXPECT_EQ(nic.va_calls.load(), 0) << "a host shadow was registered instead";

    open.pop_back();  // idle now, its export still open
    MrPtr mr = register_ok(domain.get(), memory[8]->get(), kAllocationSize);
    ASSERT_TRUE(mr);
    EXPECT_EQ(mr_info(mr.get()).path, HMR_MR_PATH_DMABUF);
  }
  EXPECT_EQ(nic.va_calls.load(), 0);
}

// Peer-direct needs no descriptor: with the table full and every export in use, a NIC that
// also registers device addresses gets the memory that way (a host shadow it would not).
TEST_F(DeviceDescriptorPressure, PeerDirectIsStillTriedWhenNoExportCanBeMade) {
  ImportingNic nic;
  DomainPtr domain = open_importing_domain(nic, HMR_NIC_CB_DMABUF | HMR_NIC_CB_PEER_DIRECT,
                                           HMR_DOMAIN_ALLOW_HMEM_COPY);
  ASSERT_TRUE(domain);
  auto memory = allocations(3);
  std::vector<MrPtr> open;
  for (size_t i = 0; i < 2; ++i) {
    open.push_back(register_ok(domain.get(), memory[i]->get(), kAllocationSize));
    ASSERT_EQ(mr_info(open.back().get()).path, HMR_MR_PATH_DMABUF);
  }
  const FullDescriptorTable full(0);
  MrPtr third = register_ok(domain.get(), memory[2]->get(), kAllocationSize);
  ASSERT_TRUE(third) << hmr_last_error();
  EXPECT_EQ(mr_info(third.get()).path, HMR_MR_PATH_PEER_DIRECT);
  EXPECT_EQ(nic.va_calls.load(), 1);
}

// A domain on the importing NIC, and one allocation of kParts parts that the tests register
// apart: each part's registration holds the allocation's one export.
struct PartsOfOneExport {
  static constexpr size_t kParts = 16;
  ImportingNic nic;
  DomainPtr domain = open_importing_domain(nic);
  FakeAllocation pool{0, kParts * kAllocationSize};
  void* part(size_t i) const { return static_cast<char*>(pool.get()) + i * kAllocationSize; }
  // Each part registered and closed (idle, cached); false at the first that fails.
  bool register_parts() {
    for (size_t i = 0; i < kParts; ++i) {
      if (!register_ok(domain.get(), part(i), kAllocationSize)) return false;
    }
    return true;
  }
};

// Registrations of parts of one allocation share its export: giving back one of them frees
// no descriptor while the others stay.  So for a want of descriptors the idle registrations
// that hold an export alone go first (up to 8 a try), before any of the many that share one:
// here the one such registration goes for the new export, and the sixteen parts of the pool
// stay cached (before, eight went at a time in CLOCK order, whoever held what).
TEST_F(DeviceDescriptorPressure, ARegistrationHoldingAnExportAloneGoesBeforeSharedOnes) {
  PartsOfOneExport parts;
  ASSERT_TRUE(parts.domain);
  auto single = allocations(2);
  const int fds_before = open_fd_count();
  ASSERT_TRUE(parts.register_parts());
  ASSERT_TRUE(register_ok(parts.domain.get(), single[0]->get(), kAllocationSize));
  ASSERT_EQ(open_fd_count(), fds_before + 2) << "one export for the pool, one for the single";
  const hmr_domain_stats before = stats_of(parts.domain.get());
  {
    const FullDescriptorTable full(0);
    MrPtr fresh = register_ok(parts.domain.get(), single[1]->get(), kAllocationSize);
    ASSERT_TRUE(fresh) << hmr_last_error();
    const hmr_domain_stats after = stats_of(parts.domain.get());
    EXPECT_EQ(after.cache_pressure_evictions - before.cache_pressure_evictions, 1u)
        << "more was given back than the one registration whose export closes";
  }
  const int dmabuf_calls = parts.nic.dmabuf_calls.load();
  ASSERT_TRUE(parts.register_parts());
  EXPECT_EQ(parts.nic.dmabuf_calls.load(), dmabuf_calls)
      << "a part of the pool had been given back";
}

// With every idle export shared, those holding one go (a shared export closes with its last
// idle holder), never a registration that holds no descriptor: here the pinned host memory
// of the runtime (registered by address) stays cached.
TEST_F(DeviceDescriptorPressure, SharedExportsGoWhenNoneIsHeldAloneAndHostMemoryStays) {
  PartsOfOneExport parts;
  ASSERT_TRUE(parts.domain);
  std::vector<std::unique_ptr<FakeAllocation>> pinned;
  for (size_t i = 0; i < 8; ++i) {
    pinned.push_back(std::make_unique<FakeAllocation>(0, kAllocationSize, FAKE_CUDA_MEM_HOST));
    MrPtr mr = register_ok(parts.domain.get(), pinned.back()->get(), kAllocationSize);
    ASSERT_TRUE(mr);
    ASSERT_NE(mr_info(mr.get()).path, HMR_MR_PATH_DMABUF);
  }
  ASSERT_TRUE(parts.register_parts());
  auto fresh_memory = allocations(1);
  const hmr_domain_stats before = stats_of(parts.domain.get());
  const int va_calls = parts.nic.va_calls.load();
  {
    const FullDescriptorTable full(0);
    MrPtr fresh = register_ok(parts.domain.get(), fresh_memory[0]->get(), kAllocationSize);
    ASSERT_TRUE(fresh) << hmr_last_error();
    EXPECT_EQ(mr_info(fresh.get()).path, HMR_MR_PATH_DMABUF);
    const hmr_domain_stats after = stats_of(parts.domain.get());
    EXPECT_EQ(after.cache_pressure_evictions - before.cache_pressure_evictions,
              PartsOfOneExport::kParts)
        << "the pool's export closes only when all of its sixteen idle parts went";
  }
  for (auto& memory : pinned) {
    ASSERT_TRUE(register_ok(parts.domain.get(), memory->get(), kAllocationSize));
  }
  EXPECT_EQ(parts.nic.va_calls.load(), va_calls) << "host memory was given back for a descriptor";
}

// Exports are shared by every domain of the process: two domains (a domain per NIC) holding
// idle registrations of the same allocations each keep their exports open, so the refused
// domain's own giving back closes no fd; the other domain's idle registrations are given back
// too.  Then the other domain closes while a thread of the first needs its exports' room.
TEST_F(DeviceDescriptorPressure, AnotherDomainsIdleRegistrationsAreGivenBackToo) {
  ImportingNic first_nic, second_nic;
  DomainPtr first = open_importing_domain(first_nic);
  DomainPtr second = open_importing_domain(second_nic);
  ASSERT_TRUE(first && second);
  auto memory = allocations(40);
  for (size_t i = 0; i < 16; ++i) {
    MrPtr a = register_ok(first.get(), memory[i]->get(), kAllocationSize);
    MrPtr b = register_ok(second.get(), memory[i]->get(), kAllocationSize);
    ASSERT_TRUE(a && b);
  }
  const uint64_t second_evictions = stats_of(second.get()).cache_pressure_evictions;
  // The thread that registers in the first domain below, running before the table fills
  // (see HeldThreads).
  std::atomic<int> unexplained{0};
  std::string first_unexplained;
  HeldThreads registering;
  registering.add([&] {
    for (size_t i = 24; i < memory.size(); ++i) {
      hmr_mr* made = nullptr;
      const int rc = register_attr(first.get(), memory[i]->get(), kAllocationSize,
                                   HMR_HMEM_SYSTEM, 0, 0, &made);
      if (rc == 0) {
        EXPECT_EQ(hmr_mr_close(made), 0);
      } else if (rc != -HMR_ENOMEM ||
                 std::string(hmr_last_error()).find("no file descriptor left") == std::string::npos) {
        if (unexplained.fetch_add(1) == 0) first_unexplained = hmr_last_error();
      }
    }
  });
  registering.all_running();
  {
    const FullDescriptorTable full(0);
    hmr_mr* mr = nullptr;
    ASSERT_EQ(register_attr(first.get(), memory[16]->get(), kAllocationSize, HMR_HMEM_SYSTEM, 0, 0,
                            &mr),
              0)
        << hmr_last_error();
    EXPECT_EQ(hmr_mr_close(mr), 0);
    EXPECT_GT(stats_of(second.get()).cache_pressure_evictions, second_evictions)
        << "the other domain gave nothing back";

    // The second domain registers what the first let go of meanwhile, then closes while a
    // thread registers in the first: each of its registrations either finds room (some of
    // them from the second domain's idle ones) or fails with the reason; nothing else.
    for (size_t i = 17; i < 24; ++i) {
      hmr_mr* again = nullptr;
      if (register_attr(second.get(), memory[i]->get(), kAllocationSize, HMR_HMEM_SYSTEM, 0, 0,
                        &again) == 0) {
        EXPECT_EQ(hmr_mr_close(again), 0);
      }
    }
    registering.let_go();
    second.reset();
    registering.let_go_and_join();
    EXPECT_EQ(unexplained.load(), 0) << first_unexplained;
  }
  EXPECT_EQ(first_nic.bad_fds.load() + second_nic.bad_fds.load(), 0);
}

// Four threads registering and closing 48 allocations in turn with room for four exports in
// the table: each thread holds one MR at a time, so there is always an idle export to give
// back, and no registration may fail; another thread's giving back (or its look at the
// table, which holds a slot for a moment) between one's failed export and its own look must
// not read as the driver's failure.  Threads 0 and 2, 1 and 3 take the same allocations, so
// two threads also export one allocation at once.
TEST_F(DeviceDescriptorPressure, ThreadsAtTheLimitAllRegister) {
  ImportingNic nic;
  DomainPtr domain = open_importing_domain(nic);
  ASSERT_TRUE(domain);
  auto memory = allocations(48);
  constexpr size_t kThreads = 4;
  std::atomic<int> failures{0};
  std::string first_failure;
  std::atomic<bool> reported{false};
  {
    // The threads run before the table fills (see HeldThreads).
    HeldThreads threads;
    for (size_t t = 0; t < kThreads; ++t) {
      threads.add([&, t] {
        for (size_t round = 0; round < 6; ++round) {
          for (size_t i = t; i < memory.size(); i += kThreads / 2) {
            hmr_mr* mr = nullptr;
            if (register_attr(domain.get(), memory[i]->get(), kAllocationSize, HMR_HMEM_SYSTEM, 0,
                              0, &mr) != 0) {
              if (!reported.exchange(true)) first_failure = hmr_last_error();
              failures.fetch_add(1);
              continue;
            }
            if (hmr_mr_close(mr) != 0) failures.fetch_add(1);
          }
        }
      });
    }
    {
      threads.all_running();
      const FullDescriptorTable full(kThreads);
      threads.let_go_and_join();
    }
  }
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(nic.bad_fds.load(), 0);
  EXPECT_GT(stats_of(domain.get()).cache_pressure_evictions, 0u)
      << "the table never filled: the test proves nothing";
}

}  // namespace
}  // namespace hmr_hmem_test
