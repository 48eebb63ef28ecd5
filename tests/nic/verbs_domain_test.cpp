// The verbs NIC through the public C ABI: a domain over the application's PD (nic_handle) or
// over a device hmr opens, MRs whose descriptor is a struct hmr_verbs_desc, RAW keys for
// chunked ranges, and the errors an application sees.
#include <hmr/hmr.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "nic/verbs/chunk_plan.h"
#include "tests/nic/verbs_test_fixture.h"

namespace hmr::testing {
namespace {

constexpr uint64_t kBasicMode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED |
                                HMR_MR_PROV_KEY;

TEST_F(VerbsDomainTest, RegistersInTheApplicationsPd) {
  verbs::ibv_pd* pd = app_pd();
  ASSERT_EQ(open_domain(nullptr, pd, kBasicMode), 0) << hmr_last_error();
  EXPECT_EQ(attr_.nic_handle, pd);
  EXPECT_EQ(attr_.mr_key_size, 4u);
  EXPECT_EQ(attr_.mr_iov_limit, 1u);
  std::vector<char> buffer(8192);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain_, buffer.data(), buffer.size(),
                       HMR_REMOTE_READ | HMR_REMOTE_WRITE | HMR_SEND, 0, 0, 0, &mr, nullptr),
            0)
      << hmr_last_error();
  const auto* desc = static_cast<const hmr_verbs_desc*>(hmr_mr_desc(mr));
  ASSERT_NE(desc, nullptr);
  ASSERT_EQ(desc->chunk_count, 1u);
  const auto* ibv_mr = reinterpret_cast<const verbs::ibv_mr*>(desc->mr);
  EXPECT_EQ(ibv_mr->pd, pd);
  EXPECT_EQ(ibv_mr->addr, buffer.data());
  EXPECT_EQ(hmr_mr_key(mr), ibv_mr->rkey);
  const fake_ibverbs_registration made = registrations().at(0);
  EXPECT_EQ(made.lkey, ibv_mr->lkey);
  EXPECT_EQ(hmr_mr_close(mr), 0);
  EXPECT_EQ(fake().live("mrs"), 0);
}

TEST_F(VerbsDomainTest, OpensTheNamedDevice) {
  ASSERT_EQ(open_domain("device=fake_efa_0", nullptr, kBasicMode), 0) << hmr_last_error();
  EXPECT_EQ(fake().live("contexts"), 1);
  // The PD hmr allocated comes back, for the application's QPs.
  const auto* pd = static_cast<const verbs::ibv_pd*>(attr_.nic_handle);
  ASSERT_NE(pd, nullptr);
  EXPECT_STREQ(pd->context->device->name, "fake_efa_0");
  EXPECT_EQ(hmr_domain_close(domain_), 0);
  domain_ = nullptr;
  EXPECT_EQ(fake().live("contexts"), 0);
  EXPECT_EQ(fake().live("pds"), 0);
}

// A QP the application made on the PD hmr allocated (nic_handle) and did not destroy before
// hmr_domain_close: ibv_dealloc_pd refuses (EBUSY), as the kernel does while the PD is in use.
// The hmr domain and the device context are closed all the same (which destroys the QP) and
// the close says so with -HMR_EIO and a reason, as for a libfabric domain hmr opened.  It
// returned 0, and only logged the refusal.
TEST_F(VerbsDomainTest, AQpLeftOnThePdHmrAllocatedFailsTheCloseWithAReason) {
  ASSERT_EQ(open_domain("device=fake_mlx5_0", nullptr, kBasicMode), 0) << hmr_last_error();
  void* qp = fake().create_qp(attr_.nic_handle);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(hmr_domain_close(domain_), -HMR_EIO);
  domain_ = nullptr;
  const std::string reason = hmr_last_error();
  EXPECT_NE(reason.find("ibv_dealloc_pd(fake_mlx5_0)"), std::string::npos) << reason;
  EXPECT_NE(reason.find("destroy them before hmr_domain_close"), std::string::npos) << reason;
  // Nothing is left: the context's close took the PD and the QP with it.
  EXPECT_EQ(fake().live("contexts"), 0);
  EXPECT_EQ(fake().live("pds"), 0);
  EXPECT_EQ(fake().live("qps"), 0);
  EXPECT_EQ(fake().live("destroyed_by_close"), 2) << "the QP and the PD";
  expected_destroyed_by_close_ = 2;
  fake().destroy_qp(qp);  // (already gone with the context: the fake ignores it)

  // Destroyed first, the close is clean.
  ASSERT_EQ(open_domain("device=fake_mlx5_0", nullptr, kBasicMode), 0) << hmr_last_error();
  qp = fake().create_qp(attr_.nic_handle);
  ASSERT_NE(qp, nullptr);
  fake().destroy_qp(qp);
  EXPECT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
  EXPECT_EQ(fake().live("pds"), 0);
}

TEST_F(VerbsDomainTest, ErrorsReachTheApplicationWithReasons) {
  EXPECT_EQ(open_domain("device=nope", nullptr, kBasicMode), -HMR_ENODEV);
  EXPECT_NE(std::string(hmr_last_error()).find("nope"), std::string::npos) << hmr_last_error();
  EXPECT_EQ(domain_, nullptr);

  fake().set_device_list(2, ENOSYS);
  EXPECT_EQ(open_domain(nullptr, nullptr, kBasicMode), -HMR_ENODEV);
  EXPECT_NE(std::string(hmr_last_error()).find("no RDMA devices"), std::string::npos);
  fake().set_device_list(2, 0);

  // Requested keys are not a verbs thing: an application that cannot take provider keys
  // cannot use this NIC.
  EXPECT_EQ(open_domain(nullptr, nullptr, HMR_MR_SCALABLE), -HMR_ENODATA);
  EXPECT_NE(std::string(hmr_last_error()).find("PROV_KEY"), std::string::npos)
      << hmr_last_error();

  // The sim NIC has no NIC objects to work under.
  hmr_domain_attr sim{};
  sim.size = sizeof sim;
  sim.nic = "sim";
  sim.nic_handle = &sim;
  EXPECT_EQ(hmr_domain_open(&sim, &domain_), -HMR_EINVAL);
  EXPECT_EQ(domain_, nullptr);
}

TEST_F(VerbsDomainTest, ChunkedRangesUseRawKeys) {
  fake().configure(0, [](fake_ibverbs_device_config& config) { config.max_mr_size = 65536; });
  ASSERT_EQ(open_domain("raw_keys=on", nullptr, kBasicMode | HMR_MR_RAW), 0) << hmr_last_error();
  EXPECT_EQ(attr_.mr_key_size, 16u);
  std::vector<char> buffer(2 * 65536 + 4096);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain_, buffer.data(), buffer.size(), HMR_REMOTE_READ, 0, 0, 0, &mr,
                       nullptr),
            0)
      << hmr_last_error();
  EXPECT_EQ(hmr_mr_key(mr), HMR_KEY_NOTAVAIL);
  uint64_t base = 0;
  uint8_t raw[16];
  size_t size = sizeof raw;
  ASSERT_EQ(hmr_mr_raw_attr(mr, &base, raw, &size, 0), 0) << hmr_last_error();
  EXPECT_EQ(base, reinterpret_cast<uintptr_t>(buffer.data()));
  KeyBytes key;
  key.size = size;
  std::memcpy(key.bytes, raw, size);
  Result<verbs::DecodedRawKey> decoded = verbs::decode_raw_key(key);
  ASSERT_TRUE(decoded.ok());
  ASSERT_EQ(decoded->rkeys.size(), 3u);
  const auto* desc = static_cast<const hmr_verbs_desc*>(hmr_mr_desc(mr));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(decoded->rkeys[i], reinterpret_cast<const verbs::ibv_mr*>(desc->chunks[i])->rkey);
  }
  EXPECT_EQ(hmr_mr_close(mr), 0);

  // Four chunks do not fit: the domain refuses before the NIC is asked.
  std::vector<char> large(3 * 65536 + 1);
  EXPECT_EQ(hmr_mr_reg(domain_, large.data(), large.size(), HMR_REMOTE_READ, 0, 0, 0, &mr,
                       nullptr),
            -HMR_EINVAL);
}

TEST_F(VerbsDomainTest, CachedRegistrationsAreSharedAndDeregisteredOnce) {
  if (!open_cached_domain(kBasicMode)) {
    ASSERT_NE(domain_, nullptr);
    GTEST_SKIP() << "no cache monitor can start here: " << hmr_last_error();
  }
  std::vector<char> buffer(8192);
  hmr_mr* first = nullptr;
  hmr_mr* second = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain_, buffer.data(), 4096, HMR_SEND, 0, 0, 0, &first, nullptr), 0);
  ASSERT_EQ(hmr_mr_reg(domain_, buffer.data(), 4096, HMR_SEND, 0, 0, 0, &second, nullptr), 0);
  EXPECT_EQ(hmr_mr_desc(first), hmr_mr_desc(second));
  EXPECT_EQ(fake().call_count("ibv_reg_mr_iova2"), 1);
  EXPECT_EQ(hmr_mr_close(first), 0);
  EXPECT_EQ(hmr_mr_close(second), 0);
  EXPECT_EQ(hmr_domain_cache_flush(domain_), 0);
  EXPECT_EQ(fake().live("mrs"), 0);
}

}  // namespace
}  // namespace hmr::testing

namespace hmr::testing {
namespace {

// Page buffers with a gap page after each (no registration's range touches another's), in
// one mapping, written to, unmapped at the end.
class SpacedPages {
 public:
  explicit SpacedPages(size_t count) : bytes_(2 * count * 4096) {
    void* mapped =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped != MAP_FAILED) {
      base_ = static_cast<uint8_t*>(mapped);
      std::memset(base_, 1, bytes_);
    }
  }
  ~SpacedPages() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  SpacedPages(const SpacedPages&) = delete;
  SpacedPages& operator=(const SpacedPages&) = delete;
  explicit operator bool() const { return base_ != nullptr; }
  uint8_t* at(size_t i) const { return base_ + 2 * i * 4096; }

 private:
  size_t bytes_;
  uint8_t* base_ = nullptr;
};

// The fake's device 0 as `change` leaves it.
template <typename Change>
void change_device0(const FakeIbverbs& fake, Change&& change) {
  fake_ibverbs_device_config config{};
  fake.get_device(0, &config);
  change(config);
  fake.set_device(0, &config);
}

// Under pressure on verbs (docs/semantics.md): a device that holds 16 MRs (max_mr, which the
// fake now enforces as mlx5 does, with ENOMEM).  hmr takes max_mr as the domain's mr_cnt and
// gives back idle cached registrations before it would pass it; a refusal the limit did not
// foresee (ENOMEM injected) gives back and retries too.
TEST_F(VerbsDomainTest, AFullDeviceGetsIdleRegistrationsBack) {
  change_device0(fake(), [](fake_ibverbs_device_config& config) { config.max_mr = 16; });
  if (!open_cached_domain(kBasicMode)) {
    ASSERT_NE(domain_, nullptr);
    GTEST_SKIP() << "no cache monitor can start here: " << hmr_last_error();
  }
  EXPECT_EQ(attr_.mr_cnt, 16u) << "the device's max_mr";
  constexpr size_t kBuffers = 48;
  SpacedPages buffers(kBuffers);
  ASSERT_TRUE(buffers);
  for (size_t i = 0; i < kBuffers; ++i) {
    hmr_test::MrPtr mr = reg(buffers.at(i), 4096, HMR_REMOTE_READ);
    ASSERT_TRUE(mr) << "buffer " << i;
    EXPECT_LE(fake().live("mrs"), 16);
  }
  // A refusal no limit foresaw: the next ibv_reg_mr fails with ENOMEM once.
  fake().set_failure("ibv_reg_mr_iova2#1", ENOMEM);
  hmr_test::MrPtr after_refusal = reg(buffers.at(0), 4096 * 2 - 1, HMR_REMOTE_WRITE);
  EXPECT_TRUE(after_refusal);
  fake().set_failure("ibv_reg_mr_iova2", 0);
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  ASSERT_EQ(hmr_domain_query_stats(domain_, &stats), 0);
  EXPECT_GE(stats.cache_pressure_evictions, kBuffers - 16);
  EXPECT_EQ(stats.nic_refusal_retries, 1u);
  EXPECT_EQ(stats.nic_refusals, 0u);
  after_refusal.reset();
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
}

// A memory window on mlx5 takes an mkey from the table the MRs use (max_mr == max_mw ==
// 1 << log_max_mkey).  With every mkey held by idle cached registrations, hmr_mw_alloc gives
// some back and succeeds, as a registration does; it failed with ENOMEM.  With every mkey in
// use by open MRs it fails with the device's code and hmr's account of what it holds.
TEST_F(VerbsDomainTest, AWindowOnAFullDeviceGetsIdleRegistrationsBack) {
  change_device0(fake(),
                 [](fake_ibverbs_device_config& config) { config.max_mr = config.max_mw = 16; });
  if (!open_cached_domain(kBasicMode)) {
    ASSERT_NE(domain_, nullptr);
    GTEST_SKIP() << "no cache monitor can start here: " << hmr_last_error();
  }
  constexpr size_t kBuffers = 16;
  SpacedPages buffers(kBuffers);
  ASSERT_TRUE(buffers);
  std::vector<hmr_test::MrPtr> open;
  for (size_t i = 0; i < kBuffers; ++i) {
    open.push_back(reg(buffers.at(i), 4096, HMR_REMOTE_READ));
    ASSERT_TRUE(open.back()) << "buffer " << i;
  }
  // Every mkey in use: the device's refusal, with what hmr holds.
  hmr_mw* window = nullptr;
  EXPECT_EQ(hmr_mw_alloc(domain_, HMR_MW_TYPE_1, &window), -HMR_ENOMEM);
  EXPECT_NE(std::string(hmr_last_error()).find("in use by an open MR"), std::string::npos)
      << hmr_last_error();
  // Every mkey idle in the cache: one goes back and the window is made.
  open.clear();
  EXPECT_EQ(fake().live("mrs"), 16);
  ASSERT_EQ(hmr_mw_alloc(domain_, HMR_MW_TYPE_1, &window), 0) << hmr_last_error();
  EXPECT_LE(fake().live("mrs") + fake().live("mws"), 16);
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  ASSERT_EQ(hmr_domain_query_stats(domain_, &stats), 0);
  EXPECT_GE(stats.cache_pressure_evictions, 1u);
  EXPECT_GE(stats.nic_refusal_retries, 1u);
  // A registration beside the window, with the table full again, still gets one back.
  for (size_t i = 0; i < kBuffers; ++i) {
    EXPECT_TRUE(reg(buffers.at(i) + 4096, 1, HMR_REMOTE_READ)) << "buffer " << i;
  }
  ASSERT_EQ(hmr_mw_close(window), 0) << hmr_last_error();
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
}

// A device whose windows have a pool of their own (not Mellanox's shared mkey table): a window
// it refuses is the caller's at once, and the idle cache stays as it was (giving back could
// not make room, and emptied the cache for nothing).
TEST_F(VerbsDomainTest, AWindowRefusedByADeviceWithItsOwnPoolGivesNothingBack) {
  change_device0(fake(), [](fake_ibverbs_device_config& config) {
    config.mlx5 = 0;
    config.vendor_id = 0x8086;  // Intel (irdma)
    config.max_mw = 1;
  });
  if (!open_cached_domain(kBasicMode)) {
    ASSERT_NE(domain_, nullptr);
    GTEST_SKIP() << "no cache monitor can start here: " << hmr_last_error();
  }
  constexpr size_t kBuffers = 8;
  SpacedPages buffers(kBuffers);
  ASSERT_TRUE(buffers);
  for (size_t i = 0; i < kBuffers; ++i) {
    ASSERT_TRUE(reg(buffers.at(i), 4096, HMR_REMOTE_READ)) << "buffer " << i;
  }
  EXPECT_EQ(fake().live("mrs"), 8);
  hmr_mw* first = nullptr;
  ASSERT_EQ(hmr_mw_alloc(domain_, HMR_MW_TYPE_1, &first), 0) << hmr_last_error();
  hmr_mw* second = nullptr;
  EXPECT_EQ(hmr_mw_alloc(domain_, HMR_MW_TYPE_1, &second), -HMR_ENOMEM);
  EXPECT_EQ(fake().live("mrs"), 8) << "idle registrations were given back for nothing";
  ASSERT_EQ(hmr_mw_close(first), 0) << hmr_last_error();
  ASSERT_EQ(hmr_domain_close(domain_), 0) << hmr_last_error();
  domain_ = nullptr;
}

// Verbs requires MR_LOCAL (every work request names its local buffers by lkey), and the
// application posts its own work requests: hmr clears LOCAL from the domain's mode, as for
// every NIC, and hmr_md_query tells the application it must pass local descriptors.
TEST_F(VerbsDomainTest, MdQuerySaysLocalBuffersNeedDescriptors) {
  ASSERT_EQ(open_domain(kFakeConnectX, nullptr, kVerbsBasicMode), 0) << hmr_last_error();
  EXPECT_EQ(attr_.mr_mode & HMR_MR_LOCAL, 0u);
  hmr_md_attr md{};
  md.size = sizeof md;
  ASSERT_EQ(hmr_md_query(domain_, &md), 0) << hmr_last_error();
  EXPECT_NE(md.flags & HMR_MD_FLAG_LOCAL_DESCRIPTORS, 0u);
}

// Zero bytes and no access (docs/semantics.md): access 0 reaches ibv_reg_mr as access 0 (local
// read only); zero bytes reach it too, and the kernel refuses a registration of no pages
// (ib_umem_get: npages == 0 is -EINVAL), which the caller gets with the device's words.
TEST_F(VerbsDomainTest, AccessZeroRegistersAndZeroBytesGetTheKernelsAnswer) {
  ASSERT_EQ(open_domain(kFakeConnectX, nullptr, kVerbsBasicMode), 0) << hmr_last_error();
  std::vector<uint8_t> buffer(2 * kTestPage);
  hmr_test::MrPtr no_access = reg(buffer.data(), kTestPage, 0);
  ASSERT_TRUE(no_access);
  const std::vector<fake_ibverbs_registration> made = registrations();
  ASSERT_FALSE(made.empty());
  EXPECT_EQ(made.back().access, 0u);
  hmr_mr* empty = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain_, buffer.data(), 0, kRemoteAccess, 0, 0, 0, &empty, nullptr),
            -HMR_EINVAL);
  EXPECT_NE(std::string(hmr_last_error()).find("fake_mlx5_0"), std::string::npos)
      << hmr_last_error();
}

}  // namespace
}  // namespace hmr::testing
