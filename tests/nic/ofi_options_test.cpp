#include "nic/ofi/ofi_options.h"

#include <gtest/gtest.h>

#include <string>

namespace hmr::nic::ofi {
namespace {

void expect_invalid(const char* text, const char* reason_part) {
  Result<OfiOptions> options = parse_ofi_options(text);
  ASSERT_FALSE(options.ok()) << text;
  EXPECT_EQ(options.status().code(), HMR_EINVAL) << text;
  EXPECT_NE(options.status().reason().find(reason_part), std::string::npos)
      << text << ": " << options.status().reason();
}

TEST(OfiOptions, DefaultsAreAnyRdmProviderWithHmrsModeHints) {
  for (const char* text : {static_cast<const char*>(nullptr), "", ";;"}) {
    Result<OfiOptions> options = parse_ofi_options(text);
    ASSERT_TRUE(options.ok()) << options.status().reason();
    EXPECT_EQ(options->provider, "");
    EXPECT_EQ(options->endpoint_type, EndpointType::rdm);
    EXPECT_FALSE(options->mr_mode.has_value());
    EXPECT_FALSE(options->hmem);
  }
}

TEST(OfiOptions, EveryOption) {
  Result<OfiOptions> options =
      parse_ofi_options("provider=shm;ep_type=msg;domain=lo;fabric=127.0.0.1/32;"
                        "mr_mode=VIRT_ADDR|PROV_KEY;hmem=yes");
  ASSERT_TRUE(options.ok()) << options.status().reason();
  EXPECT_EQ(options->provider, "shm");
  EXPECT_EQ(options->endpoint_type, EndpointType::msg);
  EXPECT_EQ(options->domain, "lo");
  EXPECT_EQ(options->fabric, "127.0.0.1/32");
  EXPECT_EQ(options->mr_mode, HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY);
  EXPECT_TRUE(options->hmem);
}

TEST(OfiOptions, LayeredProviderNamesKeepTheirSemicolons) {
  Result<OfiOptions> options = parse_ofi_options("provider=tcp;ofi_rxm;mr_mode=0x0");
  ASSERT_TRUE(options.ok()) << options.status().reason();
  EXPECT_EQ(options->provider, "tcp;ofi_rxm");
  EXPECT_EQ(options->mr_mode, 0u);
  options = parse_ofi_options("mr_mode=0;provider=udp;ofi_rxd");
  ASSERT_TRUE(options.ok()) << options.status().reason();
  EXPECT_EQ(options->provider, "udp;ofi_rxd");
}

TEST(OfiOptions, ModeAsTheNumberAnApplicationPrints) {
  Result<OfiOptions> options = parse_ofi_options("mr_mode=0x410");
  ASSERT_TRUE(options.ok()) << options.status().reason();
  EXPECT_EQ(options->mr_mode, HMR_MR_HMEM | HMR_MR_VIRT_ADDR);
  options = parse_ofi_options("mr_mode=16");
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->mr_mode, HMR_MR_VIRT_ADDR);
}

TEST(OfiOptions, BadOptionsSayWhatIsWrong) {
  expect_invalid("tcp", "not name=value");
  expect_invalid("ep_type=rdm;ofi_rxm", "not name=value");  // no provider= before it
  expect_invalid("provider=", "provider= is empty");
  expect_invalid("ep_type=stream", "not rdm, msg or dgram");
  expect_invalid("mr_mode=", "mr_mode= is empty");
  expect_invalid("mr_mode=0x10junk", "neither a number");
  expect_invalid("mr_mode=0x100000", "bits hmr does not know");
  expect_invalid("mr_mode=FAST", "unknown mr_mode name");
  expect_invalid("mr_mode=BASIC", "not BASIC or SCALABLE");
  expect_invalid("hmem=maybe", "not 1/0/yes/no");
  expect_invalid("colour=blue", "unknown ofi option 'colour'");
}

}  // namespace
}  // namespace hmr::nic::ofi
