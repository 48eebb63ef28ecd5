#include "nic/sim/sim_options.h"

#include <gtest/gtest.h>

namespace hmr::nic::sim {
namespace {

TEST(SimOptions, DefaultsWithoutText) {
  Result<SimOptions> options = parse_sim_options(nullptr);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->required_mr_mode, 0u);
  EXPECT_EQ(options->key_size, 8u);
}

TEST(SimOptions, RawImpliesProviderKeysOfSixteenBytes) {
  Result<SimOptions> options = parse_sim_options("require=RAW");
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->required_mr_mode, HMR_MR_RAW | HMR_MR_PROV_KEY);
  EXPECT_EQ(options->key_size, 16u);
  EXPECT_EQ(parse_sim_options("require=RAW;key_size=8").status().code(), HMR_EINVAL);
}

TEST(SimOptions, ParsesEveryNumber) {
  Result<SimOptions> options =
      parse_sim_options("key_size=4;iov_limit=2;mr_cnt=10;max_mr_size=0x1000;");
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->key_size, 4u);
  EXPECT_EQ(options->iov_limit, 2u);
  EXPECT_EQ(options->mr_cnt, 10u);
  EXPECT_EQ(options->max_mr_size, 0x1000u);
}

TEST(SimOptions, RejectsMalformedText) {
  for (const char* text : {"key_size", "key_size=", "key_size=-1", "key_size=0", "key_size=9",
                           "iov_limit=2x", "colour=blue", "require=BASIC", "require=NOPE"}) {
    Result<SimOptions> options = parse_sim_options(text);
    EXPECT_FALSE(options.ok()) << text;
    EXPECT_EQ(options.status().code(), HMR_EINVAL) << text;
    EXPECT_FALSE(options.status().reason().empty()) << text;
  }
}

}  // namespace
}  // namespace hmr::nic::sim
