// Which NICs the plugin offers NCCL (HMR_NCCL_IFNAME, NCCL_SOCKET_IFNAME's syntax) and the
// GUID each one shows it.
#include "net/nic_selection.h"

#include <gtest/gtest.h>

namespace hmr::nccl {
namespace {

TEST(InterfaceFilter, DefaultExcludesLoopbackAndDockerOnly) {
  const InterfaceFilter f = InterfaceFilter::exclude_loopback_and_docker();
  EXPECT_FALSE(f.accepts("lo"));
  EXPECT_FALSE(f.accepts("docker0"));
  EXPECT_TRUE(f.accepts("eth0"));
  EXPECT_TRUE(f.accepts("ens5"));
  EXPECT_TRUE(f.accepts("mlx5_0"));
  EXPECT_TRUE(f.accepts("shm"));
}

TEST(InterfaceFilter, PrefixesExclusionAndExactNamesAsNcclSocketIfname) {
  std::string why;
  auto prefixes = InterfaceFilter::parse("eth,ib", &why);
  ASSERT_TRUE(prefixes) << why;
  EXPECT_TRUE(prefixes->accepts("eth0"));
  EXPECT_TRUE(prefixes->accepts("ib1"));
  EXPECT_FALSE(prefixes->accepts("ens5"));
  auto exclude = InterfaceFilter::parse("^eth1,lo", &why);
  ASSERT_TRUE(exclude) << why;
  EXPECT_TRUE(exclude->accepts("eth0"));
  EXPECT_FALSE(exclude->accepts("eth1"));
  EXPECT_FALSE(exclude->accepts("eth10"));  // a prefix
  EXPECT_FALSE(exclude->accepts("lo"));
  auto exact = InterfaceFilter::parse("=eth1", &why);
  ASSERT_TRUE(exact) << why;
  EXPECT_TRUE(exact->accepts("eth1"));
  EXPECT_FALSE(exact->accepts("eth10"));
  auto exact_exclude = InterfaceFilter::parse("^=eth1", &why);
  ASSERT_TRUE(exact_exclude) << why;
  EXPECT_FALSE(exact_exclude->accepts("eth1"));
  EXPECT_TRUE(exact_exclude->accepts("eth10"));
  auto loopback = InterfaceFilter::parse("lo", &why);
  ASSERT_TRUE(loopback) << why;
  EXPECT_TRUE(loopback->accepts("lo"));
  EXPECT_FALSE(loopback->accepts("eth0"));
}

TEST(InterfaceFilter, AFilterThatNamesNothingIsRefusedWithTheVariable) {
  for (const char* text : {"", "^", "=", "^=", ",", "^,,"}) {
    std::string why;
    EXPECT_FALSE(InterfaceFilter::parse(text, &why)) << "'" << text << "'";
    EXPECT_NE(why.find("HMR_NCCL_IFNAME"), std::string::npos) << why;
  }
}

TEST(NicGuid, DiffersPerHostAndPerNicAndIsStable) {
  const uint64_t a = derived_nic_guid("tcp;ofi_rxm", "eth0", "", "host-a");
  EXPECT_EQ(a, derived_nic_guid("tcp;ofi_rxm", "eth0", "", "host-a"));
  EXPECT_NE(a, derived_nic_guid("tcp;ofi_rxm", "eth0", "", "host-b"));
  EXPECT_NE(a, derived_nic_guid("tcp;ofi_rxm", "eth1", "", "host-a"));
  EXPECT_NE(a, derived_nic_guid("tcp;ofi_rxm", "eth0", "02:42:ac:11:00:02", "host-a"));
  EXPECT_NE(a >> 32, 0u);  // 64 bits, not a 32-bit hash widened
  EXPECT_FALSE(host_identity().empty());
}

}  // namespace
}  // namespace hmr::nccl
