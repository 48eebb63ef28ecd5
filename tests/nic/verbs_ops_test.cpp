// The verbs adapter's optional operations against the fake libibverbs: re-registration,
// memory windows (type 1 and 2), and on-demand paging with prefetch advice.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

using VerbsReregTest = VerbsTest;
using VerbsWindowTest = VerbsTest;
using VerbsOdpTest = VerbsTest;

constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;

// ---------------------------------------------------------------- re-registration --------

TEST_F(VerbsReregTest, TranslationChangeTakesTheNewKeys) {
  open();
  std::vector<char> first(8192), second(16384);
  const iovec segment{first.data(), first.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, kRemote));
  ASSERT_TRUE(registered.ok());
  const void* desc_before = registered->desc;
  const uint64_t key_before = registered->key.low_u64();

  nic::ReregRequest request;
  request.translation = {iovec{second.data(), second.size()}};
  Status status = nic_->rereg(*registered, request);
  ASSERT_TRUE(status.ok()) << status.reason();
  fake_ibverbs_rereg call{};
  fake().last_rereg(&call);
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_TRANSLATION);
  EXPECT_EQ(call.addr, reinterpret_cast<uintptr_t>(second.data()));
  EXPECT_EQ(call.length, second.size());
  EXPECT_EQ(call.access, 0);  // only with CHANGE_ACCESS, or ibv_rereg_mr refuses
  EXPECT_EQ(registered->desc, desc_before);  // the same descriptor, new contents
  EXPECT_NE(registered->key.low_u64(), key_before);
  EXPECT_EQ(registered->key.low_u64(), chunk_of(*registered, 0)->rkey);
  EXPECT_EQ(registered->base_addr, reinterpret_cast<uintptr_t>(second.data()));
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

// ibv_rereg_mr passes access bits as given (it does not drop optional ones a kernel lacks, as
// ibv_reg_mr_iova2 does), so a re-registration never asks for relaxed ordering.
TEST_F(VerbsReregTest, AccessChangeNeverCarriesTheOptionalRelaxedOrderingBit) {
  open("relaxed_ordering=on");
  std::vector<char> buffer(8192);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, kRemote));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_NE(registrations().back().access & verbs::IBV_ACCESS_RELAXED_ORDERING, 0u);
  nic::ReregRequest request;
  request.access = HMR_REMOTE_READ;
  ASSERT_TRUE(nic_->rereg(*registered, request).ok());
  fake_ibverbs_rereg call{};
  fake().last_rereg(&call);
  EXPECT_EQ(call.access & verbs::IBV_ACCESS_RELAXED_ORDERING, 0);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsReregTest, AccessAndProtectionDomainChange) {
  verbs::ibv_pd* pd = app_pd();
  open("relaxed_ordering=off", pd);
  verbs::ibv_pd* other = fake().alloc_pd(pd->context);
  ASSERT_NE(other, nullptr);
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  // (HMR_RECV: pinned for writing, so remote writes need no new pin)
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_RECV));
  ASSERT_TRUE(registered.ok());

  nic::ReregRequest request;
  request.access = HMR_REMOTE_WRITE;
  request.protection_domain = other;
  ASSERT_TRUE(nic_->rereg(*registered, request).ok());
  fake_ibverbs_rereg call{};
  fake().last_rereg(&call);
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_ACCESS | verbs::IBV_REREG_MR_CHANGE_PD);
  EXPECT_EQ(call.pd, static_cast<void*>(other));
  EXPECT_EQ(call.access, verbs::IBV_ACCESS_LOCAL_WRITE | verbs::IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(chunk_of(*registered, 0)->pd, other);

  // Narrowed and widened again in place: the pin stays writable (the kernel's umem keeps
  // `writable` through a change of access alone).
  request.protection_domain = nullptr;
  request.access = HMR_SEND;
  ASSERT_TRUE(nic_->rereg(*registered, request).ok());
  request.access = HMR_REMOTE_WRITE;
  ASSERT_TRUE(nic_->rereg(*registered, request).ok());
  fake().last_rereg(&call);
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_ACCESS);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
  EXPECT_EQ(fake().dealloc_pd(other), 0);
}

// Memory pinned read-only (registered for sending) cannot be made writable in place: the
// kernel refuses the change of access alone with EACCES (ib_umem_check_rereg) before it
// changes anything, so the registration stays as it was and usable, and the reason says how
// to pin it for writing: the range again, as a new translation.  It was marked unusable, a
// valid MR lost.
TEST_F(VerbsReregTest, ReadOnlyPinnedMemoryIsMadeWritableOnlyWithItsRangeAgain) {
  open("relaxed_ordering=off");
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_SEND));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  const KeyBytes key = registered->key;

  nic::ReregRequest request;
  request.access = HMR_REMOTE_WRITE;
  const Status widened = nic_->rereg(*registered, request);
  EXPECT_EQ(widened.code(), HMR_EACCES) << widened.reason();
  EXPECT_NE(widened.reason().find("unchanged"), std::string::npos) << widened.reason();
  EXPECT_NE(widened.reason().find("new translation"), std::string::npos) << widened.reason();
  EXPECT_TRUE(nic_->usable_after_failed_rereg(*registered));
  EXPECT_TRUE(registered->key == key);

  request.translation = {segment};  // pinned again, for writing
  ASSERT_TRUE(nic_->rereg(*registered, request).ok());
  fake_ibverbs_rereg call{};
  fake().last_rereg(&call);
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_ACCESS | verbs::IBV_REREG_MR_CHANGE_TRANSLATION);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsReregTest, BadRequestsChangeNothing) {
  open();
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_SEND));
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(nic_->rereg(*registered, {}).code(), HMR_EINVAL);  // nothing to change
  nic::ReregRequest empty_range;
  empty_range.translation = {iovec{buffer.data(), 0}};
  EXPECT_EQ(nic_->rereg(*registered, empty_range).code(), HMR_EINVAL);
  // A PD of another device context.
  AppPd elsewhere(fake(), 1);
  nic::ReregRequest foreign;
  foreign.protection_domain = elsewhere.pd();
  EXPECT_EQ(nic_->rereg(*registered, foreign).code(), HMR_EINVAL);
  nic::Registration not_ours;
  nic::ReregRequest access;
  access.access = HMR_SEND;
  EXPECT_EQ(nic_->rereg(not_ours, access).code(), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 0);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsReregTest, FailuresSayWhetherTheRegistrationSurvived) {
  open();
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_SEND));
  ASSERT_TRUE(registered.ok());
  nic::ReregRequest request;
  request.access = HMR_RECV;

  fake().set_rereg_result(verbs::IBV_REREG_MR_ERR_INPUT, EINVAL);
  Status status = nic_->rereg(*registered, request);
  EXPECT_EQ(status.code(), HMR_EINVAL);
  EXPECT_TRUE(contains(status.reason(), "unchanged")) << status.reason();

  fake().set_rereg_result(verbs::IBV_REREG_MR_ERR_CMD, EIO);
  status = nic_->rereg(*registered, request);
  EXPECT_EQ(status.code(), HMR_EIO);
  EXPECT_TRUE(contains(status.reason(), "only for deregistration")) << status.reason();
  fake().set_rereg_result(0, 0);
  EXPECT_EQ(nic_->rereg(*registered, request).code(), HMR_EIO);  // unusable from now on
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsReregTest, ChunkedDmabufAndOffsetRegistrationsAreNotReregistered) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = 8192; });
  open();
  std::vector<char> buffer(4 * 8192);
  nic::ReregRequest access;
  access.access = HMR_RECV;

  const iovec big{buffer.data(), 3 * 8192};
  Result<nic::Registration> chunked = nic_->register_memory(host_request(big, HMR_SEND));
  ASSERT_TRUE(chunked.ok()) << chunked.status().reason();
  EXPECT_EQ(nic_->rereg(*chunked, access).code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(nic_->deregister(*chunked).ok());

  const iovec small{buffer.data(), 4096};
  nic::RegistrationRequest offset_request = host_request(small, HMR_SEND);
  offset_request.virt_addr = false;
  Result<nic::Registration> offset = nic_->register_memory(offset_request);
  ASSERT_TRUE(offset.ok());
  nic::ReregRequest move;
  move.translation = {iovec{buffer.data() + 8192, 4096}};
  EXPECT_EQ(nic_->rereg(*offset, move).code(), HMR_EOPNOTSUPP);
  move.translation = {iovec{buffer.data(), 2 * 8192}};  // above max_mr_size
  EXPECT_EQ(nic_->rereg(*offset, move).code(), HMR_EINVAL);
  EXPECT_TRUE(nic_->deregister(*offset).ok());
}

// ---------------------------------------------------------------- memory windows ---------

class VerbsWindowLifecycle : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    open();
    buffer_.resize(16384);
    segment_ = {buffer_.data(), buffer_.size()};
    Result<nic::Registration> registered =
        nic_->register_memory(host_request(segment_, kRemote | HMR_MW_BIND));
    ASSERT_TRUE(registered.ok()) << registered.status().reason();
    registration_ = *registered;
    qp_ = fake().create_qp(verbs_nic().pd());
    ASSERT_NE(qp_, nullptr);
  }
  void TearDown() override {
    if (registration_.handle != nullptr) {
      EXPECT_TRUE(nic_->deregister(registration_).ok());
    }
    fake().destroy_qp(qp_);
    VerbsTest::TearDown();
  }
  nic::WindowBind bind_request(uint64_t offset, uint64_t len) const {
    nic::WindowBind bind;
    bind.registration = &registration_;
    bind.addr = reinterpret_cast<uintptr_t>(buffer_.data()) + offset;
    bind.len = len;
    bind.access = HMR_REMOTE_READ;
    bind.queue = qp_;
    bind.work_request_id = 77;
    return bind;
  }

  std::vector<char> buffer_;
  iovec segment_{};
  nic::Registration registration_;
  void* qp_ = nullptr;
};

TEST_F(VerbsWindowLifecycle, TypeOneAllocBindInvalidateDealloc) {
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type1);
  ASSERT_TRUE(window.ok()) << window.status().reason();
  EXPECT_EQ(fake().live("mws"), 1);
  const uint64_t first_key = window->key.low_u64();

  ASSERT_TRUE(nic_->bind_window(*window, bind_request(4096, 4096)).ok());
  fake_ibverbs_window_op op{};
  fake().last_window_op(&op);
  EXPECT_STREQ(op.entry, "bind_mw");
  EXPECT_EQ(op.wr_id, 77u);
  EXPECT_EQ(op.send_flags, unsigned{verbs::IBV_SEND_SIGNALED});
  EXPECT_EQ(op.addr, reinterpret_cast<uintptr_t>(buffer_.data()) + 4096);
  EXPECT_EQ(op.length, 4096u);
  EXPECT_EQ(op.mw_access, unsigned{verbs::IBV_ACCESS_REMOTE_READ});
  EXPECT_EQ(op.mr, desc_of(registration_).mr);
  EXPECT_EQ(window->key.low_u64(), op.new_rkey);
  EXPECT_NE(window->key.low_u64(), first_key);  // every binding gets a new key
  EXPECT_EQ(window->key.low_u64() & ~0xffull, first_key & ~0xffull);

  ASSERT_TRUE(nic_->invalidate_window(*window, qp_, 78, false).ok());
  fake().last_window_op(&op);
  EXPECT_STREQ(op.entry, "bind_mw");
  // A zero-length bind naming the MR it was bound to (never NULL: irdma reads the MR).
  EXPECT_EQ(op.mr, desc_of(registration_).mr);
  EXPECT_EQ(op.length, 0u);
  EXPECT_EQ(nic_->invalidate_window(*window, qp_, 79, false).code(), HMR_EINVAL);  // not bound

  ASSERT_TRUE(nic_->dealloc_window(*window).ok());
  EXPECT_EQ(window->handle, nullptr);
  EXPECT_EQ(fake().live("mws"), 0);
}

TEST_F(VerbsWindowLifecycle, TypeTwoBindsAndInvalidatesThroughWorkRequests) {
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type2);
  ASSERT_TRUE(window.ok()) << window.status().reason();
  nic::WindowBind bind = bind_request(0, 8192);
  bind.access = kRemote;
  ASSERT_TRUE(nic_->bind_window(*window, bind).ok());
  fake_ibverbs_window_op op{};
  fake().last_window_op(&op);
  EXPECT_STREQ(op.entry, "post_send");
  EXPECT_EQ(op.opcode, verbs::IBV_WR_BIND_MW);
  EXPECT_EQ(op.mw_access, unsigned{verbs::IBV_ACCESS_REMOTE_READ | verbs::IBV_ACCESS_REMOTE_WRITE});
  EXPECT_EQ(window->key.low_u64(), op.new_rkey);

  // A registration with a bound type 2 window cannot be deregistered.
  Status busy = nic_->deregister(registration_);
  EXPECT_EQ(busy.code(), HMR_EBUSY);
  EXPECT_TRUE(contains(busy.reason(), "memory windows")) << busy.reason();

  ASSERT_TRUE(nic_->invalidate_window(*window, qp_, 5, true).ok());
  fake().last_window_op(&op);
  EXPECT_EQ(op.opcode, verbs::IBV_WR_LOCAL_INV);
  EXPECT_EQ(op.invalidate_rkey, window->key.low_u64());
  ASSERT_TRUE(nic_->dealloc_window(*window).ok());
}

TEST_F(VerbsWindowLifecycle, BadBindsAreRefused) {
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type1);
  ASSERT_TRUE(window.ok());
  nic::WindowBind bind = bind_request(0, 4096);
  bind.queue = nullptr;
  EXPECT_EQ(nic_->bind_window(*window, bind).code(), HMR_EINVAL);
  bind = bind_request(0, 4096);
  bind.access = HMR_SEND;
  EXPECT_EQ(nic_->bind_window(*window, bind).code(), HMR_EINVAL);
  bind = bind_request(8192, 16384);  // past the registration's end
  EXPECT_EQ(nic_->bind_window(*window, bind).code(), HMR_EINVAL);
  bind = bind_request(0, 4096);
  bind.registration = nullptr;
  EXPECT_EQ(nic_->bind_window(*window, bind).code(), HMR_EINVAL);
  // A QP of another device context.
  AppPd elsewhere(fake(), 1);
  void* foreign_qp = fake().create_qp(elsewhere.pd());
  bind = bind_request(0, 4096);
  bind.queue = foreign_qp;
  EXPECT_EQ(nic_->bind_window(*window, bind).code(), HMR_EINVAL);
  fake().destroy_qp(foreign_qp);
  EXPECT_EQ(fake().call_count("bind_mw"), 0);
  // The provider's own refusal is passed on.
  fake().set_failure("bind_mw", ENOMEM);
  EXPECT_EQ(nic_->bind_window(*window, bind_request(0, 4096)).code(), HMR_ENOMEM);
  fake().set_failure("bind_mw", 0);

  nic::MemoryWindow not_ours;
  EXPECT_EQ(nic_->bind_window(not_ours, bind_request(0, 4096)).code(), HMR_EINVAL);
  EXPECT_EQ(nic_->dealloc_window(not_ours).code(), HMR_EINVAL);
  fake().set_failure("dealloc_mw", EBUSY);
  EXPECT_EQ(nic_->dealloc_window(*window).code(), HMR_EBUSY);
  EXPECT_EQ(fake().live("mws"), 1);  // still allocated and owned
  fake().set_failure("dealloc_mw", 0);
  EXPECT_TRUE(nic_->dealloc_window(*window).ok());
}

TEST_F(VerbsWindowTest, DevicesWithoutWindowsSayWhy) {
  open("device=fake_efa_0");
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type1);
  ASSERT_FALSE(window.ok());
  EXPECT_EQ(window.status().code(), HMR_ENOSYS);
  EXPECT_TRUE(contains(window.status().reason(), "does not advertise")) << window.status().reason();
  EXPECT_EQ(nic_->alloc_window(static_cast<nic::WindowType>(3)).status().code(), HMR_EINVAL);
}

TEST_F(VerbsWindowTest, ProvidersWithoutWindowOpsSayWhy) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.memory_window_ops = 0; });
  open();
  EXPECT_FALSE(nic_->capabilities().memory_windows);
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type2);
  ASSERT_FALSE(window.ok());
  EXPECT_TRUE(contains(window.status().reason(), "alloc_mw")) << window.status().reason();
}

// ---------------------------------------------------------------- on-demand paging -------

TEST_F(VerbsOdpTest, OdpRegistrationsAndPrefetchAdvice) {
  open("odp=on");
  EXPECT_TRUE(nic_->capabilities().on_demand_paging);
  // Pages need not exist yet, so the domain need not check them.
  EXPECT_FALSE(nic_->capabilities().required_mr_mode & HMR_MR_ALLOCATED);
  std::vector<char> buffer(16384);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, kRemote));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_TRUE(registrations().at(0).access & verbs::IBV_ACCESS_ON_DEMAND);

  const iovec ranges[2] = {{buffer.data() + 4096, 4096}, {buffer.data(), 100}};
  ASSERT_TRUE(nic_->advise(*registered, nic::Advice::prefetch_write, ranges, true).ok());
  fake_ibverbs_advice advice{};
  fake().last_advice(&advice);
  EXPECT_EQ(advice.advice, verbs::IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
  EXPECT_EQ(advice.flags, uint32_t{verbs::IBV_ADVISE_MR_FLAG_FLUSH});
  ASSERT_EQ(advice.num_sge, 2u);
  EXPECT_EQ(advice.addr[0], reinterpret_cast<uintptr_t>(buffer.data()) + 4096);
  EXPECT_EQ(advice.length[0], 4096u);
  EXPECT_EQ(advice.lkey[0], chunk_of(*registered, 0)->lkey);
  EXPECT_EQ(advice.length[1], 100u);

  const iovec outside{buffer.data() + 16000, 4096};
  EXPECT_EQ(nic_->advise(*registered, nic::Advice::prefetch, {&outside, 1}, false).code(),
            HMR_EINVAL);
  EXPECT_EQ(nic_->advise(*registered, nic::Advice::prefetch, {}, false).code(), HMR_EINVAL);
  fake().set_failure("advise_mr", EFAULT);
  EXPECT_EQ(nic_->advise(*registered, nic::Advice::prefetch_no_fault, ranges, false).code(),
            HMR_EFAULT);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsOdpTest, AdviceSplitsAtChunkBoundaries) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = 8192; });
  open("odp=on");
  std::vector<char> buffer(3 * 8192);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_RECV));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  const iovec across{buffer.data() + 4096, 2 * 8192};
  ASSERT_TRUE(nic_->advise(*registered, nic::Advice::prefetch, {&across, 1}, false).ok());
  fake_ibverbs_advice advice{};
  fake().last_advice(&advice);
  ASSERT_EQ(advice.num_sge, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(advice.lkey[i], chunk_of(*registered, i)->lkey);
  EXPECT_EQ(advice.length[0], 4096u);
  EXPECT_EQ(advice.length[1], 8192u);
  EXPECT_EQ(advice.length[2], 4096u);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsOdpTest, AdviceNeedsAnOdpRegistration) {
  open();
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_SEND));
  ASSERT_TRUE(registered.ok());
  Status status = nic_->advise(*registered, nic::Advice::prefetch, {&segment, 1}, false);
  EXPECT_EQ(status.code(), HMR_EINVAL);
  EXPECT_TRUE(contains(status.reason(), "odp=on")) << status.reason();
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsOdpTest, OdpNeedsTheDeviceAndTheTransportCaps) {
  Result<std::unique_ptr<nic::Nic>> refused = try_open("odp=on;device=fake_efa_0");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(refused.status().reason(), "IBV_ODP_SUPPORT")) << refused.status().reason();

  fake().configure(0, [](fake_ibverbs_device_config& config) {
    config.odp_rc_caps = verbs::IBV_ODP_SUPPORT_SEND | verbs::IBV_ODP_SUPPORT_READ;
  });
  open("odp=on");
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> failed =
      nic_->register_memory(host_request(segment, HMR_REMOTE_WRITE));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(failed.status().reason(), "write")) << failed.status().reason();
  Result<nic::Registration> readable =
      nic_->register_memory(host_request(segment, HMR_REMOTE_READ));
  ASSERT_TRUE(readable.ok()) << readable.status().reason();
  EXPECT_TRUE(nic_->deregister(*readable).ok());
}

// odp=on pages the CPU's own memory only.  The kernel's dma-buf method takes no
// IBV_ACCESS_ON_DEMAND or IBV_ACCESS_MW_BIND (uverbs_std_types_mr.c: EINVAL, and the fake
// refuses them too), and peer-memory clients do not serve ODP faults, so with odp=on a dma-buf
// and CUDA memory by address register pinned, as libfabric's verbs provider does; HMR_MR_ODP on
// device memory and HMR_MW_BIND on a dma-buf are refused with the reason.  Before, every GPU
// registration of an odp=on domain failed with EINVAL from the kernel.
// libmlx5 binds at most 2 GiB (providers/mlx5/qp.c, set_bind_wr: EOPNOTSUPP; the fake does
// the same): hmr refuses a larger window on mlx5 with the reason, before posting anything.
TEST_F(VerbsWindowLifecycle, Mlx5RefusesWindowsOverTwoGib) {
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type1);
  ASSERT_TRUE(window.ok()) << window.status().reason();
  nic::WindowBind bind = bind_request(0, 4096);
  bind.len = (uint64_t{1} << 31) + 4096;  // (refused before the range is checked)
  const int binds = fake().call_count("bind_mw");
  const Status refused = nic_->bind_window(*window, bind);
  EXPECT_EQ(refused.code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(refused.reason(), "2 GiB")) << refused.reason();
  EXPECT_EQ(fake().call_count("bind_mw"), binds);
  ASSERT_TRUE(nic_->dealloc_window(*window).ok());
}

// irdma's bind_mw reads the MR it is given even to unbind a type 1 window, so an unbind with
// a NULL MR crashes there (the fake, configured as irdma, refuses it with EFAULT instead).
// hmr unbinds with the MR the window is bound to and length 0, as rdma-core's own tests do.
class VerbsIrdmaWindow : public VerbsTest {};

TEST_F(VerbsIrdmaWindow, TypeOneUnbindNamesTheBoundMrForProvidersThatReadIt) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.unbind_derefs_mr = 1; });
  open();
  std::vector<char> buffer(16384);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered =
      nic_->register_memory(host_request(segment, kRemote | HMR_MW_BIND));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  void* qp = fake().create_qp(verbs_nic().pd());
  Result<nic::MemoryWindow> window = nic_->alloc_window(nic::WindowType::type1);
  ASSERT_TRUE(window.ok()) << window.status().reason();
  nic::WindowBind bind;
  bind.registration = &*registered;
  bind.addr = reinterpret_cast<uintptr_t>(buffer.data());
  bind.len = 4096;
  bind.access = HMR_REMOTE_READ;
  bind.queue = qp;
  ASSERT_TRUE(nic_->bind_window(*window, bind).ok());
  const Status unbound = nic_->invalidate_window(*window, qp, 1, false);
  EXPECT_TRUE(unbound.ok()) << unbound.reason();
  EXPECT_TRUE(nic_->dealloc_window(*window).ok());
  EXPECT_TRUE(nic_->deregister(*registered).ok());
  fake().destroy_qp(qp);
}

TEST_F(VerbsOdpTest, OdpOnPagesSystemMemoryOnly) {
  const std::string sysfs = ::testing::TempDir() + "hmr-peermem-sysfs";
  ASSERT_EQ(std::system(("mkdir -p " + sysfs + "/sys/module/nvidia_peermem && echo 1.0 > " +
                         sysfs + "/sys/module/nvidia_peermem/version").c_str()),
            0);
  open("odp=on", nullptr, verbs::VerbsEnvironment{sysfs});
  const FakeDmabuf file(65536);
  ASSERT_GE(file.fd, 0);
  const hmr_mr_dmabuf dmabuf{file.fd, 0, 8192, reinterpret_cast<void*>(kDeviceBase)};
  nic::RegistrationRequest gpu = device_request(dmabuf, kRemote);
  Result<nic::Registration> exported = nic_->register_memory(gpu);
  ASSERT_TRUE(exported.ok()) << exported.status().reason();
  EXPECT_EQ(registrations().back().access & verbs::IBV_ACCESS_ON_DEMAND, 0u);
  EXPECT_TRUE(nic_->deregister(*exported).ok());

  gpu.access = kRemote | HMR_MW_BIND;
  Result<nic::Registration> bindable = nic_->register_memory(gpu);
  ASSERT_FALSE(bindable.ok());
  EXPECT_EQ(bindable.status().code(), HMR_EOPNOTSUPP);
  EXPECT_TRUE(contains(bindable.status().reason(), "MW_BIND")) << bindable.status().reason();

  std::vector<char> device_memory(8192);  // (the fake kernel pins any mapped range)
  const iovec segment{device_memory.data(), device_memory.size()};
  nic::RegistrationRequest by_address = host_request(segment, kRemote);
  by_address.iface = HMR_HMEM_CUDA;
  Result<nic::Registration> peer_direct = nic_->register_memory(by_address);
  ASSERT_TRUE(peer_direct.ok()) << peer_direct.status().reason();
  EXPECT_EQ(registrations().back().access & verbs::IBV_ACCESS_ON_DEMAND, 0u);
  EXPECT_TRUE(nic_->deregister(*peer_direct).ok());
  by_address.on_demand_paging = true;
  Result<nic::Registration> odp_device = nic_->register_memory(by_address);
  ASSERT_FALSE(odp_device.ok());
  EXPECT_EQ(odp_device.status().code(), HMR_EOPNOTSUPP);

  std::vector<char> host(8192);
  const iovec host_segment{host.data(), host.size()};
  Result<nic::Registration> paged = nic_->register_memory(host_request(host_segment, kRemote));
  ASSERT_TRUE(paged.ok()) << paged.status().reason();
  EXPECT_NE(registrations().back().access & verbs::IBV_ACCESS_ON_DEMAND, 0u);
  EXPECT_TRUE(nic_->deregister(*paged).ok());
}

// An atomic on a page the NIC must fault in needs the device's ODP atomic support: without
// IBV_ODP_SUPPORT_ATOMIC in the RC caps an ODP registration asks for no REMOTE_ATOMIC.
TEST_F(VerbsOdpTest, OdpAsksForAtomicsOnlyWhereTheDevicePagesThem) {
  fake().configure(0, [](fake_ibverbs_device_config& config) {
    config.odp_rc_caps = verbs::IBV_ODP_SUPPORT_SEND | verbs::IBV_ODP_SUPPORT_RECV |
                         verbs::IBV_ODP_SUPPORT_WRITE | verbs::IBV_ODP_SUPPORT_READ;
  });
  open("odp=on");
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, kRemote));
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_EQ(registrations().back().access & verbs::IBV_ACCESS_REMOTE_ATOMIC, 0u);
  EXPECT_NE(registrations().back().access & verbs::IBV_ACCESS_ON_DEMAND, 0u);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

// AWS's EFA kernel driver pins CUDA memory itself (nvidia_p2p), so CUDA memory by address
// reaches it without a peer-memory client; before, hmr refused it there.
TEST_F(VerbsOdpTest, EfaTakesCudaMemoryByAddressWithoutAPeerMemoryClient) {
  open("device=fake_efa_0");
  EXPECT_TRUE(nic_->capabilities().peer_direct);
  std::vector<char> device_memory(8192);
  const iovec segment{device_memory.data(), device_memory.size()};
  nic::RegistrationRequest request = host_request(segment, HMR_REMOTE_READ);
  request.iface = HMR_HMEM_CUDA;
  Result<nic::Registration> registered = nic_->register_memory(request);
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

TEST_F(VerbsOdpTest, ProvidersWithoutAdviceSayNotSupported) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.advise_mr = 0; });
  open("odp=on");
  std::vector<char> buffer(4096);
  const iovec segment{buffer.data(), buffer.size()};
  Result<nic::Registration> registered = nic_->register_memory(host_request(segment, HMR_SEND));
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(nic_->advise(*registered, nic::Advice::prefetch, {&segment, 1}, false).code(),
            HMR_EOPNOTSUPP);
  EXPECT_TRUE(nic_->deregister(*registered).ok());
}

}  // namespace
}  // namespace hmr::testing
