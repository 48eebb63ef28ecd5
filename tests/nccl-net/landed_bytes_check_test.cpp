// HMR_NCCL_CHECK_LANDED's record of completed receives (plugins/nccl-net/net/landed_bytes_check.h):
// what it reports, what it forgets, and that it keeps at most kKept copies (the oldest goes).
#include "net/landed_bytes_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace hmr::nccl {
namespace {

TEST(LandedBytesCheck, ReportsBytesChangedSinceTheReceiveAndThenForgetsIt) {
  LandedBytesCheck check;
  std::vector<uint8_t> buffer(1000, 7);
  check.received(buffer.data(), 600);
  EXPECT_EQ(check.posting_again(buffer.data(), 1000), std::nullopt);  // unchanged
  check.received(buffer.data(), 600);
  buffer[10] = 8;
  buffer[599] = 9;
  buffer[700] = 1;  // past what was received: not compared
  const std::optional<std::string> said = check.posting_again(buffer.data(), 1000);
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("was reported done, and then 2 of its 600 received bytes changed "
                       "(offsets 10 to 599)"), std::string::npos) << *said;
  EXPECT_EQ(check.posting_again(buffer.data(), 1000), std::nullopt);  // dropped once asked
  // Posted again shorter than received: the whole receive is compared all the same (nothing
  // may have written any of it).
  check.received(buffer.data(), 600);
  buffer[500] ^= 0xff;
  EXPECT_NE(check.posting_again(buffer.data(), 100), std::nullopt);
}

TEST(LandedBytesCheck, AReceivePostedOverAnotherComparesAndDropsIt) {
  LandedBytesCheck check;
  std::vector<uint8_t> buffer(1000, 7);
  check.received(buffer.data() + 100, 50);  // a receive inside what is posted next
  check.received(buffer.data() + 600, 50);  // one beside it
  buffer[120] = 0;
  buffer[620] = 0;
  const std::optional<std::string> said = check.posting_again(buffer.data(), 200);
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("1 of its 50 received bytes changed (offsets 20 to 20)"), std::string::npos);
  // Dropped: the new receive may write it (no report when it does).
  EXPECT_EQ(check.posting_again(buffer.data() + 100, 50), std::nullopt);
  // The one beside it is still kept.
  EXPECT_NE(check.posting_again(buffer.data() + 600, 50), std::nullopt);
}

TEST(LandedBytesCheck, AnotherReceiveAtTheSameAddressReplacesTheCopy) {
  LandedBytesCheck check;
  std::vector<uint8_t> buffer(64, 1);
  check.received(buffer.data(), 64);
  buffer[3] = 2;
  check.received(buffer.data(), 64);  // (a receive completed again without a post between)
  EXPECT_EQ(check.posting_again(buffer.data(), 64), std::nullopt);
}

TEST(LandedBytesCheck, KeepsTheNewestCopiesOnly) {
  LandedBytesCheck check;
  std::vector<std::vector<uint8_t>> buffers(LandedBytesCheck::kKept + 1, std::vector<uint8_t>(16, 5));
  for (auto& b : buffers) check.received(b.data(), b.size());
  for (auto& b : buffers) b[0] = 6;
  EXPECT_EQ(check.posting_again(buffers[0].data(), 16), std::nullopt);  // the oldest went
  for (size_t i = 1; i < buffers.size(); ++i) {
    EXPECT_NE(check.posting_again(buffers[i].data(), 16), std::nullopt) << i;
  }
  // A dropped copy's place serves the next receive.
  check.received(buffers[0].data(), 16);
  buffers[0][1] = 0;
  EXPECT_NE(check.posting_again(buffers[0].data(), 16), std::nullopt);
}

}  // namespace
}  // namespace hmr::nccl
