// The mistakes a newcomer makes (issue 32), each answered with a reason that names the fix.
#include <stdlib.h>
#include <sys/mman.h>

#include <cstring>
#include <string>

#include "test_support.h"

using namespace hmr_test;

namespace {

constexpr size_t kPage = 4096;

bool says(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

TEST(NewcomerMessages, AMonitorNamedInTheEnvironmentIsNamedWithItsVariable) {
  setenv("FI_MR_CACHE_MONITOR", "kdreg2", 1);
  hmr_domain_attr attr = domain_attr(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  const std::string reason = hmr_last_error();
  unsetenv("FI_MR_CACHE_MONITOR");
  ASSERT_NE(rc, 0);
  EXPECT_TRUE(says(reason, "FI_MR_CACHE_MONITOR='kdreg2'")) << reason;
}

TEST(NewcomerMessages, AnUnknownSimOptionIsUnknownWhateverItsValue) {
  hmr_domain_attr attr = domain_attr(0, "provider=tcp");
  hmr_domain* domain = nullptr;
  EXPECT_EQ(hmr_domain_open(&attr, &domain), -HMR_EINVAL);
  EXPECT_TRUE(says(hmr_last_error(), "unknown sim option 'provider'")) << hmr_last_error();
}

TEST(NewcomerMessages, ASecondRequestedKeyZeroPointsAtProviderKeys) {
  DomainPtr domain = open_domain(0);  // mr_mode 0: requested keys
  ASSERT_TRUE(domain);
  Pages pages(2 * kPage);
  MrPtr first = reg(domain.get(), pages.data(), kPage, HMR_REMOTE_READ);  // key 0
  ASSERT_TRUE(first);
  hmr_mr* second = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), pages.data() + kPage, kPage, HMR_REMOTE_READ, 0, 0, 0,
                       &second, nullptr),
            -HMR_ENOKEY);
  EXPECT_TRUE(says(hmr_last_error(), "HMR_MR_PROV_KEY")) << hmr_last_error();
}

TEST(NewcomerMessages, ASecondCloseSaysTheMrWasClosedAlready) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR);
  Pages pages(kPage);
  hmr_mr* mr = nullptr;
  ASSERT_EQ(hmr_mr_reg(domain.get(), pages.data(), kPage, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr),
            0);
  ASSERT_EQ(hmr_mr_close(mr), 0);
  EXPECT_EQ(hmr_mr_close(mr), -HMR_EINVAL);
  EXPECT_TRUE(says(hmr_last_error(), "closed already")) << hmr_last_error();
}

TEST(NewcomerMessages, UnmappedMemoryIsNotCalledOutOfMemory) {
  DomainPtr domain = open_domain(HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED,
                                 "require=ALLOCATED");
  ASSERT_TRUE(domain);
  void* hole = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  munmap(hole, kPage);
  hmr_mr* mr = nullptr;
  EXPECT_EQ(hmr_mr_reg(domain.get(), hole, kPage, HMR_REMOTE_READ, 0, 0, 0, &mr, nullptr),
            -HMR_EFAULT);
  const std::string reason = hmr_last_error();
  EXPECT_TRUE(says(reason, "not (all) mapped")) << reason;
  EXPECT_FALSE(says(reason, "Cannot allocate memory")) << reason;
}

}  // namespace
