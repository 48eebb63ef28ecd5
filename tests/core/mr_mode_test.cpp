#include "core/mr_mode.h"
#include "nic/mr_mode_names.h"

#include <gtest/gtest.h>

namespace hmr::core {
namespace {
using nic::mode_names;
using nic::parse_mode_names;

TEST(MrMode, BasicExpandsToItsThreeBits) {
  Result<uint64_t> mode = expand_legacy_mode(HMR_MR_BASIC);
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY);
}

TEST(MrMode, ScalableMeansNoBits) {
  Result<uint64_t> mode = expand_legacy_mode(HMR_MR_SCALABLE | HMR_MR_LOCAL);
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, HMR_MR_LOCAL);
}

TEST(MrMode, BasicWithScalableAndUnknownBitsAreRejected) {
  EXPECT_EQ(expand_legacy_mode(HMR_MR_BASIC | HMR_MR_SCALABLE).status().code(), HMR_EINVAL);
  EXPECT_EQ(expand_legacy_mode(1ULL << 40).status().code(), HMR_EINVAL);
}

TEST(MrMode, RequiredIsNicBitsTheAppSupportsMinusEmulated) {
  Result<uint64_t> mode = negotiate_mr_mode(HMR_MR_ALLOCATED | HMR_MR_LOCAL | HMR_MR_RAW,
                                            HMR_MR_ALLOCATED | HMR_MR_LOCAL | HMR_MR_HMEM);
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, HMR_MR_ALLOCATED);  // RAW not required; LOCAL/HMEM emulated
}

TEST(MrMode, SharingBitsAreTakenWhenTheAppSupportsThem) {
  Result<uint64_t> mode = negotiate_mr_mode(HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY | HMR_MR_RAW, 0);
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY);
  Result<uint64_t> scalable = negotiate_mr_mode(HMR_MR_SCALABLE, 0);
  ASSERT_TRUE(scalable.ok());
  EXPECT_EQ(*scalable, 0u);
}

TEST(MrMode, MissingBitIsNamed) {
  Result<uint64_t> mode = negotiate_mr_mode(0, HMR_MR_ENDPOINT | HMR_MR_LOCAL);
  ASSERT_FALSE(mode.ok());
  EXPECT_EQ(mode.status().code(), HMR_ENODATA);
  EXPECT_NE(mode.status().reason().find("ENDPOINT"), std::string::npos);
  EXPECT_EQ(mode.status().reason().find("LOCAL|"), std::string::npos);
}

TEST(MrMode, NamesRoundTrip) {
  const uint64_t mode = HMR_MR_RAW | HMR_MR_MMU_NOTIFY | HMR_MR_COLLECTIVE;
  Result<uint64_t> parsed = parse_mode_names(mode_names(mode));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, mode);
  EXPECT_EQ(mode_names(0), "none");
  Result<uint64_t> lower = parse_mode_names("virt_addr,prov_key");
  ASSERT_TRUE(lower.ok());
  EXPECT_EQ(*lower, HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY);
  EXPECT_EQ(parse_mode_names("VIRT_ADDR|BOGUS").status().code(), HMR_EINVAL);
}

}  // namespace
}  // namespace hmr::core
