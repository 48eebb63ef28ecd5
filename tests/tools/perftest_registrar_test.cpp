// hmr-perftest's registrations own what they registered (tools/hmr-perftest/registrar.*): the
// client's error paths returned before its release loop, and a failed bandwidth block before
// releasing its per-message registrations, leaving MRs open (and, with them, hmr domains that
// hmr_domain_close refused).  Now each goes when its owner does.
#include "registrar.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fabric.h"

namespace hmr::perftest {
namespace {

uint64_t open_mrs(const Registrar& registrar) { return registrar.stats().mr_open; }

TEST(PerftestRegistrar, ARegistrationIsGivenBackWhenItsOwnerGoes) {
  std::string why;
  std::optional<Fabric> fabric = Fabric::open("tcp", &why);
  if (!fabric) GTEST_SKIP() << "no tcp provider here: " << why;
  for (RegMode mode : {RegMode::once, RegMode::per_iter}) {
    std::optional<Registrar> registrar = Registrar::open(*fabric, mode, false, &why);
    ASSERT_TRUE(registrar) << why;
    std::vector<uint8_t> buffer(1 << 16);
    {
      std::optional<Registered> registered =
          registrar->reg(buffer.data(), buffer.size(), FI_WRITE | FI_REMOTE_WRITE, &why);
      ASSERT_TRUE(registered) << why;
      EXPECT_EQ(open_mrs(*registrar), 1u);
      // Moved (as into a vector): one owner still, one close.
      Registered moved = std::move(*registered);
      registered.reset();
      EXPECT_EQ(open_mrs(*registrar), 1u);
      std::vector<Registered> held;
      held.push_back(std::move(moved));
      EXPECT_EQ(open_mrs(*registrar), 1u);
    }
    EXPECT_EQ(open_mrs(*registrar), 0u) << reg_mode_name(mode);
    // reset() gives it back at once; assigning over one gives the old one back.
    std::optional<Registered> first = registrar->reg(buffer.data(), 4096, FI_WRITE, &why);
    std::optional<Registered> second = registrar->reg(buffer.data() + 8192, 4096, FI_WRITE, &why);
    ASSERT_TRUE(first && second) << why;
    EXPECT_EQ(open_mrs(*registrar), 2u);
    *first = std::move(*second);
    EXPECT_EQ(open_mrs(*registrar), 1u);
    first->reset();
    EXPECT_EQ(open_mrs(*registrar), 0u);
  }
}

}  // namespace
}  // namespace hmr::perftest
