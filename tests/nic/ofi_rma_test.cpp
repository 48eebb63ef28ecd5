// hmr over real libfabric providers (tcp over loopback, shm): the application opens its own
// domain and endpoints, hmr registers on that domain, and bytes move with fi_write/fi_read
// using hmr's descriptors and keys — so a key or address hmr got wrong fails here.
#include <gtest/gtest.h>
#include <hmr/hmr.h>

#include <cstring>
#include <string>
#include <vector>

#include "ofi_test_fabric.h"
#include "tests/api/test_support.h"

namespace {

using hmr_ofi_test::AppDomain;
using hmr_ofi_test::EndpointPair;
using hmr_ofi_test::ProviderChoice;
using namespace hmr_test;  // DomainPtr, MrPtr, Pages, EXPECT_HMR_ERROR, ASSERT_HMR_OK

constexpr size_t kPage = 4096;
constexpr uint64_t kRemote = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
constexpr uint64_t kLocal = HMR_READ | HMR_WRITE;
// What a typical application supports.
constexpr uint64_t kAppMode = HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_ALLOCATED | HMR_MR_LOCAL;

struct ProviderCase {
  const char* name;
  ProviderChoice choice;
  uint64_t domain_mode;  // what the provider answers for those hints
};

std::vector<uint8_t> pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> bytes(len);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return bytes;
}

// Wraps the application's domain; `attr_out` gets what hmr wrote back.
DomainPtr wrap(const AppDomain& app, uint64_t app_mode, hmr_domain_attr* attr_out = nullptr) {
  const std::string options = app.wrap_options();
  hmr_domain_attr attr = domain_attr(app_mode, options.c_str());
  attr.nic = "ofi";
  attr.nic_handle = app.domain();
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, 0) << options << ": " << hmr_last_error();
  if (attr_out != nullptr) *attr_out = attr;
  return DomainPtr(rc == 0 ? domain : nullptr);
}

// The address a peer targets for byte `offset` of `mr`, as hmr reports it.
uint64_t remote_address(hmr_mr* mr, uint64_t offset) {
  uint64_t base = ~0ULL;
  uint8_t raw[16];
  size_t size = sizeof raw;
  EXPECT_EQ(hmr_mr_raw_attr(mr, &base, raw, &size, 0), 0) << hmr_last_error();
  return base + offset;
}

class OfiRma : public ::testing::TestWithParam<ProviderCase> {
 protected:
  void SetUp() override {
    app_ = std::make_unique<AppDomain>(GetParam().choice);
    ASSERT_TRUE(*app_);
    ASSERT_EQ(static_cast<uint64_t>(app_->info()->domain_attr->mr_mode), GetParam().domain_mode);
  }
  bool virt_addr() const { return (GetParam().domain_mode & FI_MR_VIRT_ADDR) != 0; }

  std::unique_ptr<AppDomain> app_;
};

TEST_P(OfiRma, WriteAndReadWithHmrDescriptorsAndKeys) {
  hmr_domain_attr negotiated;
  DomainPtr domain = wrap(*app_, kAppMode, &negotiated);
  ASSERT_TRUE(domain);
  // The provider's addressing, plus provider keys hmr supplies; LOCAL is emulated.
  EXPECT_EQ(negotiated.mr_mode, (virt_addr() ? HMR_MR_VIRT_ADDR : 0) | HMR_MR_PROV_KEY);
  EXPECT_EQ(negotiated.nic_handle, app_->domain()) << "the wrapped domain is the one in use";
  EXPECT_EQ(negotiated.mr_key_size, app_->info()->domain_attr->mr_key_size);

  Pages target(2 * kPage);
  std::memset(target.data(), 0x5a, target.size());
  std::vector<uint8_t> local = pattern(2 * kPage, 3);
  MrPtr target_mr = reg(domain.get(), target.data(), target.size(), kRemote);
  MrPtr local_mr = reg(domain.get(), local.data(), local.size(), kLocal);
  ASSERT_TRUE(target_mr && local_mr);
  const uint64_t key = hmr_mr_key(target_mr.get());
  ASSERT_NE(key, HMR_KEY_NOTAVAIL);
  EXPECT_EQ(remote_address(target_mr.get(), 0),
            virt_addr() ? reinterpret_cast<uint64_t>(target.data()) : 0u);

  EndpointPair pair(app_->domain(), app_->info());
  ASSERT_TRUE(pair);
  ASSERT_EQ(pair.write(local.data(), 1000, hmr_mr_desc(local_mr.get()),
                       remote_address(target_mr.get(), 3000), key), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(target.data() + 3000, local.data(), 1000), 0);
  EXPECT_EQ(target.data()[2999], 0x5a) << "wrote before the range";
  EXPECT_EQ(target.data()[4000], 0x5a) << "wrote past the range";

  for (size_t i = 0; i < 512; ++i) target.data()[kPage + i] = static_cast<uint8_t>(0xc0 ^ i);
  std::memset(local.data(), 0, 512);
  ASSERT_EQ(pair.read(local.data(), 512, hmr_mr_desc(local_mr.get()),
                      remote_address(target_mr.get(), kPage), key), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(local.data(), target.data() + kPage, 512), 0);

  // The whole region in one operation.
  const std::vector<uint8_t> whole = pattern(2 * kPage, 91);
  std::memcpy(local.data(), whole.data(), whole.size());
  ASSERT_EQ(pair.write(local.data(), whole.size(), hmr_mr_desc(local_mr.get()),
                       remote_address(target_mr.get(), 0), key), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(target.data(), whole.data(), whole.size()), 0);
}

TEST_P(OfiRma, ProviderRefusesAKeyHmrDidNotGive) {
  DomainPtr domain = wrap(*app_, HMR_MR_VIRT_ADDR);  // no PROV_KEY: the application's keys
  ASSERT_TRUE(domain);
  Pages target(kPage);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote, 0x4321);
  ASSERT_TRUE(mr);
  EXPECT_EQ(hmr_mr_key(mr.get()), 0x4321u) << "a requested key reaches the provider unchanged";

  EndpointPair pair(app_->domain(), app_->info());
  ASSERT_TRUE(pair);
  const std::vector<uint8_t> out = pattern(256, 17);
  ASSERT_EQ(pair.write(out.data(), out.size(), nullptr, remote_address(mr.get(), 64), 0x4321), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(target.data() + 64, out.data(), out.size()), 0);
  std::memset(target.data(), 0, kPage);
  EXPECT_NE(pair.write(out.data(), out.size(), nullptr, remote_address(mr.get(), 64), 0x4322,
                       EndpointPair::kRefusalDeadline), 0)
      << "the provider accepted a key nobody registered";
  EXPECT_EQ(target.data()[64], 0) << "bytes landed through a key nobody registered";
}

TEST_P(OfiRma, ClosedMrIsGoneFromTheProvider) {
  DomainPtr domain = wrap(*app_, HMR_MR_VIRT_ADDR);  // requested keys: never cached
  ASSERT_TRUE(domain);
  Pages target(kPage);
  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote, 77);
  ASSERT_TRUE(mr);
  const uint64_t address = remote_address(mr.get(), 0);
  EndpointPair pair(app_->domain(), app_->info());
  ASSERT_TRUE(pair);
  const std::vector<uint8_t> out = pattern(64, 5);
  ASSERT_EQ(pair.write(out.data(), out.size(), nullptr, address, 77), 0) << pair.last_error();
  mr.reset();
  std::memset(target.data(), 0, kPage);
  EXPECT_NE(pair.write(out.data(), out.size(), nullptr, address, 77,
                       EndpointPair::kRefusalDeadline), 0)
      << "a closed MR still accepted writes";
  EXPECT_EQ(target.data()[0], 0) << "bytes landed in a closed MR";
}

TEST_P(OfiRma, RepeatedRegistrationHitsTheCache) {
  DomainPtr domain = wrap(*app_, kAppMode);
  ASSERT_TRUE(domain);
  Pages target(4 * kPage);
  MrPtr first = reg(domain.get(), target.data(), target.size(), kRemote);
  MrPtr second = reg(domain.get(), target.data(), target.size(), kRemote);
  ASSERT_TRUE(first && second);
  hmr_domain_stats stats{};
  stats.size = sizeof stats;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain.get(), &stats));
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.nic_registrations, 1u) << "the second MR shares the provider registration";
  EXPECT_EQ(hmr_mr_key(first.get()), hmr_mr_key(second.get()));

  // The shared key serves a peer after the first MR is gone.
  first.reset();
  EndpointPair pair(app_->domain(), app_->info());
  ASSERT_TRUE(pair);
  const std::vector<uint8_t> out = pattern(128, 9);
  ASSERT_EQ(pair.write(out.data(), out.size(), nullptr, remote_address(second.get(), kPage),
                       hmr_mr_key(second.get())), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(target.data() + kPage, out.data(), out.size()), 0);
}

TEST_P(OfiRma, KeysHmrChoosesSkipKeysTheApplicationHolds) {
  DomainPtr domain = wrap(*app_, kAppMode);
  ASSERT_TRUE(domain);
  Pages target(kPage);
  // hmr counts its keys up; learn where the count stands ...
  uint64_t last = 0;
  {
    MrPtr probe = reg(domain.get(), target.data(), kPage, kRemote);
    ASSERT_TRUE(probe);
    last = hmr_mr_key(probe.get());
  }
  hmr_domain_cache_flush(domain.get());  // the probe's registration leaves the provider
  // ... and take the next keys on the application's own registrations of the same domain.
  constexpr int kTaken = 5;
  Pages mine(kPage);
  std::vector<hmr_ofi_test::FidPtr> taken;
  for (uint64_t key = last + 1; key <= last + kTaken; ++key) {
    fid_mr* app_mr = nullptr;
    ASSERT_EQ(fi_mr_reg(app_->domain(), mine.data(), kPage, FI_REMOTE_WRITE, 0, key, 0, &app_mr,
                        nullptr), 0) << "key " << key;
    taken.emplace_back(&app_mr->fid);
  }

  MrPtr mr = reg(domain.get(), target.data(), kPage, kRemote);
  ASSERT_TRUE(mr);
  const uint64_t key = hmr_mr_key(mr.get());
  EXPECT_GT(key, last + kTaken) << "hmr's keys count up and must pass the ones the application "
                                   "holds";
  EndpointPair pair(app_->domain(), app_->info());
  ASSERT_TRUE(pair);
  const std::vector<uint8_t> out = pattern(100, 33);
  ASSERT_EQ(pair.write(out.data(), out.size(), nullptr, remote_address(mr.get(), 0), key), 0)
      << pair.last_error();
  EXPECT_EQ(std::memcmp(target.data(), out.data(), out.size()), 0);
  EXPECT_EQ(mine.data()[0], 0) << "the write reached the application's MR instead";
}

TEST_P(OfiRma, RequestedKeyTheApplicationHoldsIsRefused) {
  Pages mine(kPage);
  fid_mr* app_mr = nullptr;
  ASSERT_EQ(fi_mr_reg(app_->domain(), mine.data(), kPage, FI_REMOTE_WRITE, 0, 500, 0, &app_mr,
                      nullptr), 0);
  hmr_ofi_test::FidPtr close(&app_mr->fid);
  DomainPtr domain = wrap(*app_, HMR_MR_VIRT_ADDR);
  ASSERT_TRUE(domain);
  Pages target(kPage);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), target.data(), kPage, kRemote, 0, 500, 0, &mr,
                              nullptr), HMR_ENOKEY);
  EXPECT_NE(std::string(hmr_last_error()).find("in use on the libfabric domain"),
            std::string::npos) << hmr_last_error();
  EXPECT_EQ(mr, nullptr);
}

TEST_P(OfiRma, RmaEventRegistrationIsRefusedWithAReason) {
  DomainPtr domain = wrap(*app_, kAppMode);
  ASSERT_TRUE(domain);
  Pages target(kPage);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), target.data(), kPage, kRemote, 0, 0, HMR_RMA_EVENT,
                              &mr, nullptr), HMR_EOPNOTSUPP);
  EXPECT_NE(std::string(hmr_last_error()).find("counters"), std::string::npos) << hmr_last_error();
}

TEST_P(OfiRma, DomainWithoutVirtualAddressesNeverReportsThem) {
  hmr_domain_attr negotiated;
  DomainPtr domain = wrap(*app_, HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY, &negotiated);
  ASSERT_TRUE(domain);
  EXPECT_EQ((negotiated.mr_mode & HMR_MR_VIRT_ADDR) != 0, virt_addr())
      << "hmr must report the addressing the provider's domain actually uses";
}

INSTANTIATE_TEST_SUITE_P(
    Providers, OfiRma,
    ::testing::Values(ProviderCase{"tcp", hmr_ofi_test::tcp_loopback(), 0},
                      ProviderCase{"shm_virt_addr", hmr_ofi_test::shm_choice(FI_MR_VIRT_ADDR),
                                   FI_MR_VIRT_ADDR},
                      ProviderCase{"shm_offsets", hmr_ofi_test::shm_choice(0), 0}),
    [](const ::testing::TestParamInfo<ProviderCase>& param) { return param.param.name; });

}  // namespace
