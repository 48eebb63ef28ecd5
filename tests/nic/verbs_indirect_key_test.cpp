// Indirect keys on the verbs NIC through the public C ABI (hmr_mr_reg_indirect), against the
// fake libibverbs and the fake libmlx5: what the adapter asks of mlx5 (a DEVX context, an
// indirect mkey, a UMR queue pair connected to itself, one inline UMR with a KLM entry per
// piece), what the application gets back (the mkey's rkey as the key, its lkey in the
// descriptor, addresses from 0), every failure with its reason and nothing left behind, and why
// the operation is unavailable where it is (no DEVX, no mlx5 device, no libmlx5, an
// rdma-core without ibv_qp_to_qp_ex).
#include <hmr/hmr.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <cstring>
#include <vector>

#include "tests/api/memory_ops_support.h"
#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

using hmr_memops_test::MrPtr;
using namespace hmr::verbs;  // IBV_* values, ibv_mr
using hmr_memops_test::OpAnswer;
using hmr_memops_test::query_op;
using hmr_memops_test::sentinel;

constexpr uint64_t kBasicMode = kVerbsBasicMode;
constexpr uint64_t kRemote = kRemoteAccess;
constexpr size_t kPage = kTestPage;
const char* const kConnectX = kFakeConnectX;
const char* const kEfa = kFakeEfa;
constexpr int kGeneralError = 21;  // IBV_WC_GENERAL_ERR (rdma-core verbs.h)

uint64_t va(const void* p) { return reinterpret_cast<uint64_t>(p); }

class VerbsIndirectKeyTest : public VerbsDomainTest {
 protected:
  void open_domain(const char* options = kConnectX, void* handle = nullptr) {
    ASSERT_EQ(VerbsDomainTest::open_domain(options, handle, kBasicMode), 0) << hmr_last_error();
  }
  fake_ibverbs_umr last_umr() const {
    fake_ibverbs_umr umr{};
    fake().last_umr(&umr);
    return umr;
  }
  // Two registered pages, for an indirect key over parts of both.
  struct TwoPieces {
    std::vector<char> first = std::vector<char>(kPage);
    std::vector<char> second = std::vector<char>(kPage);
    MrPtr a, b;
  };
  // Registers both pages in domain_; false (with a failure) when either fails.
  bool register_pieces(TwoPieces& pieces) {
    pieces.a = reg(pieces.first.data(), kPage, kRemote);
    pieces.b = reg(pieces.second.data(), kPage, kRemote);
    return pieces.a && pieces.b;
  }
  // Opens the default domain and builds a key over `pieces`; null (with a failure) if not.
  MrPtr key_over(TwoPieces& pieces) {
    open_domain();
    hmr_mr* key = nullptr;
    if (HasFatalFailure() || !register_pieces(pieces)) return nullptr;
    EXPECT_EQ(indirect(pieces, &key), 0) << hmr_last_error();
    return MrPtr(key);
  }
  int indirect(TwoPieces& pieces, hmr_mr** out) {
    const hmr_mr_segment segments[2] = {{pieces.a.get(), pieces.first.data() + 100, 200},
                                        {pieces.b.get(), pieces.second.data(), 300}};
    return hmr_mr_reg_indirect(domain_, segments, 2, kRemote, out);
  }
  // Fails the next indirect key with `code`, leaving no mkey, and the MRs as they were.
  void expect_refused(TwoPieces& pieces, int code, const char* reason_part) {
    hmr_mr* mr = sentinel<hmr_mr>();
    EXPECT_HMR_ERROR(indirect(pieces, &mr), code);
    EXPECT_TRUE(contains(hmr_last_error(), reason_part)) << hmr_last_error();
    EXPECT_EQ(mr, sentinel<hmr_mr>());
    EXPECT_EQ(fake().live("mkeys"), 0);
  }
};

TEST_F(VerbsIndirectKeyTest, KeyIsAnMkeyFilledByOneInlineUmr) {
  TwoPieces pieces;
  MrPtr owned = key_over(pieces);
  ASSERT_TRUE(owned);

  const fake_ibverbs_umr umr = last_umr();
  EXPECT_EQ(umr.status, 0);
  EXPECT_EQ(umr.wr_flags & (IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            unsigned{IBV_SEND_SIGNALED | IBV_SEND_INLINE});
  ASSERT_EQ(umr.num_sge, 2);
  // Each KLM entry: the piece's address as its MR is addressed (VA here), its MR's lkey.
  EXPECT_EQ(umr.addr[0], va(pieces.first.data()) + 100);
  EXPECT_EQ(umr.length[0], 200u);
  EXPECT_EQ(umr.lkey[0], ibv_mr_of(pieces.a.get())->lkey);
  EXPECT_EQ(umr.addr[1], va(pieces.second.data()));
  EXPECT_EQ(umr.length[1], 300u);
  EXPECT_EQ(umr.lkey[1], ibv_mr_of(pieces.b.get())->lkey);
  constexpr unsigned kWritable =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  EXPECT_EQ(umr.access & kWritable, kWritable);

  // The application sees the mkey: its rkey as the key, its lkey in the descriptor, 500 bytes
  // addressed from 0.
  EXPECT_EQ(hmr_mr_key(owned.get()), umr.mkey_rkey);
  const verbs::ibv_mr* view = ibv_mr_of(owned.get());
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->lkey, umr.mkey_lkey);
  EXPECT_EQ(view->rkey, umr.mkey_rkey);
  EXPECT_EQ(view->length, 500u);
  EXPECT_EQ(view->pd, attr_.nic_handle);
  uint64_t base = 1;
  uint8_t raw[16];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(owned.get(), &base, raw, &raw_size, 0));
  EXPECT_EQ(base, 0u);

  // The adapter opened the device with DEVX and built one self-connected RC QP.
  EXPECT_EQ(fake().call_count("mlx5dv_open_device"), 1);
  EXPECT_EQ(fake().call_count("ibv_open_device"), 0);
  EXPECT_EQ(fake().call_count("mlx5dv_create_qp"), 1);
  EXPECT_EQ(fake().call_count("ibv_modify_qp"), 3);
  EXPECT_EQ(fake().live("mkeys"), 1);

  // A second key reuses the queue; closing each destroys its mkey.
  hmr_mr* again = nullptr;
  ASSERT_HMR_OK(indirect(pieces, &again));
  EXPECT_NE(hmr_mr_key(again), hmr_mr_key(owned.get()));
  EXPECT_EQ(fake().call_count("mlx5dv_create_qp"), 1);
  EXPECT_EQ(fake().live("mkeys"), 2);
  ASSERT_HMR_OK(hmr_mr_close(again));
  owned.reset();
  EXPECT_EQ(fake().live("mkeys"), 0);
  EXPECT_EQ(fake().call_count("mlx5dv_destroy_mkey"), 2);
}

// libmlx5 before rdma-core 61 sums a UMR's entry lengths in an int (umr_sg_list_create), so a
// key of 2 GiB or more gets a wrapped length at the device (the fake computes it so): the key a
// peer uses would be shorter than hmr says, or 0 bytes at 4 GiB.  hmr refuses such totals with
// the reason; just under 2 GiB the device's length is the one hmr reports.  (One 1 GiB MR,
// named three times, makes 3 GiB without 3 GiB of memory.)
TEST_F(VerbsIndirectKeyTest, TotalsOfTwoGibOrMoreAreRefusedAsLibmlx5WouldWrapThem) {
  open_domain();
  constexpr size_t kGib = size_t{1} << 30;
  void* memory = mmap(nullptr, kGib, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  MrPtr big = reg(memory, kGib, kRemote);
  if (!big) {
    munmap(memory, kGib);
    GTEST_SKIP() << "1 GiB cannot be registered here (RLIMIT_MEMLOCK?): " << hmr_last_error();
  }
  char* const base = static_cast<char*>(memory);
  const hmr_mr_segment three_gib[3] = {
      {big.get(), base, kGib}, {big.get(), base, kGib}, {big.get(), base, kGib}};
  hmr_mr* key = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg_indirect(domain_, three_gib, 3, kRemote, &key), HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "rdma-core 61")) << hmr_last_error();
  EXPECT_EQ(key, sentinel<hmr_mr>());
  EXPECT_EQ(fake().live("mkeys"), 0);

  const hmr_mr_segment under_two_gib[2] = {{big.get(), base, kGib},
                                           {big.get(), base, kGib - kPage}};
  hmr_mr* fits = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg_indirect(domain_, under_two_gib, 2, kRemote, &fits));
  MrPtr owned(fits);
  EXPECT_EQ(last_umr().key_length, ibv_mr_of(fits)->length)
      << "the device's key length differs from the one hmr reports";
  owned.reset();
  big.reset();
  munmap(memory, kGib);
}

TEST_F(VerbsIndirectKeyTest, UnderlyingMrIsBusyWhileAKeyUsesIt) {
  TwoPieces pieces;
  MrPtr key = key_over(pieces);
  ASSERT_TRUE(key);
  EXPECT_HMR_ERROR(hmr_mr_close(pieces.a.get()), HMR_EBUSY);
  ASSERT_HMR_OK(hmr_mr_close(key.release()));
  ASSERT_HMR_OK(hmr_mr_close(pieces.a.release()));
}

TEST_F(VerbsIndirectKeyTest, PieceAcrossChunksIsOneEntryPerChunk) {
  // 64 KiB chunks: a 128 KiB local-access MR is two verbs MRs, and a piece across the boundary
  // needs a KLM entry in each.
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = 65536; });
  open_domain();
  void* memory = nullptr;
  ASSERT_EQ(posix_memalign(&memory, 65536, 131072), 0);
  std::unique_ptr<void, decltype(&free)> buffer(memory, &free);
  const uint64_t local = HMR_READ | HMR_WRITE;
  MrPtr big = reg(memory, 131072, local);
  ASSERT_TRUE(big);
  const auto* desc = static_cast<const hmr_verbs_desc*>(hmr_mr_desc(big.get()));
  ASSERT_EQ(desc->chunk_count, 2u);
  char* bytes = static_cast<char*>(memory);
  const hmr_mr_segment segment = {big.get(), bytes + 65536 - 1000, 3000};
  hmr_mr* key = nullptr;
  ASSERT_HMR_OK(hmr_mr_reg_indirect(domain_, &segment, 1, local, &key));
  MrPtr owned(key);
  const fake_ibverbs_umr umr = last_umr();
  ASSERT_EQ(umr.num_sge, 2);
  EXPECT_EQ(umr.addr[0], va(bytes) + 65536 - 1000);
  EXPECT_EQ(umr.length[0], 1000u);
  EXPECT_EQ(umr.lkey[0], reinterpret_cast<const verbs::ibv_mr*>(desc->chunks[0])->lkey);
  EXPECT_EQ(umr.addr[1], va(bytes) + 65536);
  EXPECT_EQ(umr.length[1], 2000u);
  EXPECT_EQ(umr.lkey[1], reinterpret_cast<const verbs::ibv_mr*>(desc->chunks[1])->lkey);
}

TEST_F(VerbsIndirectKeyTest, MoreEntriesThanOneUmrCarriesAreRefused) {
  open_domain();
  std::vector<char> buffer(kPage);
  MrPtr mr = reg(buffer.data(), buffer.size(), kRemote);
  ASSERT_TRUE(mr);
  std::vector<hmr_mr_segment> segments(17, hmr_mr_segment{mr.get(), buffer.data(), 16});
  hmr_mr* key = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg_indirect(domain_, segments.data(), segments.size(), kRemote, &key),
                   HMR_EINVAL);
  EXPECT_TRUE(contains(hmr_last_error(), "KLM")) << hmr_last_error();
  EXPECT_EQ(key, sentinel<hmr_mr>());
  EXPECT_EQ(fake().call_count("mlx5dv_create_mkey"), 0);
  // Sixteen fit.
  segments.resize(16);
  ASSERT_HMR_OK(hmr_mr_reg_indirect(domain_, segments.data(), segments.size(), kRemote, &key));
  EXPECT_EQ(last_umr().num_sge, 16);
  ASSERT_HMR_OK(hmr_mr_close(key));
}

TEST_F(VerbsIndirectKeyTest, FailuresReachTheCallerAndLeaveNothingBehind) {
  open_domain();
  TwoPieces pieces;
  ASSERT_TRUE(register_pieces(pieces));

  // The RoCE port's GID, which the queue's loopback connection needs: ibv_query_gid answers
  // -1 and errno (not an errno return, as most verbs calls do); the reason named "-1" before.
  fake().set_failure("ibv_query_gid", ENODEV);
  expect_refused(pieces, HMR_EIO, "ibv_query_gid");
  EXPECT_TRUE(contains(hmr_last_error(), std::strerror(ENODEV))) << hmr_last_error();
  fake().set_failure("ibv_query_gid", 0);

  fake().set_failure("mlx5dv_create_qp", ENOMEM);
  expect_refused(pieces, HMR_ENOMEM, "mlx5dv_create_qp");
  fake().set_failure("mlx5dv_create_qp", 0);
  EXPECT_EQ(fake().live("cqs"), 0);  // the half-built queue's CQ went with it

  fake().set_failure("mlx5dv_create_mkey", ENOMEM);
  expect_refused(pieces, HMR_ENOMEM, "mlx5dv_create_mkey");
  fake().set_failure("mlx5dv_create_mkey", 0);


  fake().set_failure("wr_complete", EINVAL);
  expect_refused(pieces, HMR_EINVAL, "mlx5dv_wr_mr_list");
  fake().set_failure("wr_complete", 0);

  // A UMR that completes in error breaks the RC QP; the next key reconnects it first.
  fake().set_failure("umr:completion", kGeneralError);
  expect_refused(pieces, HMR_EIO, "IBV_WC_GENERAL_ERR (21)");
  fake().set_failure("umr:completion", 0);
  const int transitions = fake().call_count("ibv_modify_qp");
  hmr_mr* key = nullptr;
  ASSERT_HMR_OK(indirect(pieces, &key));
  EXPECT_EQ(fake().call_count("ibv_modify_qp"), transitions + 4);  // RESET, INIT, RTR, RTS
  EXPECT_EQ(last_umr().status, 0);
  ASSERT_HMR_OK(hmr_mr_close(key));
}

// Below the C ABI (where a failed deregistration drops the MR with a warning): the adapter keeps
// an mkey it could not destroy, and destroys it when it closes (hmr never asks again).
TEST_F(VerbsTest, IndirectKeyTheDeviceWillNotDestroyIsDestroyedAtClose) {
  open(kConnectX);
  std::vector<char> buffer(kPage);
  const iovec segment = {buffer.data(), buffer.size()};
  Result<nic::Registration> mr = nic_->register_memory(host_request(segment, kRemote));
  ASSERT_TRUE(mr.ok()) << mr.status().reason();
  const nic::IndirectSegment piece = {&*mr, va(buffer.data()), 64};
  Result<nic::Registration> key = nic_->register_indirect({&piece, 1}, kRemote);
  ASSERT_TRUE(key.ok()) << key.status().reason();
  EXPECT_EQ(key->base_addr, 0u);
  fake().set_failure("mlx5dv_destroy_mkey", EBUSY);
  const Status refused = nic_->deregister(*key);
  EXPECT_EQ(refused.code(), HMR_EBUSY);
  EXPECT_TRUE(contains(refused.reason(), "mlx5dv_destroy_mkey")) << refused.reason();
  EXPECT_EQ(fake().live("mkeys"), 1);
  EXPECT_EQ(key->handle, nullptr) << "dropped, as hmr drops it";
  fake().set_failure("mlx5dv_destroy_mkey", 0);
  EXPECT_TRUE(nic_->deregister(*mr).ok());
  EXPECT_EQ(fake().live("mkeys"), 1);
  const Status closed = nic_->close_native();
  EXPECT_TRUE(closed.ok()) << closed.reason();
  EXPECT_EQ(fake().live("mkeys"), 0);
}

TEST_F(VerbsIndirectKeyTest, KeysAreNotReregisteredOrNested) {
  TwoPieces pieces;
  MrPtr owned = key_over(pieces);
  ASSERT_TRUE(owned);
  hmr_mr_rereg_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.access = HMR_REMOTE_READ;
  EXPECT_HMR_ERROR(hmr_mr_rereg(owned.get(), HMR_MR_REREG_ACCESS, &attr), HMR_EINVAL);
  EXPECT_EQ(fake().call_count("ibv_rereg_mr"), 0);
  // An indirect key is not an indirect key's segment either.
  const hmr_mr_segment nested = {owned.get(), nullptr, 10};
  hmr_mr* twice = sentinel<hmr_mr>();
  EXPECT_HMR_ERROR(hmr_mr_reg_indirect(domain_, &nested, 1, kRemote, &twice), HMR_EINVAL);
  EXPECT_EQ(twice, sentinel<hmr_mr>());
}

// An indirect key is made in hmr's PD, and its UMR reaches MRs of that PD only: an MR a
// re-registration moved to another PD is refused with the reason before anything is posted.
// It used to fail late, -HMR_EIO from the UMR's completion, and leave the UMR queue broken for
// the next key (found by a review).
TEST_F(VerbsIndirectKeyTest, AnMrMovedToAnotherPdIsNoSegment) {
  open_domain();
  TwoPieces pieces;
  ASSERT_TRUE(register_pieces(pieces));
  auto* pd = static_cast<ibv_pd*>(attr_.nic_handle);
  ASSERT_NE(pd, nullptr);
  ibv_pd* other = fake().alloc_pd(pd->context);
  ASSERT_NE(other, nullptr);
  hmr_mr_rereg_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.nic_pd = other;
  ASSERT_HMR_OK(hmr_mr_rereg(pieces.a.get(), HMR_MR_REREG_PD, &attr));
  const int umrs = fake().call_count("wr_complete");
  expect_refused(pieces, HMR_EINVAL, "protection domain");
  EXPECT_EQ(fake().call_count("wr_complete"), umrs) << "a UMR was posted";
  pieces.a.reset();
  EXPECT_EQ(fake().dealloc_pd(other), 0);
}

// The application's PD, from ibv_open_device (no DEVX): nothing public says whether a context
// has DEVX, and on one without it the kernel refuses an indirect mkey with a bare EINVAL.  hmr
// makes and destroys a probe key when it opens the domain, so hmr_md_query_op says the truth
// and a key is refused with ENOSYS and the reason.  Before, md_query said available and the key
// failed with EINVAL.
TEST_F(VerbsIndirectKeyTest, ApplicationContextWithoutDevxSaysWhy) {
  open_domain("relaxed_ordering=off", app_pd(0));
  const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
  EXPECT_EQ(answer.rc, 0);
  EXPECT_TRUE(contains(answer.reason, "DEVX")) << answer.reason;
  TwoPieces pieces;
  ASSERT_TRUE(register_pieces(pieces));
  expect_refused(pieces, HMR_ENOSYS, "DEVX");
  EXPECT_EQ(fake().call_count("mlx5dv_open_device"), 0);
  EXPECT_EQ(fake().live("mkeys"), 0);
}

// The application's context opened with DEVX (mlx5dv_open_device, as a program that makes
// its own indirect keys does), on a device whose mkey table (shared by every context and
// process) is full when hmr opens the domain: the probe's ENOMEM says nothing of DEVX, so
// indirect keys stay offered, and one works once the table has room.  Before, any failure of
// the probe read as "no DEVX" and the domain refused indirect keys for good.
TEST_F(VerbsIndirectKeyTest, AFullMkeyTableAtOpenDoesNotReadAsNoDevx) {
  void* mlx5 = dlopen(HMR_FAKE_MLX5_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(mlx5, nullptr) << dlerror();
  using OpenDevice = verbs::ibv_context* (*)(verbs::ibv_device*, verbs::mlx5dv_context_attr*);
  auto open_devx = reinterpret_cast<OpenDevice>(dlsym(mlx5, "mlx5dv_open_device"));
  ASSERT_NE(open_devx, nullptr);
  int count = 0;
  verbs::ibv_device** list = fake().get_device_list(&count);
  ASSERT_GE(count, 1);
  verbs::mlx5dv_context_attr devx{};
  devx.flags = verbs::MLX5DV_CONTEXT_FLAGS_DEVX;
  verbs::ibv_context* context = open_devx(list[0], &devx);
  fake().free_device_list(list);
  ASSERT_NE(context, nullptr);
  verbs::ibv_pd* pd = fake().alloc_pd(context);
  ASSERT_NE(pd, nullptr);
  {
    // Four mkeys on the device, all taken by the application's own registrations.
    constexpr int kMkeys = 4;
    fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr = kMkeys; });
    std::vector<char> theirs(kMkeys * kPage);
    std::vector<verbs::ibv_mr*> taken;
    for (int i = 0; i < kMkeys; ++i) {
      taken.push_back(fake().reg_mr(pd, theirs.data() + i * kPage, kPage, IBV_ACCESS_LOCAL_WRITE));
      ASSERT_NE(taken.back(), nullptr);
    }
    open_domain("relaxed_ordering=off", pd);
    EXPECT_EQ(fake().call_count("mlx5dv_create_mkey"), 1) << "no probe was made";
    EXPECT_EQ(fake().call_count("mlx5dv_destroy_mkey"), 0) << "the probe was not refused";
    const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
    EXPECT_EQ(answer.rc, 1) << answer.reason;

    // Room again (the application let go of its registrations): hmr's registrations and an
    // indirect key over them fit.
    for (verbs::ibv_mr* mr : taken) ASSERT_EQ(fake().dereg_mr(mr), 0);
    TwoPieces pieces;
    ASSERT_TRUE(register_pieces(pieces));
    hmr_mr* key = nullptr;
    EXPECT_EQ(indirect(pieces, &key), 0) << hmr_last_error();
    EXPECT_EQ(fake().live("mkeys"), 1);
    if (key != nullptr) ASSERT_HMR_OK(hmr_mr_close(key));
    pieces = TwoPieces();
    ASSERT_HMR_OK(hmr_domain_close(domain_));
    domain_ = nullptr;
  }
  EXPECT_EQ(fake().dealloc_pd(pd), 0);
  EXPECT_EQ(fake().close_device(context), 0);
  dlclose(mlx5);
}

TEST_F(VerbsIndirectKeyTest, DevxRefusedLeavesTheDeviceOpenWithoutIndirectKeys) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.devx_errno = EPERM; });
  open_domain();
  const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
  EXPECT_EQ(answer.rc, 0);
  EXPECT_TRUE(contains(answer.reason, "DEVX")) << answer.reason;
  EXPECT_EQ(fake().call_count("ibv_open_device"), 1);  // opened the usual way after all
  TwoPieces pieces;
  ASSERT_TRUE(register_pieces(pieces));
  expect_refused(pieces, HMR_ENOSYS, "DEVX");
}

TEST_F(VerbsIndirectKeyTest, UnavailableWhereMlx5IsNot) {
  {
    SCOPED_TRACE("not an mlx5 device");
    open_domain(kEfa);
    const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
    EXPECT_EQ(answer.rc, 0);
    EXPECT_TRUE(contains(answer.reason, "not an mlx5 device")) << answer.reason;
    ASSERT_HMR_OK(hmr_domain_close(domain_));
    domain_ = nullptr;
  }
  {
    SCOPED_TRACE("no libmlx5");
    setenv("HMR_MLX5_LIBRARY", "/nonexistent/libmlx5.so.1", 1);
    open_domain();
    const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
    EXPECT_EQ(answer.rc, 0);
    EXPECT_TRUE(contains(answer.reason, "/nonexistent/libmlx5.so.1")) << answer.reason;
    EXPECT_EQ(fake().call_count("mlx5dv_open_device"), 0);
    ASSERT_HMR_OK(hmr_domain_close(domain_));
    domain_ = nullptr;
  }
  {
    SCOPED_TRACE("rdma-core without ibv_qp_to_qp_ex");
    use(legacy_fake_ibverbs());
    open_domain();
    const OpAnswer answer = query_op(domain_, HMR_MD_OP_INDIRECT);
    EXPECT_EQ(answer.rc, 0);
    EXPECT_TRUE(contains(answer.reason, "ibv_qp_to_qp_ex")) << answer.reason;
  }
}

}  // namespace
}  // namespace hmr::testing
