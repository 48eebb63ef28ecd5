// The memory operations on the verbs NIC through the public C ABI, against the fake
// libibverbs: what hmr_mr_rereg, the hmr_mw_* calls, HMR_MR_ODP, implicit ODP and
// hmr_mem_advise ask of libibverbs (the fake records every call), what comes back to the
// application (new keys, failures with reasons, a failed re-registration that only closes),
// and which operations hmr_md_query_op reports per device.  Indirect keys (mlx5 UMR) are in
// verbs_indirect_key_test.cpp.  The contract is hmr.h ("memory operations").
#include <hmr/hmr.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/api/memory_ops_support.h"
#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

using hmr_memops_test::alloc_window;
using hmr_memops_test::expect_alloc_window_refused;
using hmr_memops_test::expect_unavailable;
using hmr_memops_test::kKeySentinel;
using hmr_memops_test::MrPtr;
using hmr_memops_test::MwPtr;
using hmr_memops_test::OpAnswer;
using hmr_memops_test::query_op;
using hmr_memops_test::rereg_access;
using hmr_memops_test::rereg_attr;
using hmr_memops_test::rereg_translation;
using hmr_memops_test::sentinel;

constexpr uint64_t kBasicMode = kVerbsBasicMode;
constexpr uint64_t kRemote = kRemoteAccess;
constexpr uint64_t kBindable = kRemote | HMR_MW_BIND;
constexpr size_t kPage = kTestPage;
const char* const kConnectX = kFakeConnectX;
const char* const kEfa = kFakeEfa;

uint64_t va(const void* p) { return reinterpret_cast<uint64_t>(p); }

class VerbsMemoryOpsTest : public VerbsDomainTest {
 protected:
  void TearDown() override {
    if (qp_ != nullptr) fake().destroy_qp(qp_);
    VerbsDomainTest::TearDown();
  }
  // Opens a basic-mode domain or stops the test.
  void open_domain(const char* options = kConnectX, void* handle = nullptr) {
    ASSERT_EQ(VerbsDomainTest::open_domain(options, handle, kBasicMode), 0) << hmr_last_error();
  }
  verbs::ibv_pd* pd() const { return static_cast<verbs::ibv_pd*>(attr_.nic_handle); }
  // A QP of the domain's device, for window binds and invalidations.
  void* qp() {
    if (qp_ == nullptr) qp_ = fake().create_qp(pd());
    EXPECT_NE(qp_, nullptr);
    return qp_;
  }
  hmr_mw_post post(uint64_t wr_id, int unsignaled = 0) {
    hmr_mw_post request;
    std::memset(&request, 0, sizeof request);
    request.size = sizeof request;
    request.queue = qp();
    request.wr_id = wr_id;
    request.unsignaled = unsignaled;
    return request;
  }
  fake_ibverbs_registration last_registration() const {
    const std::vector<fake_ibverbs_registration> made = registrations();
    EXPECT_FALSE(made.empty());
    return made.empty() ? fake_ibverbs_registration{} : made.back();
  }
  fake_ibverbs_rereg last_rereg() const {
    fake_ibverbs_rereg call{};
    fake().last_rereg(&call);
    return call;
  }
  fake_ibverbs_window_op last_window_op() const {
    fake_ibverbs_window_op op{};
    fake().last_window_op(&op);
    return op;
  }
  // hmr_mr_rereg of the access to REMOTE_READ while ibv_rereg_mr answers (result, error):
  // expects -code.
  void expect_failed_access_rereg(hmr_mr* mr, int result, int error, int code) {
    fake().set_rereg_result(result, error);
    EXPECT_HMR_ERROR(rereg_access(mr, HMR_REMOTE_READ), code);
    fake().set_rereg_result(0, 0);
  }
  // A bindable MR over `buffer` and an unbound window of `type` (the window closes first).
  struct WindowOnMr {
    MrPtr mr;
    MwPtr window;
  };
  WindowOnMr window_on(const std::vector<char>& buffer, hmr_mw_type type) {
    WindowOnMr made{reg(buffer.data(), buffer.size(), kBindable), nullptr};
    if (made.mr) made.window = alloc_window(domain_, type);
    return made;
  }

  void* qp_ = nullptr;
};

// ============================================================== hmr_md_query_op

TEST_F(VerbsMemoryOpsTest, ConnectXLikeDeviceHasEveryOperation) {
  open_domain();
  for (const hmr_md_op op : {HMR_MD_OP_REREG, HMR_MD_OP_MEMORY_WINDOWS, HMR_MD_OP_ODP,
                             HMR_MD_OP_IMPLICIT_ODP, HMR_MD_OP_ADVISE, HMR_MD_OP_INDIRECT}) {
    EXPECT_EQ(query_op(domain_, op).rc, 1) << "op " << static_cast<int>(op);
  }
}

// The EFA-like device: no windows, ODP or indirect keys, and no re-registration (EFA's
// provider has no rereg_mr; libibverbs' dummy op answers EOPNOTSUPP).  Before, hmr offered
// re-registration on every device.
TEST_F(VerbsMemoryOpsTest, DeviceWithoutWindowsOrOdpSaysWhy) {
  open_domain(kEfa);
  for (const hmr_md_op op : {HMR_MD_OP_REREG, HMR_MD_OP_MEMORY_WINDOWS, HMR_MD_OP_ODP,
                             HMR_MD_OP_IMPLICIT_ODP, HMR_MD_OP_ADVISE, HMR_MD_OP_INDIRECT}) {
    expect_unavailable(domain_, op);
  }
  {
    std::vector<char> buffer(kPage);
    MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
    ASSERT_TRUE(mr);
    EXPECT_NE(rereg_access(mr.get(), HMR_REMOTE_READ), 0);
    EXPECT_NE(std::string(hmr_last_error()).find("rereg"), std::string::npos) << hmr_last_error();
    EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 0);
    EXPECT_NE(hmr_mr_key(mr.get()), HMR_KEY_NOTAVAIL) << "the MR is usable as it was";
  }
  expect_alloc_window_refused(domain_, HMR_MW_TYPE_1, HMR_ENOSYS);
  EXPECT_EQ(fake().call_count("alloc_mw"), 0);
  std::vector<char> buffer(kPage);
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain_, buffer.data(), buffer.size(), kRemote, 0, 0, HMR_MR_ODP,
                              &mr, nullptr),
                   HMR_ENOSYS);
  EXPECT_EQ(mr, sentinel<hmr_mr>());
}

TEST_F(VerbsMemoryOpsTest, ImplicitOdpNeedsTheDeviceCapability) {
  fake().configure(0, [](fake_ibverbs_device_config& config) {
    config.odp_general_caps = verbs::IBV_ODP_SUPPORT;  // ODP, but not implicit
  });
  open_domain();
  EXPECT_EQ(query_op(domain_, HMR_MD_OP_ODP).rc, 1);
  const OpAnswer implicit = query_op(domain_, HMR_MD_OP_IMPLICIT_ODP);
  EXPECT_EQ(implicit.rc, 0);
  EXPECT_TRUE(contains(implicit.reason, "IMPLICIT")) << implicit.reason;
  const int reg_mr_calls = fake().call_count("ibv_reg_mr");
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain_, nullptr, SIZE_MAX, kRemote, 0, 0, HMR_MR_ODP, &mr, nullptr),
                   HMR_ENOSYS);
  EXPECT_EQ(mr, sentinel<hmr_mr>());
  EXPECT_EQ(fake().call_count("ibv_reg_mr"), reg_mr_calls);
}

TEST_F(VerbsMemoryOpsTest, AdviceNeedsTheProvidersAdviseMr) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.advise_mr = 0; });
  open_domain();
  expect_unavailable(domain_, HMR_MD_OP_ADVISE);
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote, HMR_MR_ODP);
  ASSERT_TRUE(mr);
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), buffer.data(), buffer.size(), HMR_MADV_WILLNEED),
                   HMR_ENOSYS);
}

// ============================================================== re-registration

TEST_F(VerbsMemoryOpsTest, ReregTranslationReachesIbvReregMrAndTheNewKeyComesBack) {
  open_domain();
  std::vector<char> first(2 * kPage);
  std::vector<char> second(4 * kPage);
  MrPtr mr = reg(first.data(), first.size(), kRemote);
  ASSERT_TRUE(mr);
  const uint64_t old_key = hmr_mr_key(mr.get());

  const iovec moved{second.data(), second.size()};
  ASSERT_HMR_OK(rereg_translation(mr.get(), &moved, 1));
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 1);
  const fake_ibverbs_rereg call = last_rereg();
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_TRANSLATION);
  EXPECT_EQ(call.addr, va(second.data()));
  EXPECT_EQ(call.length, second.size());
  EXPECT_EQ(call.access, 0);  // ibv_rereg_mr refuses access bits without CHANGE_ACCESS

  const verbs::ibv_mr* ibv_mr = ibv_mr_of(mr.get());
  ASSERT_NE(ibv_mr, nullptr);
  EXPECT_EQ(ibv_mr->addr, second.data());
  EXPECT_EQ(hmr_mr_key(mr.get()), ibv_mr->rkey);
  EXPECT_NE(hmr_mr_key(mr.get()), old_key) << "the fake hands out new keys on every rereg";
  uint64_t base = 0;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, va(second.data()));
}

TEST_F(VerbsMemoryOpsTest, ReregAccessReachesIbvReregMrAsIbvAccessFlags) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  hmr_mr_rereg_attr attr = rereg_attr();

  attr.access = HMR_REMOTE_READ;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr));
  fake_ibverbs_rereg call = last_rereg();
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_ACCESS);
  EXPECT_EQ(call.access, verbs::IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ibv_mr_of(mr.get()), nullptr);
  EXPECT_EQ(hmr_mr_key(mr.get()), ibv_mr_of(mr.get())->rkey);

  attr.access = kRemote | HMR_MW_BIND;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr));
  call = last_rereg();
  EXPECT_TRUE(call.access & verbs::IBV_ACCESS_MW_BIND);
  EXPECT_TRUE(call.access & verbs::IBV_ACCESS_REMOTE_WRITE);
  EXPECT_TRUE(call.access & verbs::IBV_ACCESS_REMOTE_READ);
  EXPECT_TRUE(call.access & verbs::IBV_ACCESS_LOCAL_WRITE);
  EXPECT_FALSE(call.access & verbs::IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(hmr_mr_key(mr.get()), ibv_mr_of(mr.get())->rkey);

  attr.access = kRemote;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr));
  EXPECT_FALSE(last_rereg().access & verbs::IBV_ACCESS_MW_BIND);

  std::vector<char> other(kPage);
  const iovec moved{other.data(), other.size()};
  attr.mr_iov = &moved;
  attr.iov_count = 1;
  attr.access = HMR_REMOTE_WRITE;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION | HMR_MR_REREG_ACCESS, &attr));
  call = last_rereg();
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_TRANSLATION | verbs::IBV_REREG_MR_CHANGE_ACCESS);
  EXPECT_EQ(call.addr, va(other.data()));
  EXPECT_EQ(call.access, verbs::IBV_ACCESS_LOCAL_WRITE | verbs::IBV_ACCESS_REMOTE_WRITE);
}

TEST_F(VerbsMemoryOpsTest, ReregProtectionDomainTakesAPdOfTheSameDevice) {
  verbs::ibv_pd* const pd_of_app = app_pd();
  open_domain("relaxed_ordering=off", pd_of_app);  // the PD chooses the device
  verbs::ibv_pd* other = fake().alloc_pd(pd_of_app->context);
  ASSERT_NE(other, nullptr);
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  hmr_mr_rereg_attr attr = rereg_attr();

  // Refused before libibverbs is asked: no PD, a PD of another device.
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_PD, &attr), HMR_EINVAL);
  {
    AppPd elsewhere(fake(), 1);
    attr.nic_pd = elsewhere.pd();
    EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_PD, &attr), HMR_EINVAL);
  }
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 0);

  attr.nic_pd = other;
  ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_PD, &attr));
  const fake_ibverbs_rereg call = last_rereg();
  EXPECT_EQ(call.flags, verbs::IBV_REREG_MR_CHANGE_PD);
  EXPECT_EQ(call.pd, static_cast<void*>(other));
  ASSERT_NE(ibv_mr_of(mr.get()), nullptr);
  EXPECT_EQ(ibv_mr_of(mr.get())->pd, other);
  EXPECT_EQ(hmr_mr_key(mr.get()), ibv_mr_of(mr.get())->rkey);

  mr.reset();
  EXPECT_EQ(fake().dealloc_pd(other), 0) << "the MR was not deregistered from the new PD";
}

// A window binds an MR of its own protection domain: one a re-registration moved to another PD
// is refused with the reason (the bind would complete in error and break the QP; neither
// libibverbs nor mlx5 checks when posting).  Found by a review.
TEST_F(VerbsMemoryOpsTest, AWindowDoesNotBindAnMrMovedToAnotherPd) {
  verbs::ibv_pd* const pd_of_app = app_pd();
  open_domain("relaxed_ordering=off", pd_of_app);
  verbs::ibv_pd* other = fake().alloc_pd(pd_of_app->context);
  ASSERT_NE(other, nullptr);
  std::vector<char> buffer(kPage);
  {
    auto [mr, window] = window_on(buffer, HMR_MW_TYPE_1);
    ASSERT_TRUE(mr && window);
    hmr_mr_rereg_attr attr = rereg_attr();
    attr.nic_pd = other;
    ASSERT_HMR_OK(hmr_mr_rereg(mr.get(), HMR_MR_REREG_PD, &attr));
    uint64_t key = kKeySentinel;
    const hmr_mw_post request = post(5);
    EXPECT_HMR_ERROR(hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, kRemote, &request, &key),
                     HMR_EINVAL);
    EXPECT_TRUE(contains(hmr_last_error(), "protection domain")) << hmr_last_error();
    EXPECT_EQ(key, kKeySentinel);
    EXPECT_EQ(fake().call_count("bind_mw"), 0);
  }
  EXPECT_EQ(fake().dealloc_pd(other), 0);
}

TEST_F(VerbsMemoryOpsTest, ReregArgumentErrorsNeverReachLibibverbs) {
  open_domain();
  std::vector<char> buffer(2 * kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  hmr_mr_rereg_attr attr = rereg_attr();
  attr.access = HMR_REMOTE_READ;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), 0, &attr), HMR_EBADFLAGS);
  attr.access = 0;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  ASSERT_EQ(attr_.mr_iov_limit, 1u);
  const iovec two[2] = {{buffer.data(), kPage}, {buffer.data() + kPage, kPage}};
  attr.mr_iov = two;
  attr.iov_count = 2;
  EXPECT_HMR_ERROR(hmr_mr_rereg(mr.get(), HMR_MR_REREG_TRANSLATION, &attr), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 0);
  EXPECT_EQ(hmr_mr_key(mr.get()), key);
}

TEST_F(VerbsMemoryOpsTest, ReregNicFailureLeavesAnMrThatOnlyCloses) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kBindable);
  ASSERT_TRUE(mr);
  expect_failed_access_rereg(mr.get(), verbs::IBV_REREG_MR_ERR_CMD, EIO, HMR_EIO);

  EXPECT_EQ(hmr_mr_key(mr.get()), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(mr.get()), nullptr);
  EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 1) << "a failed MR went back to libibverbs";
  EXPECT_HMR_ERROR(hmr_mem_advise(mr.get(), buffer.data(), buffer.size(), HMR_MADV_WILLNEED),
                   HMR_EINVAL);
  uint64_t base = 0;
  uint8_t raw[HMR_RKEY_RAW_MAX];
  size_t raw_size = sizeof raw;
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr.get(), &base, raw, &raw_size, 0), HMR_EINVAL);
  hmr_mr_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  EXPECT_HMR_ERROR(hmr_mr_query(mr.get(), &info), HMR_EINVAL);
  uint8_t blob[HMR_RKEY_PACKED_MAX];
  size_t blob_len = sizeof blob;
  EXPECT_HMR_ERROR(hmr_rkey_pack(mr.get(), blob, &blob_len), HMR_EINVAL);
  MwPtr window = alloc_window(domain_, HMR_MW_TYPE_1);
  ASSERT_TRUE(window);
  const hmr_mw_post request = post(1);
  uint64_t key = kKeySentinel;
  EXPECT_HMR_ERROR(hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, HMR_REMOTE_READ,
                               &request, &key),
                   HMR_EINVAL);
  EXPECT_EQ(key, kKeySentinel);
  window.reset();

  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  EXPECT_EQ(fake().live("mrs"), 0) << "the failed registration was never deregistered";
}

// ibv_rereg_mr's IBV_REREG_MR_ERR_INPUT means the old MR is still valid (rdma-core's man page),
// and the adapter says "unchanged": the MR stays usable as it was.
TEST_F(VerbsMemoryOpsTest, ReregRefusedInputLeavesTheMrAsItWas) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  void* const desc = hmr_mr_desc(mr.get());
  expect_failed_access_rereg(mr.get(), verbs::IBV_REREG_MR_ERR_INPUT, EINVAL, HMR_EINVAL);
  EXPECT_EQ(hmr_mr_key(mr.get()), key);
  EXPECT_EQ(hmr_mr_desc(mr.get()), desc);
  ASSERT_HMR_OK(rereg_access(mr.get(), HMR_REMOTE_READ));
  EXPECT_EQ(last_rereg().access, verbs::IBV_ACCESS_REMOTE_READ);
}

// A provider that implements rereg_mr while its kernel driver does not answers EOPNOTSUPP
// with IBV_REREG_MR_ERR_CMD (ib_uverbs_rereg_mr refuses before it touches the MR): the MR is
// as it was, not unusable.  A provider without the op at all (libibverbs' dummy) answers
// IBV_REREG_MR_ERR_INPUT with EOPNOTSUPP; both leave the MR usable.
TEST_F(VerbsMemoryOpsTest, ReregUnsupportedByTheKernelLeavesTheMrAsItWas) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  expect_failed_access_rereg(mr.get(), verbs::IBV_REREG_MR_ERR_CMD, EOPNOTSUPP, HMR_EOPNOTSUPP);
  EXPECT_EQ(hmr_mr_key(mr.get()), key) << "the MR was left unusable";
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.rereg_mr = 0; });
  EXPECT_HMR_ERROR(rereg_access(mr.get(), HMR_REMOTE_READ), HMR_EOPNOTSUPP);
  EXPECT_EQ(hmr_mr_key(mr.get()), key);
}

// On iWARP (irdma in iWARP mode, cxgb4, siw) an RDMA Read's response is a tagged write into the
// reader's buffer, so the sink of a Read needs REMOTE_WRITE; libfabric's verbs provider adds
// it.  Before, hmr gave HMR_READ only LOCAL_WRITE, and every Read into such a buffer failed.
TEST_F(VerbsMemoryOpsTest, IwarpReadSinksAllowRemoteWrites) {
  fake().configure(0, [](fake_ibverbs_device_config& config) {
    std::strcpy(config.name, "fake_irdma_0");
    config.vendor_id = 0x8086;
    config.node_type = verbs::IBV_NODE_RNIC;
    config.transport_type = verbs::IBV_TRANSPORT_IWARP;
    config.rereg_mr = 0;
    config.mlx5 = 0;
    config.odp_general_caps = 0;
  });
  open_domain("device=fake_irdma_0;relaxed_ordering=off");
  std::vector<char> buffer(kPage);
  MrPtr sink = reg(buffer.data(), buffer.size(), HMR_READ);
  ASSERT_TRUE(sink);
  EXPECT_EQ(last_registration().access,
            unsigned{verbs::IBV_ACCESS_LOCAL_WRITE | verbs::IBV_ACCESS_REMOTE_WRITE});
  MrPtr source = reg(buffer.data(), buffer.size(), HMR_WRITE);
  ASSERT_TRUE(source);
  EXPECT_EQ(last_registration().access, 0u) << "the source of a Write needs no write access";
  expect_unavailable(domain_, HMR_MD_OP_REREG);
}

// ============================================================== memory windows

TEST_F(VerbsMemoryOpsTest, MwBindAccessBecomesIbvAccessMwBindOnlyWhenAsked) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr plain = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(last_registration().access & verbs::IBV_ACCESS_MW_BIND);
  MrPtr bindable = reg(buffer.data(), buffer.size(), kBindable);
  ASSERT_TRUE(bindable);
  const fake_ibverbs_registration made = last_registration();
  EXPECT_TRUE(made.access & verbs::IBV_ACCESS_MW_BIND);
  EXPECT_TRUE(made.access & verbs::IBV_ACCESS_REMOTE_WRITE);
  EXPECT_FALSE(made.access & verbs::IBV_ACCESS_ON_DEMAND);
}

TEST_F(VerbsMemoryOpsTest, TypeOneWindowBindsThroughIbvBindMw) {
  open_domain();
  std::vector<char> buffer(4 * kPage);
  auto [mr, window] = window_on(buffer, HMR_MW_TYPE_1);
  ASSERT_TRUE(mr && window);
  EXPECT_EQ(fake().live("mws"), 1);

  const hmr_mw_post first_post = post(77);
  uint64_t first_key = kKeySentinel;
  ASSERT_HMR_OK(hmr_mw_bind(window.get(), mr.get(), buffer.data() + kPage, kPage,
                            HMR_REMOTE_READ, &first_post, &first_key));
  fake_ibverbs_window_op op = last_window_op();
  EXPECT_STREQ(op.entry, "bind_mw");
  EXPECT_EQ(op.wr_id, 77u);
  EXPECT_TRUE(op.send_flags & verbs::IBV_SEND_SIGNALED);
  EXPECT_EQ(op.addr, va(buffer.data()) + kPage);
  EXPECT_EQ(op.length, kPage);
  EXPECT_EQ(op.mw_access, unsigned{verbs::IBV_ACCESS_REMOTE_READ});
  EXPECT_EQ(op.mr, static_cast<const void*>(ibv_mr_of(mr.get())));
  EXPECT_EQ(first_key, op.new_rkey);

  const hmr_mw_post second_post = post(78, 1);
  uint64_t second_key = kKeySentinel;
  ASSERT_HMR_OK(hmr_mw_bind(window.get(), mr.get(), buffer.data(), 2 * kPage, kRemote,
                            &second_post, &second_key));
  op = last_window_op();
  EXPECT_EQ(op.wr_id, 78u);
  EXPECT_FALSE(op.send_flags & verbs::IBV_SEND_SIGNALED) << "asked for no completion";
  EXPECT_EQ(op.mw_access,
            unsigned{verbs::IBV_ACCESS_REMOTE_READ | verbs::IBV_ACCESS_REMOTE_WRITE});
  EXPECT_EQ(second_key, op.new_rkey);
  EXPECT_NE(second_key, first_key);

  const hmr_mw_post invalidation = post(79);
  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), &invalidation));
  op = last_window_op();
  EXPECT_STREQ(op.entry, "bind_mw");  // a type 1 window unbinds with a zero-length bind
  EXPECT_EQ(op.wr_id, 79u);
  EXPECT_EQ(op.mr, static_cast<const void*>(ibv_mr_of(mr.get())));  // the bound MR, not NULL
  EXPECT_EQ(op.length, 0u);
  EXPECT_EQ(fake().call_count("bind_mw"), 3);

  ASSERT_HMR_OK(hmr_mw_close(window.release()));
  EXPECT_EQ(fake().live("mws"), 0);
}

TEST_F(VerbsMemoryOpsTest, TypeTwoWindowBindsAndInvalidatesThroughWorkRequests) {
  open_domain();
  std::vector<char> buffer(2 * kPage);
  auto [mr, window] = window_on(buffer, HMR_MW_TYPE_2);
  ASSERT_TRUE(mr && window);

  const hmr_mw_post bind_post = post(5);
  uint64_t key = kKeySentinel;
  ASSERT_HMR_OK(hmr_mw_bind(window.get(), mr.get(), buffer.data(), kPage, kRemote, &bind_post,
                            &key));
  fake_ibverbs_window_op op = last_window_op();
  EXPECT_STREQ(op.entry, "post_send");
  EXPECT_EQ(op.opcode, verbs::IBV_WR_BIND_MW);
  EXPECT_EQ(op.wr_id, 5u);
  EXPECT_EQ(op.addr, va(buffer.data()));
  EXPECT_EQ(op.length, kPage);
  EXPECT_EQ(op.mw_access,
            unsigned{verbs::IBV_ACCESS_REMOTE_READ | verbs::IBV_ACCESS_REMOTE_WRITE});
  EXPECT_EQ(key, op.new_rkey);
  EXPECT_EQ(fake().call_count("bind_mw"), 0);

  uint64_t again = kKeySentinel;
  EXPECT_HMR_ERROR(hmr_mw_bind(window.get(), mr.get(), buffer.data(), kPage, kRemote, &bind_post,
                               &again),
                   HMR_EBUSY);
  EXPECT_EQ(again, kKeySentinel);
  EXPECT_EQ(fake().call_count("post_send"), 1);
  const int close_rc = hmr_mr_close(mr.get());
  EXPECT_EQ(close_rc, -HMR_EBUSY) << hmr_last_error();
  if (close_rc == 0) {
    mr.release();
    return;
  }

  const hmr_mw_post invalidation = post(6);
  ASSERT_HMR_OK(hmr_mw_invalidate(window.get(), &invalidation));
  op = last_window_op();
  EXPECT_EQ(op.opcode, verbs::IBV_WR_LOCAL_INV);
  EXPECT_EQ(op.invalidate_rkey, key);
  EXPECT_EQ(op.wr_id, 6u);
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  EXPECT_EQ(fake().live("mrs"), 0);
}

TEST_F(VerbsMemoryOpsTest, WindowOperationsNeedAQueueOfTheDevice) {
  open_domain();
  std::vector<char> buffer(kPage);
  auto [mr, window] = window_on(buffer, HMR_MW_TYPE_1);
  ASSERT_TRUE(mr && window);
  uint64_t key = kKeySentinel;

  EXPECT_HMR_ERROR(
      hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, kRemote, nullptr, &key), HMR_EINVAL);
  hmr_mw_post no_queue = post(1);
  no_queue.queue = nullptr;
  EXPECT_HMR_ERROR(
      hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, kRemote, &no_queue, &key),
      HMR_EINVAL);
  {
    AppPd elsewhere(fake(), 1);
    void* foreign_qp = fake().create_qp(elsewhere.pd());
    ASSERT_NE(foreign_qp, nullptr);
    hmr_mw_post foreign = post(2);
    foreign.queue = foreign_qp;
    EXPECT_HMR_ERROR(
        hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, kRemote, &foreign, &key),
        HMR_EINVAL);
    fake().destroy_qp(foreign_qp);
  }
  EXPECT_EQ(key, kKeySentinel);
  EXPECT_EQ(fake().call_count("bind_mw"), 0);

  const hmr_mw_post good = post(3);
  ASSERT_HMR_OK(hmr_mw_bind(window.get(), mr.get(), buffer.data(), 64, kRemote, &good, &key));
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window.get(), nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mw_invalidate(window.get(), &no_queue), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("bind_mw"), 1);
}

TEST_F(VerbsMemoryOpsTest, ProviderFailuresOfWindowOperationsSurfaceWithReasons) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kBindable);
  ASSERT_TRUE(mr);

  fake().set_failure("alloc_mw", ENOMEM);
  expect_alloc_window_refused(domain_, HMR_MW_TYPE_1, HMR_ENOMEM);
  fake().set_failure("alloc_mw", 0);

  MwPtr type_one = alloc_window(domain_, HMR_MW_TYPE_1);
  MwPtr type_two = alloc_window(domain_, HMR_MW_TYPE_2);
  ASSERT_TRUE(type_one && type_two);
  const hmr_mw_post request = post(9);
  uint64_t key = kKeySentinel;

  fake().set_failure("bind_mw", ENOMEM);
  EXPECT_HMR_ERROR(
      hmr_mw_bind(type_one.get(), mr.get(), buffer.data(), 64, kRemote, &request, &key),
      HMR_ENOMEM);
  fake().set_failure("bind_mw", 0);
  fake().set_failure("post_send", ENOMEM);
  EXPECT_HMR_ERROR(
      hmr_mw_bind(type_two.get(), mr.get(), buffer.data(), 64, kRemote, &request, &key),
      HMR_ENOMEM);
  fake().set_failure("post_send", 0);
  EXPECT_EQ(key, kKeySentinel) << "*key written on failure";

  // The failed post left the type 2 window unbound: it binds now, and the MR still closes
  // once it is invalidated.
  ASSERT_HMR_OK(
      hmr_mw_bind(type_two.get(), mr.get(), buffer.data(), 64, kRemote, &request, &key));
  EXPECT_EQ(key, last_window_op().new_rkey);
  ASSERT_HMR_OK(hmr_mw_invalidate(type_two.get(), &request));
}

// ============================================================== on-demand paging

TEST_F(VerbsMemoryOpsTest, OdpRegistrationAsksForIbvAccessOnDemand) {
  open_domain();
  std::vector<char> buffer(2 * kPage);
  MrPtr pinned = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(pinned);
  EXPECT_FALSE(last_registration().access & verbs::IBV_ACCESS_ON_DEMAND);
  MrPtr odp = reg(buffer.data(), buffer.size(), kRemote, HMR_MR_ODP);
  ASSERT_TRUE(odp);
  const fake_ibverbs_registration made = last_registration();
  EXPECT_TRUE(made.access & verbs::IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(made.addr, va(buffer.data()));
  EXPECT_EQ(made.length, buffer.size());
  EXPECT_EQ(hmr_mr_key(odp.get()), made.rkey);
}

TEST_F(VerbsMemoryOpsTest, OdpRegistersPagesThatDoNotExistYet) {
  open_domain();
  void* area = mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                    0);
  ASSERT_NE(area, MAP_FAILED) << std::strerror(errno);
  uint8_t* const hole = static_cast<uint8_t*>(area) + kPage;
  ASSERT_EQ(munmap(hole, kPage), 0);
  if (msync(hole, kPage, MS_ASYNC) == 0) {
    munmap(area, 3 * kPage);
    GTEST_SKIP() << "another mapping took the hole at once";
  }
  {
    hmr_mr* mr = sentinel<hmr_mr>();
    EXPECT_HMR_ERROR(hmr_mr_reg(domain_, hole, kPage, kRemote, 0, 0, 0, &mr, nullptr), HMR_EFAULT);
    EXPECT_EQ(mr, sentinel<hmr_mr>());
    MrPtr odp = reg(hole, kPage, kRemote, HMR_MR_ODP);
    EXPECT_TRUE(odp);
    EXPECT_TRUE(last_registration().access & verbs::IBV_ACCESS_ON_DEMAND);
  }
  munmap(area, 3 * kPage);
}

TEST_F(VerbsMemoryOpsTest, ImplicitOdpIsOneRegistrationOfTheWholeAddressSpace) {
  // ConnectX devices report max_mr_size ~0; the fake refuses a length above its configured one.
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = UINT64_MAX; });
  open_domain();
  const size_t before = registrations().size();
  MrPtr whole = reg(nullptr, SIZE_MAX, kRemote, HMR_MR_ODP);
  ASSERT_TRUE(whole);
  EXPECT_EQ(registrations().size(), before + 1) << "an implicit registration is never chunked";
  const fake_ibverbs_registration made = last_registration();
  // Through ibv_reg_mr_iova2 (iova 0), which drops optional access bits a kernel lacks: the
  // exported ibv_reg_mr of rdma-core 28-31 passed them as given.
  EXPECT_STREQ(made.entry, "ibv_reg_mr_iova2");
  EXPECT_EQ(made.addr, 0u);
  EXPECT_EQ(made.iova, 0u);
  EXPECT_EQ(made.length, uint64_t{SIZE_MAX});
  EXPECT_TRUE(made.access & verbs::IBV_ACCESS_ON_DEMAND);
  EXPECT_TRUE(made.access & verbs::IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(hmr_mr_key(whole.get()), made.rkey);
}

// The implicit registration covers the CPU's own memory, so it follows the host rules of any
// registration of system memory: no relaxed ordering unless relaxed_ordering=on, and atomics on
// pages the NIC faults in only where the device pages them (IBV_ODP_SUPPORT_ATOMIC).
TEST_F(VerbsMemoryOpsTest, ImplicitOdpFollowsTheHostRules) {
  fake().configure(0, [](fake_ibverbs_device_config& config) {
    config.max_mr_size = UINT64_MAX;
    config.odp_rc_caps = verbs::IBV_ODP_SUPPORT_SEND | verbs::IBV_ODP_SUPPORT_RECV |
                         verbs::IBV_ODP_SUPPORT_WRITE | verbs::IBV_ODP_SUPPORT_READ;
  });
  open_domain("device=fake_mlx5_0");  // relaxed_ordering=auto
  MrPtr whole = reg(nullptr, SIZE_MAX, kRemote, HMR_MR_ODP);
  ASSERT_TRUE(whole);
  const fake_ibverbs_registration made = last_registration();
  EXPECT_EQ(made.access & verbs::IBV_ACCESS_RELAXED_ORDERING, 0u);
  EXPECT_EQ(made.access & verbs::IBV_ACCESS_REMOTE_ATOMIC, 0u);
  EXPECT_NE(made.access & verbs::IBV_ACCESS_ON_DEMAND, 0u);
}

TEST_F(VerbsMemoryOpsTest, ProviderFailuresOfOdpRegistrationSurfaceWithReasons) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = UINT64_MAX; });
  open_domain();
  fake().set_failure("ibv_reg_mr", ENOMEM);
  fake().set_failure("ibv_reg_mr_iova2", ENOMEM);
  std::vector<char> buffer(kPage);
  hmr_mr* mr = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg(domain_, buffer.data(), buffer.size(), kRemote, 0, 0, HMR_MR_ODP,
                              &mr, nullptr),
                   HMR_ENOMEM);
  EXPECT_HMR_ERROR(hmr_mr_reg(domain_, nullptr, SIZE_MAX, kRemote, 0, 0, HMR_MR_ODP, &mr, nullptr),
                   HMR_ENOMEM);
  EXPECT_EQ(mr, sentinel<hmr_mr>());
  fake().set_failure("ibv_reg_mr", 0);
  fake().set_failure("ibv_reg_mr_iova2", 0);
  EXPECT_EQ(fake().live("mrs"), 0);
}

// ============================================================== advice

TEST_F(VerbsMemoryOpsTest, WillneedOnAnOdpMrPrefetchesThroughAdviseMr) {
  open_domain();
  std::vector<char> buffer(4 * kPage);
  MrPtr writable = reg(buffer.data(), buffer.size(), kRemote, HMR_MR_ODP);
  ASSERT_TRUE(writable);
  ASSERT_HMR_OK(
      hmr_mem_advise(writable.get(), buffer.data() + kPage, 2 * kPage, HMR_MADV_WILLNEED));
  EXPECT_EQ(fake().call_count("advise_mr"), 1);
  fake_ibverbs_advice advice{};
  fake().last_advice(&advice);
  EXPECT_EQ(advice.advice, verbs::IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
  EXPECT_EQ(advice.flags, uint32_t{verbs::IBV_ADVISE_MR_FLAG_FLUSH});
  ASSERT_EQ(advice.num_sge, 1u);
  EXPECT_EQ(advice.addr[0], va(buffer.data()) + kPage);
  EXPECT_EQ(advice.length[0], 2 * kPage);
  ASSERT_NE(ibv_mr_of(writable.get()), nullptr);
  EXPECT_EQ(advice.lkey[0], ibv_mr_of(writable.get())->lkey);

  MrPtr read_only = reg(buffer.data(), buffer.size(), HMR_REMOTE_READ, HMR_MR_ODP);
  ASSERT_TRUE(read_only);
  ASSERT_HMR_OK(hmr_mem_advise(read_only.get(), buffer.data(), kPage, HMR_MADV_WILLNEED));
  fake().last_advice(&advice);
  EXPECT_EQ(advice.advice, verbs::IBV_ADVISE_MR_ADVICE_PREFETCH);
  EXPECT_EQ(advice.flags, uint32_t{verbs::IBV_ADVISE_MR_FLAG_FLUSH});
  EXPECT_EQ(advice.lkey[0], ibv_mr_of(read_only.get())->lkey);
}

// Which way the NIC goes decides the prefetch: a buffer the NIC reads (HMR_SEND, HMR_WRITE:
// the source of a send or an RDMA Write) has no LOCAL_WRITE, and mlx5 refuses a write-prefetch
// of an MR it may not write (get_prefetchable_mr: EPERM; the fake does too); a buffer the NIC
// writes (HMR_READ: an RDMA Read lands in it; HMR_RECV) is prefetched writable.  Before, an ODP
// send buffer plus WILLNEED failed, and an RDMA-read sink was prefetched read-only.
TEST_F(VerbsMemoryOpsTest, WillneedPrefetchesWritableExactlyTheMemoryTheNicWrites) {
  open_domain();
  std::vector<char> buffer(2 * kPage);
  fake_ibverbs_advice advice{};
  MrPtr source = reg(buffer.data(), buffer.size(), HMR_SEND | HMR_WRITE, HMR_MR_ODP);
  ASSERT_TRUE(source);
  EXPECT_EQ(last_registration().access & verbs::IBV_ACCESS_LOCAL_WRITE, 0u);
  ASSERT_HMR_OK(hmr_mem_advise(source.get(), buffer.data(), kPage, HMR_MADV_WILLNEED));
  fake().last_advice(&advice);
  EXPECT_EQ(advice.advice, verbs::IBV_ADVISE_MR_ADVICE_PREFETCH);

  MrPtr read_sink = reg(buffer.data(), buffer.size(), HMR_READ, HMR_MR_ODP);
  ASSERT_TRUE(read_sink);
  ASSERT_HMR_OK(hmr_mem_advise(read_sink.get(), buffer.data(), kPage, HMR_MADV_WILLNEED));
  fake().last_advice(&advice);
  EXPECT_EQ(advice.advice, verbs::IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
}

TEST_F(VerbsMemoryOpsTest, WillneedPrefetchesEveryMrOfAnOdpOnDomain) {
  // odp=on makes every registration an ODP one, flag or not, so each has pages to prefetch.
  open_domain("device=fake_mlx5_0;relaxed_ordering=off;odp=on");
  std::vector<char> buffer(2 * kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  ASSERT_HMR_OK(hmr_mem_advise(mr.get(), buffer.data(), kPage, HMR_MADV_WILLNEED));
  EXPECT_EQ(fake().call_count("advise_mr"), 1);
}

TEST_F(VerbsMemoryOpsTest, AdviceWithNothingToDoNeverReachesLibibverbs) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr pinned = reg(buffer.data(), buffer.size(), kRemote);
  MrPtr odp = reg(buffer.data(), buffer.size(), kRemote, HMR_MR_ODP);
  ASSERT_TRUE(pinned && odp);
  EXPECT_EQ(hmr_mem_advise(pinned.get(), buffer.data(), buffer.size(), HMR_MADV_WILLNEED), 0)
      << hmr_last_error();
  EXPECT_EQ(hmr_mem_advise(odp.get(), buffer.data(), buffer.size(), HMR_MADV_NORMAL), 0)
      << hmr_last_error();
  EXPECT_EQ(fake().call_count("advise_mr"), 0);
}

TEST_F(VerbsMemoryOpsTest, ProviderFailureOfAdviceSurfacesWithAReason) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr odp = reg(buffer.data(), buffer.size(), kRemote, HMR_MR_ODP);
  ASSERT_TRUE(odp);
  fake().set_failure("advise_mr", EFAULT);
  EXPECT_HMR_ERROR(hmr_mem_advise(odp.get(), buffer.data(), buffer.size(), HMR_MADV_WILLNEED),
                   HMR_EFAULT);
  fake().set_failure("advise_mr", 0);
  EXPECT_EQ(hmr_mem_advise(odp.get(), buffer.data(), buffer.size(), HMR_MADV_WILLNEED), 0)
      << hmr_last_error();
}

}  // namespace
}  // namespace hmr::testing
