// Tests of the header-only C++ wrapper (include/hmr/hmr.hpp): it closes what it opens, turns
// failures into hmr::Error with the right code, transfers ownership on move, and moves bytes,
// also through the memory operations (windows, indirect keys, rereg, ODP and advice).
#include <hmr/hmr.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace {

using hmr_test::Pages;

constexpr size_t kPage = 4096;

// A verbs-like NIC: virtual addresses, mapped pages and provider keys (so many MRs may share
// a buffer), plus `extra` required bits, which the application then supports too.
hmr::DomainOptions verbs_like(const std::string& extra = "", uint64_t extra_bits = 0) {
  hmr::DomainOptions options;
  options.nic_options = "require=VIRT_ADDR|ALLOCATED|PROV_KEY" + extra;
  options.mr_mode =
      HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY | extra_bits;
  return options;
}

// The code of the hmr::Error `call` throws, or 0 when it does not throw.
template <typename Call>
int error_code_of(Call&& call) {
  try {
    call();
  } catch (const hmr::Error& error) {
    EXPECT_NE(std::string(error.what()), "");
    return error.code();
  }
  return 0;
}

uint64_t open_mrs(const hmr::Domain& domain) { return domain.stats().mr_open; }

// The address a VIRT_ADDR peer uses for a byte.
uint64_t va(const void* byte) { return reinterpret_cast<uint64_t>(byte); }

// How many pages of [addr, addr + len) are resident (mincore).
size_t resident_pages(const void* addr, size_t len) {
  std::vector<unsigned char> pages((len + kPage - 1) / kPage);
  EXPECT_EQ(mincore(const_cast<void*>(addr), len, pages.data()), 0);
  size_t resident = 0;
  for (const unsigned char page : pages) resident += page & 1u;
  return resident;
}

TEST(CppWrapper, DestructorsCloseEverythingAndTheDomainClosesCleanly) {
  Pages pages(16 * kPage);
  hmr::Domain domain(verbs_like());
  {
    hmr::EventQueue unbound_queue;
    hmr::Endpoint second(domain);
    hmr::Endpoint first(domain);  // destroyed before `second`, the endpoint it targets
    first.connect(second);
    hmr::Counter counter(domain);
    std::vector<hmr::MemoryRegion> mrs;
    for (size_t i = 0; i < 200; ++i) {
      mrs.push_back(hmr::MemoryRegion::reg(domain, pages.data() + (i % 16) * kPage, kPage,
                                           HMR_READ | HMR_WRITE | HMR_REMOTE_WRITE));
    }
    EXPECT_EQ(open_mrs(domain), 200u);
    EXPECT_TRUE(unbound_queue);
    EXPECT_EQ(counter.value(), 0u);
  }
  const hmr::DomainStats stats = domain.stats();
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.mr_bytes, 0u);
  EXPECT_EQ(stats.registrations, 200u);
  EXPECT_EQ(stats.cache_in_use, 0u);
  // Cached registrations outlive their MRs until flushed (or the domain closes).
  domain.cache_flush();
  const hmr::DomainStats flushed = domain.stats();
  EXPECT_EQ(flushed.cache_regions, 0u);
  EXPECT_EQ(flushed.nic_registrations, flushed.nic_deregistrations);
  EXPECT_NO_THROW(domain.close());
  EXPECT_FALSE(domain);
  EXPECT_NO_THROW(domain.close());  // closing a closed object does nothing
}

TEST(CppWrapper, ExplicitCloseThrowsAndKeepsOwnershipOnFailure) {
  Pages pages(kPage);
  hmr::Domain domain(verbs_like());
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_READ);
  EXPECT_EQ(error_code_of([&] { domain.close(); }), HMR_EBUSY);
  EXPECT_TRUE(domain);  // still owned: the close can be retried
  mr.close();
  EXPECT_FALSE(mr);
  EXPECT_NO_THROW(domain.close());
}

TEST(CppWrapper, FailuresThrowErrorWithTheCodeAndTheReason) {
  hmr::DomainOptions unknown_nic;
  unknown_nic.nic = "no-such-nic";
  try {
    hmr::Domain domain(unknown_nic);
    ADD_FAILURE() << "opening an unknown NIC did not throw";
  } catch (const hmr::Error& error) {
    EXPECT_EQ(error.code(), HMR_ENODEV);
    const std::string what = error.what();
    EXPECT_NE(what.find("hmr_domain_open"), std::string::npos) << what;
    EXPECT_NE(what.find(hmr_strerror(HMR_ENODEV)), std::string::npos) << what;
  }

  hmr::DomainOptions bad_options;
  bad_options.nic_options = "no_such_option=1";
  EXPECT_EQ(error_code_of([&] { hmr::Domain domain(bad_options); }), HMR_EINVAL);

  Pages pages(2 * kPage);
  hmr::Domain domain(verbs_like());
  EXPECT_EQ(error_code_of([&] { (void)hmr::MemoryRegion::reg(domain, pages.data(), kPage, 1ULL << 20); }),
            HMR_EINVAL);
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_READ, 1ULL << 30);
            }),
            HMR_EBADFLAGS);
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_READ,
                                           HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC);
            }),
            HMR_EBADFLAGS);
  EXPECT_EQ(open_mrs(domain), 0u);

  // An RMA error: the target MR lacks REMOTE_WRITE.
  hmr::Endpoint target(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(target);
  hmr::MemoryRegion read_only = hmr::MemoryRegion::reg(domain, pages.data(), kPage,
                                                       HMR_REMOTE_READ);
  uint8_t byte = 7;
  EXPECT_EQ(error_code_of([&] {
              initiator.write(&byte, 1, nullptr, read_only.raw_key().base_addr, read_only.key());
            }),
            HMR_EACCES);
}

TEST(CppWrapper, RequestedKeyInUseThrowsEnokey) {
  Pages pages(kPage);
  hmr::Domain domain;  // sim requires nothing: requested keys, offset addressing
  EXPECT_EQ(domain.negotiated().mr_mode & HMR_MR_PROV_KEY, 0u);
  hmr::MemoryRegion first =
      hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_REMOTE_READ, 0, 42);
  EXPECT_EQ(first.key(), 42u);
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_REMOTE_READ, 0, 42);
            }),
            HMR_ENOKEY);
  first.close();
  hmr::MemoryRegion again =
      hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_REMOTE_READ, 0, 42);
  EXPECT_EQ(again.key(), 42u);
}

TEST(CppWrapper, UsingAMovedFromObjectThrowsInsteadOfPassingNull) {
  hmr::Domain domain(verbs_like());
  hmr::Domain moved = std::move(domain);
  EXPECT_FALSE(domain);  // NOLINT(bugprone-use-after-move): that is the point
  EXPECT_EQ(error_code_of([&] { (void)domain.stats(); }), HMR_EINVAL);
  EXPECT_EQ(error_code_of([&] { hmr::Endpoint ep(domain); }), HMR_EINVAL);
  EXPECT_NO_THROW((void)moved.stats());
}

TEST(CppWrapper, MovesTransferOwnership) {
  Pages pages(2 * kPage);
  hmr::Domain domain(verbs_like());
  hmr::MemoryRegion a = hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_READ);
  hmr_mr* const raw = a.get();
  ASSERT_NE(raw, nullptr);

  hmr::MemoryRegion b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(open_mrs(domain), 1u);

  // Move assignment closes what the destination held.
  hmr::MemoryRegion c = hmr::MemoryRegion::reg(domain, pages.data() + kPage, kPage, HMR_READ);
  EXPECT_EQ(open_mrs(domain), 2u);
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(open_mrs(domain), 1u);

  // A moved domain keeps working and the moved-from one closes nothing.
  hmr::Domain other = std::move(domain);
  EXPECT_EQ(open_mrs(other), 1u);
  c = hmr::MemoryRegion();
  EXPECT_EQ(open_mrs(other), 0u);

  // release() hands the handle back to C.
  hmr::MemoryRegion d = hmr::MemoryRegion::reg(other, pages.data(), kPage, HMR_READ);
  hmr_mr* released = d.release();
  EXPECT_FALSE(d);
  ASSERT_HMR_OK(hmr_mr_close(released));
  EXPECT_NO_THROW(other.close());
}

TEST(CppWrapper, EndToEndWriteReadAndFetchAdd) {
  constexpr size_t kBytes = 64 * 1024;
  Pages source(kBytes);
  Pages target(kBytes);
  Pages sink(kBytes);
  for (size_t i = 0; i < kBytes; ++i) source.data()[i] = static_cast<uint8_t>(i * 131 + 7);

  hmr::Domain domain(verbs_like());
  EXPECT_NE(domain.negotiated().mr_mode & HMR_MR_VIRT_ADDR, 0u);
  EXPECT_EQ(domain.negotiated().mr_mode & HMR_MR_LOCAL, 0u);  // emulated by hmr
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);

  hmr::MemoryRegion local = hmr::MemoryRegion::reg(domain, source.data(), kBytes, HMR_WRITE);
  hmr::MemoryRegion local_sink = hmr::MemoryRegion::reg(domain, sink.data(), kBytes, HMR_READ);
  hmr::MemoryRegion remote = hmr::MemoryRegion::reg(domain, target.data(), kBytes,
                                                    HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  const hmr::RawKey raw = remote.raw_key();
  EXPECT_EQ(raw.base_addr, reinterpret_cast<uint64_t>(target.data()));
  EXPECT_EQ(raw.bytes.size(), domain.negotiated().mr_key_size);
  ASSERT_NE(remote.key(), HMR_KEY_NOTAVAIL);
  ASSERT_NE(local.desc(), nullptr);

  initiator.write(source.data(), kBytes, local.desc(), raw.base_addr, remote.key());
  EXPECT_EQ(std::memcmp(source.data(), target.data(), kBytes), 0);
  initiator.read(sink.data(), kBytes, local_sink.desc(), raw.base_addr, remote.key());
  EXPECT_EQ(std::memcmp(source.data(), sink.data(), kBytes), 0);

  uint64_t counter_value = 40;
  std::memcpy(target.data(), &counter_value, sizeof counter_value);
  EXPECT_EQ(initiator.fetch_add(2, raw.base_addr, remote.key()), 40u);
  std::memcpy(&counter_value, target.data(), sizeof counter_value);
  EXPECT_EQ(counter_value, 42u);

  const hmr::DomainStats stats = domain.stats();
  EXPECT_EQ(stats.rma_ops, 3u);
  EXPECT_EQ(stats.rma_errors, 0u);
}

TEST(CppWrapper, CounterCountsRemoteWritesAfterBindAndEnable) {
  Pages source(kPage);
  Pages target(kPage);
  hmr::Domain domain(verbs_like("|RMA_EVENT", HMR_MR_RMA_EVENT));
  ASSERT_NE(domain.negotiated().mr_mode & HMR_MR_RMA_EVENT, 0u);
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);
  hmr::Counter writes(domain);

  hmr::MemoryRegion remote = hmr::MemoryRegion::reg(domain, target.data(), kPage,
                                                    HMR_REMOTE_WRITE, HMR_RMA_EVENT);
  const uint64_t addr = remote.raw_key().base_addr;
  // Disabled until enabled: the write is refused.
  EXPECT_EQ(error_code_of([&] { initiator.write(source.data(), 8, nullptr, addr, remote.key()); }),
            HMR_EACCES);
  remote.bind(writes, HMR_REMOTE_WRITE);
  remote.enable();
  EXPECT_EQ(error_code_of([&] { remote.bind(writes, HMR_REMOTE_WRITE); }), HMR_EBUSY);
  initiator.write(source.data(), 8, nullptr, addr, remote.key());
  initiator.write(source.data(), 8, nullptr, addr + 8, remote.key());
  EXPECT_EQ(writes.value(), 2u);

  EXPECT_EQ(error_code_of([&] { writes.close(); }), HMR_EBUSY);  // an MR is bound to it
  remote.close();
  EXPECT_NO_THROW(writes.close());
}

TEST(CppWrapper, EndpointBindingInEndpointDomains) {
  Pages target(kPage);
  hmr::Domain domain(verbs_like("|ENDPOINT", HMR_MR_ENDPOINT));
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);
  hmr::MemoryRegion remote =
      hmr::MemoryRegion::reg(domain, target.data(), kPage, HMR_REMOTE_WRITE);
  EXPECT_EQ(error_code_of([&] { remote.enable(); }), HMR_EINVAL);  // not bound yet
  remote.bind(responder);
  remote.enable();
  const uint64_t value = 0x1122334455667788ULL;
  initiator.write(&value, sizeof value, nullptr, remote.raw_key().base_addr, remote.key());
  EXPECT_EQ(std::memcmp(target.data(), &value, sizeof value), 0);
}

TEST(CppWrapper, RawKeysMapAndUnmap) {
  Pages source(kPage);
  Pages target(kPage);
  hmr::Domain domain(verbs_like("|RAW", HMR_MR_RAW));
  EXPECT_EQ(domain.negotiated().mr_key_size, 16u);
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);

  hmr::MemoryRegion remote =
      hmr::MemoryRegion::reg(domain, target.data(), kPage, HMR_REMOTE_WRITE);
  EXPECT_EQ(remote.key(), HMR_KEY_NOTAVAIL);
  const hmr::RawKey raw = remote.raw_key();
  ASSERT_EQ(raw.bytes.size(), 16u);

  const uint64_t key = domain.map_raw(raw.base_addr, raw.bytes);
  std::memset(source.data(), 0x5a, kPage);
  initiator.write(source.data(), kPage, nullptr, raw.base_addr, key);
  EXPECT_EQ(std::memcmp(source.data(), target.data(), kPage), 0);
  domain.unmap_key(key);
  EXPECT_EQ(error_code_of([&] { domain.unmap_key(key); }), HMR_ENOENT);
}

TEST(CppWrapper, AsynchronousRegistrationCompletesOnTheEventQueue) {
  Pages pages(4 * kPage);
  hmr::EventQueue queue;  // declared first: it must outlive the domain bound to it
  hmr::Domain domain(verbs_like());
  domain.bind(queue);
  EXPECT_FALSE(queue.read().has_value());

  int context = 0;
  hmr::MemoryRegion mr =
      hmr::MemoryRegion::reg(domain, pages.data(), 4 * kPage, HMR_REMOTE_READ, 0, 0, &context);
  const std::optional<hmr::Event> event = queue.sread(10000);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->event, static_cast<uint32_t>(HMR_MR_COMPLETE));
  EXPECT_EQ(event->error, 0);
  EXPECT_EQ(event->mr, mr.get());
  EXPECT_EQ(event->context, &context);
  EXPECT_NE(mr.key(), HMR_KEY_NOTAVAIL);
  EXPECT_NE(mr.desc(), nullptr);
  EXPECT_FALSE(queue.sread(0).has_value());
}

TEST(CppWrapper, FailedAsynchronousRegistrationIsAnErrorEvent) {
  Pages pages(2 * kPage);
  hmr::EventQueue queue;
  hmr::DomainOptions options = verbs_like();
  options.cache_monitor = "disabled";  // every registration goes to the NIC
  hmr::Domain domain(options);
  EXPECT_EQ(domain.negotiated().cache_max_count, 0u);
  EXPECT_EQ(domain.negotiated().cache_monitor, "disabled");
  domain.bind(queue);

  // The sim NIC has no persistent-memory semantics: it refuses HMR_RMA_PMEM when it registers,
  // which happens on hmr's worker thread, so the failure arrives as an error entry.
  int context = 0;
  hmr::MemoryRegion mr;
  const int code = error_code_of([&] {
    mr = hmr::MemoryRegion::reg(domain, pages.data(), 2 * kPage, HMR_REMOTE_READ, HMR_RMA_PMEM,
                                0, &context);
  });
  if (code != 0) {
    EXPECT_EQ(code, HMR_EOPNOTSUPP);  // refused while validating, before going asynchronous
  } else {
    const std::optional<hmr::Event> event = queue.sread(10000);
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(event->error, HMR_EOPNOTSUPP);
    EXPECT_NE(event->reason, "");
    EXPECT_EQ(event->mr, mr.get());
    EXPECT_EQ(event->context, &context);
    EXPECT_EQ(mr.key(), HMR_KEY_NOTAVAIL);
    EXPECT_EQ(mr.desc(), nullptr);
  }
  EXPECT_NO_THROW(mr.close());  // a failed asynchronous registration must still be closed
  EXPECT_EQ(open_mrs(domain), 0u);
}

TEST(CppWrapper, RepeatedRegistrationsShareACachedRegistration) {
  Pages pages(4 * kPage);
  hmr::Domain domain(verbs_like());
  if (domain.negotiated().cache_max_count == 0) {
    GTEST_SKIP() << "caching is off here (monitor " << domain.negotiated().cache_monitor << ")";
  }
  hmr::MemoryRegion whole =
      hmr::MemoryRegion::reg(domain, pages.data(), 4 * kPage, HMR_REMOTE_READ);
  hmr::MemoryRegion part =
      hmr::MemoryRegion::reg(domain, pages.data() + kPage, kPage, HMR_REMOTE_READ);
  EXPECT_EQ(part.key(), whole.key());  // one NIC registration, one key
  hmr::DomainStats stats = domain.stats();
  EXPECT_EQ(stats.nic_registrations, 1u);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.cache_in_use, 1u);
  whole.close();
  part.close();
  stats = domain.stats();
  EXPECT_EQ(stats.cache_in_use, 0u);
  EXPECT_EQ(stats.cache_regions, 1u);
  domain.cache_flush();
  EXPECT_EQ(domain.stats().cache_regions, 0u);
}

TEST(CppWrapper, UnmappedPageInAnAllocatedDomainThrowsEfault) {
  Pages pages(2 * kPage);
  hmr::Domain domain(verbs_like());  // ALLOCATED: every page must be mapped
  ASSERT_NE(domain.negotiated().mr_mode & HMR_MR_ALLOCATED, 0u);
  ASSERT_EQ(munmap(pages.data() + kPage, kPage), 0);
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg(domain, pages.data(), 2 * kPage, HMR_REMOTE_READ);
            }),
            HMR_EFAULT);
  EXPECT_EQ(domain.stats().registration_errors, 1u);
}

TEST(CppWrapper, RegvAndRefresh) {
  Pages pages(4 * kPage);
  hmr::Domain domain(verbs_like("|MMU_NOTIFY", HMR_MR_MMU_NOTIFY));
  const std::vector<iovec> segments = {{pages.data(), kPage}, {pages.data() + 2 * kPage, kPage}};
  hmr::MemoryRegion mr = hmr::MemoryRegion::regv(domain, segments, HMR_REMOTE_WRITE);
  EXPECT_EQ(domain.stats().mr_bytes, 2 * kPage);
  EXPECT_NO_THROW(mr.refresh(pages.data(), kPage));
  EXPECT_EQ(error_code_of([&] { mr.refresh(pages.data() + 3 * kPage, kPage); }), HMR_EINVAL);
}

TEST(CppWrapper, OpAvailableAnswersWithAReasonAndUnavailableCallsThrowEnosys) {
  hmr::Domain domain(verbs_like());  // VIRT_ADDR: every operation the sim NIC has
  for (int op = 0; op < HMR_MD_OP_COUNT; ++op) {
    const hmr::OpAvailability answer = domain.op_available(static_cast<hmr_md_op>(op));
    EXPECT_TRUE(answer) << "op " << op << ": " << answer.reason;
    EXPECT_EQ(answer.reason, "") << "op " << op;
  }
  const auto out_of_range = static_cast<hmr_md_op>(HMR_MD_OP_COUNT);
  EXPECT_EQ(error_code_of([&] { (void)domain.op_available(out_of_range); }), HMR_EINVAL);

  // Offsets, not virtual addresses: no single key can cover the whole address space.
  hmr::Domain offsets;
  const hmr::OpAvailability implicit = offsets.op_available(HMR_MD_OP_IMPLICIT_ODP);
  EXPECT_FALSE(implicit);
  EXPECT_NE(implicit.reason, "");

  // RAW keys leave no room for window keys: the answer says why, and the call throws.
  hmr::Domain raw(verbs_like("|RAW", HMR_MR_RAW));
  const hmr::OpAvailability windows = raw.op_available(HMR_MD_OP_MEMORY_WINDOWS);
  EXPECT_FALSE(windows);
  EXPECT_NE(windows.reason, "");
  try {
    hmr::MemoryWindow window(raw);
    ADD_FAILURE() << "a window was allocated in a RAW-key domain";
  } catch (const hmr::Error& error) {
    EXPECT_EQ(error.code(), HMR_ENOSYS);
    EXPECT_NE(std::string(error.what()).find("hmr_mw_alloc"), std::string::npos) << error.what();
  }

  // The sim NIC has no protection domains to move an MR to.
  Pages pages(kPage);
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(domain, pages.data(), kPage, HMR_REMOTE_READ);
  int other_pd = 0;
  hmr_mr_rereg_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic_pd = &other_pd;
  EXPECT_EQ(error_code_of([&] { mr.rereg(HMR_MR_REREG_PD, attr); }), HMR_ENOSYS);
  EXPECT_EQ(error_code_of([&] { mr.rereg(0, attr); }), HMR_EBADFLAGS);
  EXPECT_EQ(error_code_of([&] { mr.rereg_access(0); }), HMR_EINVAL);
}

TEST(CppWrapper, MemoryWindowBindsMovesAndRevokesItsKey) {
  Pages source(kPage);
  Pages target(4 * kPage);
  hmr::Domain domain(verbs_like());
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(
      domain, target.data(), 4 * kPage, HMR_REMOTE_WRITE | HMR_REMOTE_READ | HMR_MW_BIND);
  hmr::MemoryWindow window(domain);  // declared after the MR, so closed before it

  uint8_t* const inside = target.data() + kPage;
  const uint64_t key = window.bind(mr, inside, kPage, HMR_REMOTE_WRITE);
  EXPECT_NE(key, mr.key());
  std::memset(source.data(), 0x3c, kPage);
  initiator.write(source.data(), kPage, nullptr, va(inside), key);
  EXPECT_EQ(std::memcmp(inside, source.data(), kPage), 0);
  // Outside the window's range, or an operation it does not grant.
  EXPECT_EQ(error_code_of([&] {
              initiator.write(source.data(), 8, nullptr, va(target.data()), key);
            }),
            HMR_EFAULT);
  EXPECT_EQ(error_code_of([&] { initiator.read(source.data(), 8, nullptr, va(inside), key); }),
            HMR_EACCES);
  // The MR stays while a window is bound to it.
  EXPECT_EQ(error_code_of([&] { mr.close(); }), HMR_EBUSY);
  EXPECT_EQ(error_code_of([&] { mr.rereg_access(HMR_REMOTE_READ | HMR_MW_BIND); }), HMR_EBUSY);
  EXPECT_TRUE(mr);

  // A type 1 window re-binds at once: a new key, and the old one is dead.
  uint8_t* const elsewhere = target.data() + 2 * kPage;
  const uint64_t moved = window.bind(mr, elsewhere, kPage, HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  EXPECT_NE(moved, key);
  EXPECT_EQ(error_code_of([&] { initiator.write(source.data(), 8, nullptr, va(inside), key); }),
            HMR_EACCES);
  initiator.write(source.data(), 8, nullptr, va(elsewhere), moved);
  EXPECT_EQ(std::memcmp(elsewhere, source.data(), 8), 0);

  window.invalidate();
  EXPECT_EQ(error_code_of([&] {
              initiator.write(source.data(), 8, nullptr, va(elsewhere), moved);
            }),
            HMR_EACCES);
  EXPECT_EQ(error_code_of([&] { window.invalidate(); }), HMR_EINVAL);  // not bound
  EXPECT_NO_THROW(mr.close());
}

TEST(CppWrapper, Type2WindowIsInvalidatedBeforeItRebindsAndHoldsItsDomain) {
  Pages target(kPage);
  hmr::Domain domain(verbs_like());
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(domain, target.data(), kPage,
                                                HMR_REMOTE_WRITE | HMR_MW_BIND);
  hmr::MemoryRegion plain = hmr::MemoryRegion::reg(domain, target.data(), kPage, HMR_REMOTE_WRITE);
  hmr::MemoryWindow window(domain, HMR_MW_TYPE_2);
  hmr::MemoryWindow other(domain);

  const uint64_t first = window.bind(mr, target.data(), kPage, HMR_REMOTE_WRITE);
  EXPECT_EQ(error_code_of([&] { (void)window.bind(mr, target.data(), kPage, HMR_REMOTE_WRITE); }),
            HMR_EBUSY);
  window.invalidate();
  EXPECT_NE(window.bind(mr, target.data(), kPage, HMR_REMOTE_WRITE), first);

  // An MR registered without HMR_MW_BIND takes no window; a window grants no more than its MR.
  EXPECT_EQ(error_code_of([&] { (void)other.bind(plain, target.data(), kPage, HMR_REMOTE_WRITE); }),
            HMR_EINVAL);
  EXPECT_EQ(error_code_of([&] { (void)other.bind(mr, target.data(), kPage, HMR_REMOTE_READ); }),
            HMR_EACCES);

  // A move hands the window over; the moved-from object throws instead of passing NULL.
  hmr::MemoryWindow moved(std::move(window));
  EXPECT_FALSE(window);  // NOLINT(bugprone-use-after-move): that is the point
  EXPECT_EQ(error_code_of([&] { window.invalidate(); }), HMR_EINVAL);
  moved.invalidate();
  mr.close();
  plain.close();
  // Open windows keep the domain open, bound or not.
  EXPECT_EQ(error_code_of([&] { domain.close(); }), HMR_EBUSY);
  moved.close();
  other.close();
  EXPECT_FALSE(moved);
  EXPECT_NO_THROW(domain.close());
}

TEST(CppWrapper, IndirectKeySpansTwoMrsFromAddressZero) {
  constexpr size_t kTail = 100;  // the last bytes of the first buffer
  constexpr size_t kHead = 156;  // the first bytes of the second
  constexpr size_t kTotal = kTail + kHead;
  Pages first(kPage);
  Pages second(kPage);
  Pages source(kPage);
  Pages sink(kPage);
  for (size_t i = 0; i < kTotal; ++i) source.data()[i] = static_cast<uint8_t>(i * 7 + 1);

  hmr::Domain domain(verbs_like());  // VIRT_ADDR, yet the indirect key counts from 0
  hmr::Endpoint responder(domain);   // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);
  hmr::MemoryRegion a =
      hmr::MemoryRegion::reg(domain, first.data(), kPage, HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  hmr::MemoryRegion b =
      hmr::MemoryRegion::reg(domain, second.data(), kPage, HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg_indirect(domain, std::vector<hmr_mr_segment>(),
                                                    HMR_REMOTE_WRITE);
            }),
            HMR_EINVAL);
  const std::vector<hmr_mr_segment> segments = {{a.get(), first.data() + kPage - kTail, kTail},
                                                {b.get(), second.data(), kHead}};
  hmr::MemoryRegion indirect =
      hmr::MemoryRegion::reg_indirect(domain, segments, HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  ASSERT_NE(indirect.key(), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(indirect.raw_key().base_addr, 0u);

  // One write across the boundary lands in both buffers, in order, and nowhere else.
  initiator.write(source.data(), kTotal, nullptr, 0, indirect.key());
  EXPECT_EQ(std::memcmp(first.data() + kPage - kTail, source.data(), kTail), 0);
  EXPECT_EQ(std::memcmp(second.data(), source.data() + kTail, kHead), 0);
  EXPECT_EQ(first.data()[kPage - kTail - 1], 0);
  EXPECT_EQ(second.data()[kHead], 0);
  initiator.read(sink.data(), 20, nullptr, kTail - 10, indirect.key());
  EXPECT_EQ(std::memcmp(sink.data(), source.data() + kTail - 10, 20), 0);
  EXPECT_EQ(error_code_of([&] {
              initiator.write(source.data(), 1, nullptr, kTotal, indirect.key());
            }),
            HMR_EFAULT);

  // Its packed key carries address 0 too.
  const hmr::RemoteKey remote = hmr::RemoteKey::unpack(domain, indirect.pack_rkey());
  EXPECT_EQ(remote.addr(), 0u);
  initiator.read(sink.data(), kTotal, nullptr, remote.addr(), remote.key());
  EXPECT_EQ(std::memcmp(sink.data(), source.data(), kTotal), 0);

  // The MRs under it stay until it is closed.
  EXPECT_EQ(error_code_of([&] { a.close(); }), HMR_EBUSY);
  EXPECT_TRUE(a);
  indirect.close();
  EXPECT_NO_THROW(a.close());
}

TEST(CppWrapper, ReregMovesTheMrToAnotherBufferAndChangesItsAccess) {
  Pages old_buffer(kPage);
  Pages new_buffer(kPage);
  Pages source(kPage);
  std::memset(source.data(), 0x77, kPage);
  hmr::DomainOptions options = verbs_like();
  options.cache_monitor = "disabled";  // the old registration goes with the rereg
  hmr::Domain domain(options);
  hmr::Endpoint responder(domain);  // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);
  hmr::MemoryRegion mr = hmr::MemoryRegion::reg(domain, old_buffer.data(), kPage,
                                                HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  const uint64_t old_key = mr.key();

  mr.rereg_translation(new_buffer.data(), kPage);
  const uint64_t new_key = mr.key();
  EXPECT_NE(new_key, old_key);  // provider keys: a new translation, a new key
  EXPECT_EQ(mr.raw_key().base_addr, va(new_buffer.data()));
  initiator.write(source.data(), kPage, nullptr, va(new_buffer.data()), new_key);
  EXPECT_EQ(std::memcmp(new_buffer.data(), source.data(), kPage), 0);
  EXPECT_EQ(old_buffer.data()[0], 0);
  EXPECT_NE(error_code_of([&] {
              initiator.write(source.data(), 8, nullptr, va(old_buffer.data()), new_key);
            }),
            0);
  EXPECT_EQ(error_code_of([&] {
              initiator.write(source.data(), 8, nullptr, va(new_buffer.data()), old_key);
            }),
            HMR_EACCES);

  // Read-only from now on.
  mr.rereg_access(HMR_REMOTE_READ);
  EXPECT_EQ(error_code_of([&] {
              initiator.write(source.data(), 8, nullptr, va(new_buffer.data()), mr.key());
            }),
            HMR_EACCES);
  std::memset(source.data(), 0, kPage);
  initiator.read(source.data(), kPage, nullptr, va(new_buffer.data()), mr.key());
  EXPECT_EQ(source.data()[kPage - 1], 0x77);
}

TEST(CppWrapper, OdpMrIsAdvisedIntoMemoryAndImplicitOdpCoversAnyBuffer) {
  constexpr size_t kPages = 8;
  Pages lazy(kPages * kPage);  // never touched: no page of it is resident yet
  Pages source(kPage);
  Pages target(kPage);
  hmr::Domain domain(verbs_like());  // ALLOCATED, which ODP registrations skip
  hmr::Endpoint responder(domain);   // declared first, so the initiator is closed first
  hmr::Endpoint initiator(domain);
  initiator.connect(responder);

  hmr::MemoryRegion odp = hmr::MemoryRegion::reg(domain, lazy.data(), kPages * kPage,
                                                 HMR_REMOTE_WRITE, HMR_MR_ODP);
  EXPECT_EQ(resident_pages(lazy.data(), kPages * kPage), 0u);
  odp.advise(lazy.data(), 4 * kPage, HMR_MADV_NORMAL);  // no expectation: nothing is done
  EXPECT_EQ(resident_pages(lazy.data(), kPages * kPage), 0u);
  odp.advise(lazy.data(), 4 * kPage);  // WILLNEED
  EXPECT_EQ(resident_pages(lazy.data(), 4 * kPage), 4u);
  EXPECT_EQ(error_code_of([&] { odp.advise(lazy.data(), (kPages + 1) * kPage); }), HMR_EINVAL);
  // (An advice outside the enum is refused too; it is passed from C in odp_test.cpp, since a
  // C++ enum holding it is undefined behaviour.)

  // A pinned MR needs no prefetch: WILLNEED succeeds and does nothing.
  hmr::MemoryRegion pinned = hmr::MemoryRegion::reg(domain, target.data(), kPage, HMR_REMOTE_WRITE);
  EXPECT_NO_THROW(pinned.advise(target.data(), kPage));
  pinned.close();

  // One implicit ODP key reaches every mapped buffer by its virtual address.
  hmr::MemoryRegion everything =
      hmr::MemoryRegion::reg(domain, nullptr, SIZE_MAX, HMR_REMOTE_WRITE, HMR_MR_ODP);
  std::memset(source.data(), 0x5e, kPage);
  initiator.write(source.data(), kPage, nullptr, va(target.data()), everything.key());
  EXPECT_EQ(std::memcmp(target.data(), source.data(), kPage), 0);

  // Without virtual addresses there is no whole address space to cover.
  hmr::Domain offsets;
  EXPECT_EQ(error_code_of([&] {
              (void)hmr::MemoryRegion::reg(offsets, nullptr, SIZE_MAX, HMR_REMOTE_WRITE,
                                           HMR_MR_ODP);
            }),
            HMR_EINVAL);
}

}  // namespace

// A NIC whose deregistrations fail: hmr_mr_close then reports the failure but the MR is gone
// (docs/semantics.md, "the MR is closed either way").
int keyed_registration(void*, const hmr_nic_reg_request*, hmr_nic_mr* mr, char*, size_t) {
  static uint64_t next_key = 1000;
  mr->handle = reinterpret_cast<void*>(uintptr_t{1});
  mr->key = next_key++;
  return 0;
}
int failing_deregistration(void*, const hmr_nic_mr*, char* reason, size_t reason_size) {
  std::snprintf(reason, reason_size, "the test's NIC refuses every deregistration");
  return -HMR_EIO;
}

// The wrapper kept the handle of an MR whose close failed but freed it, and its destructor
// closed it again: the freed handle's storage was by then the next MR's (handle storage is a
// free list, last freed first reused), so an unrelated MR was closed under its owner.
TEST(CppWrapper, AFailedCloseThatFreedTheObjectLetsGoOfTheHandle) {
  hmr_nic_callbacks callbacks =
      hmr_test::callback_nic(nullptr, 0, keyed_registration, failing_deregistration);
  hmr_domain_attr attr = hmr_test::callback_domain_attr(callbacks, HMR_MR_PROV_KEY);  // NIC's keys
  attr.cache_monitor = "disabled";  // every close deregisters
  hmr::Domain domain(attr);
  Pages pages(2 * 4096);
  auto first = hmr::MemoryRegion::reg(domain, pages.data(), 4096, HMR_REMOTE_READ);
  EXPECT_THROW(first.close(), hmr::Error);
  EXPECT_FALSE(first) << "the handle of a closed MR was kept";
  auto second = hmr::MemoryRegion::reg(domain, pages.data() + 4096, 4096, HMR_REMOTE_READ);
  const uint64_t key = second.key();
  { hmr::MemoryRegion gone = std::move(first); }  // its destructor
  EXPECT_EQ(hmr_mr_key(second.get()), key) << "another MR's destructor closed this one";
  EXPECT_THROW(second.close(), hmr::Error);  // (its deregistration fails too)
  EXPECT_FALSE(second);
}
