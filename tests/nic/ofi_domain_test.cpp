// Opening ofi domains: by provider name (hmr opens and owns the libfabric domain), around the
// application's own domain, and every way that goes wrong — each with a clear code and reason.
#include <gtest/gtest.h>
#include <hmr/hmr.h>
#include <stdlib.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nic/nic.h"
#include "nic/ofi/ofi_mr_attr.h"
#include "ofi_test_fabric.h"
#include "tests/api/test_support.h"
#include "tests/scoped_env.h"

namespace {

using hmr_ofi_test::AppDomain;
using hmr_ofi_test::EndpointPair;
using namespace hmr_test;

constexpr size_t kPage = 4096;
constexpr uint64_t kAppMode = HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_ALLOCATED;
const char* const kTcpLoopback = "provider=tcp;domain=lo;fabric=127.0.0.1/32";

hmr_domain_attr ofi_attr(const char* options, uint64_t app_mode = kAppMode,
                         void* handle = nullptr) {
  hmr_domain_attr attr = domain_attr(app_mode, options);
  attr.nic = "ofi";
  attr.nic_handle = handle;
  return attr;
}

// Expects hmr_domain_open to fail with `code` and a reason containing `part`.
void expect_open_error(hmr_domain_attr attr, int code, const char* part) {
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, -code) << hmr_last_error();
  EXPECT_EQ(domain, nullptr);
  if (rc == 0) {
    EXPECT_EQ(hmr_domain_close(domain), 0);
  }
  EXPECT_NE(std::string(hmr_last_error()).find(part), std::string::npos)
      << "reason: " << hmr_last_error();
}

// hmr's domain around the application's `app` (its provider, mode and threading), or null
// with a failure; `cache_monitor` as hmr_domain_attr's (null: the default).
DomainPtr open_around(const AppDomain& app, const char* cache_monitor = nullptr) {
  const std::string options = app.wrap_options();
  hmr_domain_attr attr = ofi_attr(options.c_str(), kAppMode, app.domain());
  attr.cache_monitor = cache_monitor;
  hmr_domain* raw = nullptr;
  EXPECT_EQ(hmr_domain_open(&attr, &raw), 0) << hmr_last_error();
  return DomainPtr(raw);
}

// The key of a registration of one page made and closed: left idle in the cache.
uint64_t idle_registration_key(hmr_domain* domain, void* page) {
  MrPtr mr = reg(domain, page, kPage, HMR_REMOTE_READ);
  EXPECT_TRUE(mr);
  return mr ? hmr_mr_key(mr.get()) : HMR_KEY_NOTAVAIL;
}

// ------------------------------------------------------- hmr opens the domain itself ----

void expect_own_domain_moves_bytes(const char* options,
                                   const hmr_ofi_test::ProviderChoice& choice) {
  hmr_domain_attr attr = ofi_attr(options);
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  // hmr shows the domain it opened, so the application can put endpoints on it.
  auto* fabric_domain = static_cast<fid_domain*>(attr.nic_handle);
  ASSERT_NE(fabric_domain, nullptr);
  EXPECT_EQ(fabric_domain->fid.fclass, static_cast<size_t>(FI_CLASS_DOMAIN));

  Pages target(2 * kPage);
  std::memset(target.data(), 0, target.size());
  MrPtr mr = reg(domain.get(), target.data(), target.size(), HMR_REMOTE_WRITE | HMR_REMOTE_READ);
  ASSERT_TRUE(mr);
  uint64_t base = 0;
  uint8_t raw_key[16];
  size_t key_size = sizeof raw_key;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr.get(), &base, raw_key, &key_size, 0));

  hmr_ofi_test::InfoPtr info = hmr_ofi_test::find_info(choice);
  ASSERT_TRUE(info);
  {
    EndpointPair pair(fabric_domain, info.get());
    ASSERT_TRUE(pair);
    std::vector<uint8_t> out(3000);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 31 + 1);
    ASSERT_EQ(pair.write(out.data(), out.size(), nullptr, base + 1000, hmr_mr_key(mr.get())), 0)
        << pair.last_error();
    EXPECT_EQ(std::memcmp(target.data() + 1000, out.data(), out.size()), 0);
    std::vector<uint8_t> in(3000, 0);
    ASSERT_EQ(pair.read(in.data(), in.size(), nullptr, base + 1000, hmr_mr_key(mr.get())), 0)
        << pair.last_error();
    EXPECT_EQ(in, out);
  }
  mr.reset();
  // hmr closes the libfabric domain it opened with the hmr domain (and would fail if an MR
  // were left on it).
}

TEST(OfiOwnDomain, TcpByProviderName) {
  expect_own_domain_moves_bytes(kTcpLoopback, hmr_ofi_test::tcp_loopback());
}

TEST(OfiOwnDomain, LayeredProviderNameAsLibfabricPrintsIt) {
  expect_own_domain_moves_bytes("provider=tcp;ofi_rxm;domain=lo;fabric=127.0.0.1/32",
                                hmr_ofi_test::tcp_loopback());
}

TEST(OfiOwnDomain, ShmByProviderName) {
  // hmr offers VIRT_ADDR in its hints, and shm takes it.
  expect_own_domain_moves_bytes("provider=shm", hmr_ofi_test::shm_choice(FI_MR_VIRT_ADDR));
}

// libfabric refuses to close a domain while objects opened on it are open (fi_domain(3),
// fi_close: -FI_EBUSY).  hmr says so rather than report a close that did not happen; its own
// domain is closed all the same (libfabric 1.17's rxm cannot be asked to close twice).
TEST(OfiOwnDomain, CloseSaysSoWhenTheApplicationLeftObjectsOnTheLibfabricDomain) {
  hmr_domain_attr attr = ofi_attr(kTcpLoopback);
  hmr_domain* domain = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &domain));
  auto* fabric_domain = static_cast<fid_domain*>(attr.nic_handle);
  ASSERT_NE(fabric_domain, nullptr);
  Pages pages(2 * kPage);
  {
    MrPtr cached = reg(domain, pages.data(), pages.size(), HMR_REMOTE_READ);  // left cached
    ASSERT_TRUE(cached);
  }
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(fabric_domain, &cq_attr, &cq, nullptr), 0);

  // Not EBUSY, which says nothing was closed: the hmr domain is gone.
  EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EIO);
  EXPECT_NE(std::string(hmr_last_error()).find("still open"), std::string::npos)
      << hmr_last_error();
  EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EINVAL);  // closed: the handle is gone
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST(OfiOwnDomain, ReportsTheProvidersLimits) {
  hmr_domain_attr attr = ofi_attr("provider=shm");
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  hmr_ofi_test::InfoPtr info = hmr_ofi_test::find_info(hmr_ofi_test::shm_choice(FI_MR_VIRT_ADDR));
  ASSERT_TRUE(info);
  EXPECT_EQ(attr.mr_iov_limit, info->domain_attr->mr_iov_limit);
  EXPECT_EQ(attr.mr_key_size, info->domain_attr->mr_key_size);
  EXPECT_EQ(attr.mr_mode, HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY);
}

TEST(OfiOwnDomain, UnknownProviderNamesTheProvider) {
  expect_open_error(ofi_attr("provider=no_such_provider"), HMR_ENODEV, "'no_such_provider'");
}

TEST(OfiOwnDomain, UnknownDomainNameListsWhatThereIs) {
  expect_open_error(ofi_attr("provider=tcp;domain=no_such_interface"), HMR_ENODEV, "lo (");
}

TEST(OfiOwnDomain, ApplicationWithoutVirtualAddressesGetsAnOffsetDomainOrAClearNo) {
  // Asking for a domain without VIRT_ADDR through the hints works on shm ...
  hmr_domain_attr attr = ofi_attr("provider=shm;mr_mode=PROV_KEY", HMR_MR_PROV_KEY);
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  EXPECT_EQ(attr.mr_mode, HMR_MR_PROV_KEY);
  // ... while hmr's default hints give a VIRT_ADDR domain the application must support.
  expect_open_error(ofi_attr("provider=shm", HMR_MR_PROV_KEY), HMR_ENODATA, "VIRT_ADDR");
}

// ------------------------------------------------------- the application's own domain ----

TEST(OfiWrappedDomain, NeedsProviderAndModeInOptions) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  expect_open_error(ofi_attr(nullptr, kAppMode, app.domain()), HMR_EINVAL, "provider mr_mode");
  expect_open_error(ofi_attr("provider=tcp", kAppMode, app.domain()), HMR_EINVAL,
                    "missing: mr_mode");
  expect_open_error(ofi_attr("mr_mode=0", kAppMode, app.domain()), HMR_EINVAL,
                    "missing: provider");
}

TEST(OfiWrappedDomain, AnotherLibfabricObjectIsNotADomain) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  const std::string options = app.wrap_options();
  expect_open_error(ofi_attr(options.c_str(), kAppMode, app.fabric()), HMR_EINVAL,
                    "not a libfabric domain");
}

TEST(OfiWrappedDomain, ApplicationMustSupportWhatItsDomainRequires) {
  AppDomain app(hmr_ofi_test::shm_choice(FI_MR_VIRT_ADDR));
  ASSERT_TRUE(app);
  const std::string options = app.wrap_options();
  expect_open_error(ofi_attr(options.c_str(), HMR_MR_PROV_KEY, app.domain()), HMR_ENODATA,
                    "VIRT_ADDR");
}

// A mode stated with bits the provider does not use (the hints, not fi_getinfo's answer) is
// refused: hmr would believe the provider chooses keys and hand it none (found by a review:
// the second registration failed with FI_ENOKEY).
TEST(OfiWrappedDomain, AModeTheProviderDoesNotUseIsRefused) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  const std::string hints = std::string(hmr_ofi_test::tcp_loopback().provider) +
                            ";mr_mode=" + std::to_string(FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
  hmr_ofi_test::InfoPtr info = hmr_ofi_test::find_info(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(info);
  if ((info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0) {
    GTEST_SKIP() << "this libfabric's tcp uses provider keys";
  }
  expect_open_error(ofi_attr(("provider=" + hints).c_str(), kAppMode, app.domain()), HMR_EINVAL,
                    "not the hints");
}

// hmr_md_query's registration cost on a domain of requested keys: the measurement's key is
// never ~0, which is FI_KEY_NOTAVAIL (the adapter took it for "no key" and failed, -HMR_EIO).
TEST(OfiOwnDomain, RegistrationCostWithRequestedKeys) {
  hmr_domain_attr attr = ofi_attr(kTcpLoopback, HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED);
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  if (attr.mr_mode & HMR_MR_PROV_KEY) GTEST_SKIP() << "provider keys: no key is requested";
  hmr_md_attr cost;
  std::memset(&cost, 0, sizeof cost);
  cost.size = sizeof cost;
  cost.field_mask = HMR_MD_ATTR_REG_COST;
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &cost));
  EXPECT_EQ(cost.reg_cost_measured, 1);
}

// A domain the application opened FI_THREAD_DOMAIN (threading= in nic_options) is called only
// from the application's own calls on it: fi_domain(3) makes the application serialize every
// call on such a domain, and hmr's reaper thread (or another thread's hmr_mem_invalidate)
// closing an MR there raced the application's own calls (found by a review).  The dead
// registration waits for the domain's next miss; asynchronous registration is refused.
TEST(OfiWrappedDomain, ADomainTheApplicationSerializesIsCalledOnlyFromItsCalls) {
  AppDomain app(hmr_ofi_test::tcp_loopback(), FI_THREAD_DOMAIN);
  ASSERT_TRUE(app);
  ASSERT_NE(app.wrap_options().find("threading=" + std::to_string(FI_THREAD_DOMAIN)),
            std::string::npos);
  DomainPtr domain = open_around(app);
  ASSERT_TRUE(domain);
  // Whether the key is still registered on the application's domain: tcp refuses a requested
  // key in use (-FI_ENOKEY).  (Asking hmr would be a call on the domain, which may deregister.)
  Pages probe(kPage);
  auto key_in_use = [&](uint64_t key) {
    fid_mr* mr = nullptr;
    const int rc = fi_mr_reg(app.domain(), probe.data(), kPage, FI_REMOTE_READ, 0, key, 0, &mr,
                             nullptr);
    if (rc == 0) {
      EXPECT_EQ(fi_close(&mr->fid), 0);
    }
    EXPECT_TRUE(rc == 0 || rc == -FI_ENOKEY) << fi_strerror(-rc);
    return rc == -FI_ENOKEY;
  };
  Pages first(kPage);
  Pages second(kPage);
  const uint64_t key = idle_registration_key(domain.get(), first.data());
  ASSERT_TRUE(key_in_use(key));
  // Another thread drops it: the deregistration is left for this domain's next call.
  std::thread other([&] { EXPECT_EQ(hmr_mem_invalidate(nullptr, first.data(), kPage), 0); });
  other.join();
  EXPECT_TRUE(key_in_use(key)) << "another thread closed an MR of the serialized domain";
  ASSERT_TRUE(reg(domain.get(), second.data(), kPage, HMR_REMOTE_READ));  // a call on it
  EXPECT_FALSE(key_in_use(key)) << "the domain's next call did not deregister what was left";

  hmr_eq* eq = nullptr;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, &eq));
  EXPECT_HMR_ERROR(hmr_domain_bind(domain.get(), hmr_eq_fid(eq), HMR_REG_MR), HMR_EOPNOTSUPP);
  EXPECT_NE(std::string(hmr_last_error()).find("serialized"), std::string::npos)
      << hmr_last_error();
  EXPECT_EQ(hmr_eq_close(eq), 0) << hmr_last_error();
}

// Keys hmr chooses (the provider takes requested keys, the application lets hmr choose) that
// all collide with keys the application holds on the same libfabric domain: a shortage of
// keys, so -HMR_ENOSPC, which the cache answers by giving back idle registrations and trying
// again (registration/nic_pressure.h) — the next keys are free, and the registration succeeds.
// It failed with -HMR_ENOKEY, "requested key in use", for a caller that requested none.
TEST(OfiWrappedDomain, ChosenKeysAllInUseAreAShortageTheCacheRelieves) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  if ((app.info()->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0) {
    GTEST_SKIP() << "this libfabric's tcp uses provider keys: hmr chooses none";
  }
  const size_t key_size = app.info()->domain_attr->mr_key_size;
  DomainPtr domain = open_around(app);
  ASSERT_TRUE(domain);
  Pages first(kPage);
  const uint64_t key = idle_registration_key(domain.get(), first.data());
  ASSERT_NE(key, HMR_KEY_NOTAVAIL);
  // The 64 keys hmr's next registration will try (its count went on by one from `key`),
  // registered by the application first.
  Pages probe(kPage);
  std::vector<fid_mr*> taken;
  uint64_t count = key + 1;
  for (int attempt = 1; attempt <= 64; ++attempt) {
    fid_mr* mr = nullptr;
    const uint64_t chosen = hmr::nic::ofi::chosen_key(count, key_size);
    const int rc = fi_mr_reg(app.domain(), probe.data(), kPage, FI_REMOTE_READ, 0, chosen, 0,
                             &mr, nullptr);
    ASSERT_EQ(rc, 0) << "key " << chosen << ": " << fi_strerror(-rc);
    taken.push_back(mr);
    count += hmr::nic::ofi::chosen_key_stride(attempt, key_size);
  }
  hmr_domain_stats before{};
  before.size = sizeof before;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain.get(), &before));
  Pages second(kPage);
  hmr_mr* mr = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), second.data(), kPage, HMR_REMOTE_READ, 0, 0, 0, &mr,
                       nullptr),
            0)
      << hmr_last_error();
  hmr_domain_stats after{};
  after.size = sizeof after;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain.get(), &after));
  EXPECT_EQ(after.nic_refusal_retries, before.nic_refusal_retries + 1);
  EXPECT_EQ(after.cache_pressure_evictions, before.cache_pressure_evictions + 1)
      << "the idle registration (and its key) was not given back";
  if (mr != nullptr) {
    EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
  }
  for (fid_mr* held : taken) EXPECT_EQ(fi_close(&held->fid), 0);
}

// Access and flags libfabric would take and ignore are refused with the reason: HMR_MW_BIND
// (libfabric has no memory windows: hmr_mw_alloc on such an MR fails anyway) and, on a
// provider without FI_RMA_PMEM, HMR_RMA_PMEM.  Both used to register (found by a review).
TEST(OfiOwnDomain, WhatLibfabricCannotGiveIsRefused) {
  hmr_domain_attr attr = ofi_attr(kTcpLoopback);
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  Pages pages(kPage);
  hmr_mr* mr = nullptr;
  EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), pages.data(), kPage,
                              HMR_REMOTE_READ | HMR_MW_BIND, 0, 0, 0, &mr, nullptr),
                   HMR_ENOSYS);
  EXPECT_NE(std::string(hmr_last_error()).find("HMR_MW_BIND"), std::string::npos)
      << hmr_last_error();
  hmr_ofi_test::InfoPtr info = hmr_ofi_test::find_info(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(info);
  if ((info->caps & FI_RMA_PMEM) == 0) {
    EXPECT_HMR_ERROR(hmr_mr_reg(domain.get(), pages.data(), kPage, HMR_REMOTE_READ, 0, 0,
                                HMR_RMA_PMEM, &mr, nullptr),
                     HMR_EOPNOTSUPP);
    EXPECT_NE(std::string(hmr_last_error()).find("FI_RMA_PMEM"), std::string::npos)
        << hmr_last_error();
  }
  EXPECT_EQ(mr, nullptr);
}

// libfabric's mr_cnt is a limit hmr enforces only where it is the device's (providers that
// register through a kernel driver): sockets states 65535 and registers past it.
TEST(OfiOwnDomain, ASoftwareProvidersMrCntIsNoLimit) {
  hmr_domain_attr attr = ofi_attr("provider=sockets");
  hmr_domain* raw = nullptr;
  if (hmr_domain_open(&attr, &raw) != 0) GTEST_SKIP() << hmr_last_error();
  DomainPtr domain(raw);
  EXPECT_EQ(attr.mr_cnt, 0u) << "the negotiated mr_cnt";
  hmr_md_attr md;
  std::memset(&md, 0, sizeof md);
  md.size = sizeof md;
  ASSERT_HMR_OK(hmr_md_query(domain.get(), &md));
  EXPECT_EQ(md.max_registrations, 0u);
  ASSERT_NE(md.max_registrations_source, nullptr);
  EXPECT_STREQ(md.max_registrations_source, "none");
}

TEST(OfiOwnDomain, ThreadingIsForADomainYouWrap) {
  expect_open_error(ofi_attr((std::string(kTcpLoopback) + ";threading=domain").c_str()),
                    HMR_EINVAL, "nic_handle");
}

TEST(OfiWrappedDomain, AThreadingLevelLibfabricDoesNotKnowIsRefused) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  const std::string options = app.wrap_options() + ";threading=sometimes";
  expect_open_error(ofi_attr(options.c_str(), kAppMode, app.domain()), HMR_EINVAL,
                    "not a libfabric threading level");
}

TEST(OfiWrappedDomain, HmrNeverClosesTheApplicationsDomain) {
  AppDomain app(hmr_ofi_test::shm_choice(0));
  ASSERT_TRUE(app);
  const std::string options = app.wrap_options();
  for (int round = 0; round < 2; ++round) {
    hmr_domain_attr attr = ofi_attr(options.c_str(), kAppMode, app.domain());
    hmr_domain* raw = nullptr;
    ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
    ASSERT_HMR_OK(hmr_domain_close(raw));
  }
  // Still open and usable (AppDomain's destructor checks fi_close succeeds too).
  Pages page(kPage);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(app.domain(), page.data(), kPage, FI_REMOTE_READ, 0, 9, 0, &mr, nullptr), 0);
  if (mr != nullptr) {
    EXPECT_EQ(fi_close(&mr->fid), 0);
  }
}

// A provider reads fi_mr_attr as long as its fabric's API version says (libfabric's
// ofi_mr_update_attr copies by domain->fabric->api_version), and an application's domain
// may speak a newer version than the headers hmr was built with.  What such a provider reads
// past this build's fi_mr_attr (1.19 hmem_data, 1.22 page_size, 2.0 base_mr, sub_mr_cnt) must
// be zero, "not given": it was hmr's own flags (a pointer, to the provider) and then the
// stack.  The provider's regattr is interposed on the application's domain to see the bytes.
std::vector<unsigned char> bytes_past_mr_attr;
fi_ops_mr provider_mr_ops;

int regattr_reading_past_the_struct(fid* domain, const fi_mr_attr* attr, uint64_t flags,
                                    fid_mr** mr) {
  const auto* past = reinterpret_cast<const unsigned char*>(attr) + sizeof(fi_mr_attr);
  bytes_past_mr_attr.assign(past, past + 64);
  return provider_mr_ops.regattr(domain, attr, flags, mr);
}

TEST(OfiWrappedDomain, WhatANewerProviderReadsPastTheMrAttrIsZero) {
  AppDomain app(hmr_ofi_test::tcp_loopback());
  ASSERT_TRUE(app);
  fi_ops_mr* const original = app.domain()->mr;
  provider_mr_ops = *original;
  fi_ops_mr interposed = *original;
  interposed.regattr = regattr_reading_past_the_struct;
  app.domain()->mr = &interposed;
  DomainPtr domain = open_around(app, "disabled");
  ASSERT_TRUE(domain);
  Pages page(kPage);
  // Flags that reach fi_mr_regattr (HMR_RMA_PMEM passes through): hmr's flags word followed
  // the struct.  Whether tcp takes them does not matter here, only what it was given.
  for (uint64_t flags : {uint64_t{0}, uint64_t{HMR_RMA_PMEM}}) {
    bytes_past_mr_attr.clear();
    const iovec segment = {page.data(), kPage};
    hmr_mr_attr mr_attr{};
    mr_attr.size = sizeof mr_attr;
    mr_attr.mr_iov = &segment;
    mr_attr.iov_count = 1;
    mr_attr.access = HMR_REMOTE_READ;
    hmr_mr* mr = nullptr;
    const int rc = hmr_mr_regattr(domain.get(), &mr_attr, flags, &mr);
    if (rc == 0) {
      EXPECT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    }
    if (flags != 0 && rc == -HMR_EOPNOTSUPP && (app.info()->caps & FI_RMA_PMEM) == 0) {
      // Refused before the provider (tcp without FI_RMA_PMEM): OfiMrAttr.NothingFollowsTheAttr
      // checks the bytes hmr would have passed.
      EXPECT_TRUE(bytes_past_mr_attr.empty());
      continue;
    }
    ASSERT_EQ(bytes_past_mr_attr.size(), 64u) << "the provider's regattr was not called";
    for (size_t i = 0; i < bytes_past_mr_attr.size(); ++i) {
      EXPECT_EQ(bytes_past_mr_attr[i], 0) << "byte " << i << " past fi_mr_attr, flags " << flags;
    }
  }
  domain.reset();
  app.domain()->mr = original;
}

// hmem_data and page_size ask the provider for something particular (libfabric 1.19 and
// 1.22 members this runtime lacks): such a registration is never a shared cached one, whose
// registration is made without them.  With the cache on it was: the fields were dropped and
// the registration succeeded, where without the cache it is refused (a field this libfabric
// cannot carry is refused, never dropped).  The same answer either way.
TEST(OfiOwnDomain, PageSizeAndHmemDataAreNeverDroppedByTheCache) {
  for (const char* monitor : {"disabled", "userfaultfd"}) {
    hmr_domain_attr attr = ofi_attr(kTcpLoopback);
    attr.cache_monitor = monitor;
    hmr_domain* raw = nullptr;
    const int opened = hmr_domain_open(&attr, &raw);
    if (opened != 0 && std::string(hmr_last_error()).find("monitor") != std::string::npos) {
      continue;  // userfaultfd cannot start here: the uncached answer alone
    }
    ASSERT_HMR_OK(opened);
    DomainPtr domain(raw);
    Pages page(kPage);
    const iovec segment = {page.data(), kPage};
    int opaque = 0;
    for (int field = 0; field < 2; ++field) {
      hmr_mr_attr mr_attr{};
      mr_attr.size = sizeof mr_attr;
      mr_attr.mr_iov = &segment;
      mr_attr.iov_count = 1;
      mr_attr.access = HMR_REMOTE_READ;
      if (field == 0) {
        mr_attr.page_size = size_t{1} << 21;
      } else {
        mr_attr.hmem_data = &opaque;
      }
      hmr_mr* mr = nullptr;
      EXPECT_EQ(hmr_mr_regattr(domain.get(), &mr_attr, 0, &mr), -HMR_ENOSYS)
          << monitor << ": " << (field == 0 ? "page_size" : "hmem_data") << " was dropped";
      EXPECT_NE(std::string(hmr_last_error()).find(field == 0 ? "page_size" : "hmem_data"),
                std::string::npos)
          << hmr_last_error();
      if (mr != nullptr) {
        EXPECT_EQ(hmr_mr_close(mr), 0);
      }
    }
  }
}

// ------------------------------------------------------------------- the library ----

TEST(OfiLibrary, MissingLibraryIsAClearNoSys) {
  ScopedEnv env("HMR_OFI_LIBRARY", "/nonexistent/libfabric.so.1");
  expect_open_error(ofi_attr(kTcpLoopback), HMR_ENOSYS, "/nonexistent/libfabric.so.1");
  expect_open_error(ofi_attr(kTcpLoopback), HMR_ENOSYS, "HMR_OFI_LIBRARY");
}

TEST(OfiLibrary, ALibraryThatIsNotLibfabricIsAClearNoSys) {
  ScopedEnv env("HMR_OFI_LIBRARY", "libc.so.6");
  expect_open_error(ofi_attr(kTcpLoopback), HMR_ENOSYS, "fi_version");
}

// ------------------------------------------------------------- device memory ----

// The adapter itself, below hmr's pointer detection, so the NIC's answer is what is tested.
hmr::Result<hmr::nic::Registration> register_device_memory(hmr::nic::Nic& nic, void* buffer) {
  const iovec segment = {buffer, kPage};
  hmr::nic::RegistrationRequest request;
  request.segments = std::span<const iovec>(&segment, 1);
  request.access = HMR_REMOTE_READ;
  request.iface = HMR_HMEM_CUDA;
  request.device = 0;
  return nic.register_memory(request);
}

void expect_device_refused(const char* options, int code, const char* part) {
  auto nic = hmr::nic::open_nic("ofi", options);
  ASSERT_TRUE(nic.ok()) << nic.status().reason();
  Pages page(kPage);
  auto registered = register_device_memory(**nic, page.data());
  ASSERT_FALSE(registered.ok());
  EXPECT_EQ(registered.status().code(), code);
  EXPECT_NE(registered.status().reason().find(part), std::string::npos)
      << registered.status().reason();
  EXPECT_NE(registered.status().reason().find("libfabric 1."), std::string::npos)
      << registered.status().reason();
}

TEST(OfiDeviceMemory, TcpHasNoHmemInThisLibfabricBuild) {
  expect_device_refused(kTcpLoopback, HMR_ENOSYS, "not supported by this libfabric build");
}

TEST(OfiDeviceMemory, ShmWithHmemSaysTheBuildLacksCuda) {
  expect_device_refused("provider=shm;hmem=1", HMR_ENOSYS, "built without cuda support");
}

TEST(OfiDeviceMemory, ShmDomainOpenedWithoutHmemSaysHowToGetIt) {
  expect_device_refused("provider=shm", HMR_EOPNOTSUPP, "hmem=1");
}

TEST(OfiDeviceMemory, HostMemoryOnAnHmemDomainStillRegisters) {
  auto nic = hmr::nic::open_nic("ofi", "provider=shm;hmem=1");
  ASSERT_TRUE(nic.ok()) << nic.status().reason();
  EXPECT_TRUE((*nic)->capabilities().peer_direct) << "the domain has FI_HMEM";
  EXPECT_NE((*nic)->capabilities().required_mr_mode & HMR_MR_HMEM, 0u);
  Pages page(kPage);
  const iovec segment = {page.data(), kPage};
  hmr::nic::RegistrationRequest request;
  request.segments = std::span<const iovec>(&segment, 1);
  request.access = HMR_REMOTE_READ;
  request.requested_key = 5;
  auto registered = (*nic)->register_memory(request);
  ASSERT_TRUE(registered.ok()) << registered.status().reason();
  EXPECT_EQ(registered->key.low_u64(), 5u);
  EXPECT_TRUE((*nic)->deregister(*registered).ok());
}

// ------------------------------------------------------------- the attr's size ----

TEST(OfiDomainAttr, CallerBuiltBeforeNicHandleStillOpensDomains) {
  hmr_domain_attr attr = domain_attr(0);
  attr.size = offsetof(hmr_domain_attr, nic_handle);
  attr.nic_handle = reinterpret_cast<void*>(0x1);  // beyond the caller's size: never read
  hmr_domain* raw = nullptr;
  ASSERT_HMR_OK(hmr_domain_open(&attr, &raw));
  DomainPtr domain(raw);
  EXPECT_EQ(attr.size, offsetof(hmr_domain_attr, nic_handle));
  EXPECT_EQ(attr.nic_handle, reinterpret_cast<void*>(0x1)) << "written beyond the caller's size";
}

}  // namespace
