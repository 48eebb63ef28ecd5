#include "nic/option_list.h"

#include <gtest/gtest.h>

namespace hmr::nic {
namespace {

TEST(OptionList, NoTextIsNoOptions) {
  EXPECT_TRUE(split_option_list(nullptr).empty());
  EXPECT_TRUE(split_option_list("").empty());
  EXPECT_TRUE(split_option_list(";;").empty());
}

TEST(OptionList, SplitsAtSemicolonsAndTheFirstEquals) {
  const std::vector<OptionItem> items = split_option_list("a=1;;b=;c=x=y;bare");
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].name, "a");
  EXPECT_EQ(items[0].value, "1");
  EXPECT_TRUE(items[0].has_value);
  EXPECT_EQ(items[1].name, "b");
  EXPECT_EQ(items[1].value, "");
  EXPECT_TRUE(items[1].has_value);
  EXPECT_EQ(items[2].name, "c");
  EXPECT_EQ(items[2].value, "x=y");
  EXPECT_EQ(items[3].name, "bare");
  EXPECT_FALSE(items[3].has_value);
}

TEST(OptionList, ParseRejectsAnItemWithoutValueNamingTheAdapter) {
  Result<std::vector<OptionItem>> items = parse_option_list("a=1;bare", "sim");
  ASSERT_FALSE(items.ok());
  EXPECT_EQ(items.status().code(), HMR_EINVAL);
  EXPECT_NE(items.status().reason().find("sim option 'bare'"), std::string::npos)
      << items.status().reason();
  Result<std::vector<OptionItem>> good = parse_option_list("a=1;b=2", "sim");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->size(), 2u);
}

}  // namespace
}  // namespace hmr::nic
