// hmr-perftest's libfabric endpoint against a peer's address (tools/hmr-perftest/fabric.*).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fabric.h"

namespace hmr::perftest {
namespace {

// fi_av_insert takes no length: the provider reads an address of its own format's size, so
// a peer's address of another length (3 bytes from a hostile or broken peer) was read past.
TEST(PerftestFabric, APeersAddressOfAnotherSizeIsRefused) {
  std::string why;
  std::optional<Fabric> fabric = Fabric::open("tcp", &why);
  if (!fabric) GTEST_SKIP() << "no tcp provider here: " << why;
  const std::vector<uint8_t> own = fabric->address();
  ASSERT_FALSE(own.empty());
  for (const std::vector<uint8_t>& bad :
       {std::vector<uint8_t>{10, 20, 30}, std::vector<uint8_t>(own.size() + 1, 0),
        std::vector<uint8_t>(own.size() - 1, 0)}) {
    why.clear();
    EXPECT_FALSE(fabric->insert_peer(bad, &why)) << bad.size() << " bytes";
    EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  }
  EXPECT_TRUE(fabric->insert_peer(own, &why)) << why;  // (its own: a well-formed address)
}

}  // namespace
}  // namespace hmr::perftest
