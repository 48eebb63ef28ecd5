// The verbs adapter's pure parts: option parsing, access mapping, chunk planning and the RAW key
// layout that carries chunk keys.
#include <gtest/gtest.h>

#include "nic/verbs/chunk_plan.h"
#include "nic/verbs/verbs_abi.h"
#include "nic/verbs/verbs_access.h"
#include "nic/verbs/verbs_options.h"

namespace hmr::verbs {
namespace {

TEST(VerbsOptions, DefaultsAndEveryOption) {
  Result<VerbsOptions> defaults = parse_verbs_options(nullptr);
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->device.empty());
  EXPECT_FALSE(defaults->odp);
  EXPECT_EQ(defaults->relaxed_ordering, Tristate::automatic);
  EXPECT_FALSE(defaults->raw_keys);

  Result<VerbsOptions> all =
      parse_verbs_options("device=mlx5_1;odp=on;relaxed_ordering=off;raw_keys=1;");
  ASSERT_TRUE(all.ok()) << all.status().reason();
  EXPECT_EQ(all->device, "mlx5_1");
  EXPECT_TRUE(all->odp);
  EXPECT_EQ(all->relaxed_ordering, Tristate::off);
  EXPECT_TRUE(all->raw_keys);
  EXPECT_EQ(parse_verbs_options("relaxed_ordering=on")->relaxed_ordering, Tristate::on);
}

TEST(VerbsOptions, BadOptionsAreNamed) {
  for (const char* bad : {"odp", "odp=maybe", "relaxed_ordering=sometimes", "device=",
                          "color=blue", "raw_keys=2"}) {
    Result<VerbsOptions> parsed = parse_verbs_options(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), HMR_EINVAL) << bad;
    EXPECT_FALSE(parsed.status().reason().empty());
  }
  EXPECT_NE(parse_verbs_options("color=blue").status().reason().find("color"), std::string::npos);
}

TEST(VerbsAccess, LocalWriteWheneverTheNicWrites) {
  const AccessExtras none;
  EXPECT_EQ(ibv_access_for(HMR_SEND | HMR_WRITE, none), 0u);
  EXPECT_EQ(ibv_access_for(HMR_RECV, none), unsigned{IBV_ACCESS_LOCAL_WRITE});
  EXPECT_EQ(ibv_access_for(HMR_READ, none), unsigned{IBV_ACCESS_LOCAL_WRITE});
  EXPECT_EQ(ibv_access_for(HMR_REMOTE_READ, none), unsigned{IBV_ACCESS_REMOTE_READ});
  // The kernel refuses REMOTE_WRITE without LOCAL_WRITE.
  EXPECT_EQ(ibv_access_for(HMR_REMOTE_WRITE, none),
            unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE});
}

TEST(VerbsAccess, ExtrasAddTheirFlags) {
  AccessExtras extras;
  extras.atomics = true;
  const uint64_t both = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
  EXPECT_TRUE(ibv_access_for(both, extras) & IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_FALSE(ibv_access_for(HMR_REMOTE_READ, extras) & IBV_ACCESS_REMOTE_ATOMIC);
  extras.atomics = false;
  EXPECT_FALSE(ibv_access_for(both, extras) & IBV_ACCESS_REMOTE_ATOMIC);
  extras.on_demand_paging = extras.relaxed_ordering = true;
  const unsigned int access = ibv_access_for(HMR_SEND, extras);
  EXPECT_FALSE(access & IBV_ACCESS_MW_BIND);  // only when the MR asks for window binding
  EXPECT_TRUE(ibv_access_for(HMR_SEND | HMR_MW_BIND, extras) & IBV_ACCESS_MW_BIND);
  EXPECT_TRUE(access & IBV_ACCESS_ON_DEMAND);
  EXPECT_TRUE(access & IBV_ACCESS_RELAXED_ORDERING);
  EXPECT_EQ(ibv_window_access_for(both | HMR_SEND),
            unsigned{IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE});
}

TEST(ChunkPlan, ChunkLengthIsAPowerOfTwoNotAboveTheLimit) {
  EXPECT_EQ(chunk_length_for(1ull << 32), 1ull << 32);
  EXPECT_EQ(chunk_length_for((1ull << 32) - 1), 1ull << 31);
  EXPECT_EQ(chunk_length_for(UINT64_MAX), 1ull << 63);
  EXPECT_EQ(chunk_length_for(0), 1ull << 63);  // a device that reports no limit
}

TEST(ChunkPlan, ChunksCoverTheRangeExactly) {
  const std::vector<Chunk> one = plan_chunks(4096, 65536);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].length, 4096u);
  const std::vector<Chunk> chunks = plan_chunks(3 * 65536 + 100, 65536);
  ASSERT_EQ(chunks.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(chunks[i].offset, i * 65536);
    EXPECT_EQ(chunks[i].length, 65536u);
  }
  EXPECT_EQ(chunks[3].offset, 3u * 65536);
  EXPECT_EQ(chunks[3].length, 100u);
  EXPECT_EQ(plan_chunks(2 * 65536, 65536).size(), 2u);
  EXPECT_EQ(max_chunked_length(1ull << 63, 3), UINT64_MAX);
  EXPECT_EQ(max_chunked_length(1ull << 20, 3), 3ull << 20);
}

TEST(ChunkPlan, RawKeyCarriesChunkKeysAndLength) {
  const uint32_t rkeys[] = {0x11223344, 0xaabbccdd, 0x01020304};
  const KeyBytes key = encode_raw_key(rkeys, 1ull << 20);
  ASSERT_EQ(key.size, kRawKeySize);
  EXPECT_EQ(key.bytes[0], 0x44);  // chunk 0's rkey first, little-endian
  EXPECT_EQ(key.low_u64() & 0xffffffffu, 0x11223344u);
  EXPECT_EQ(key.bytes[12], 3);
  EXPECT_EQ(key.bytes[13], 20);
  Result<DecodedRawKey> decoded = decode_raw_key(key);
  ASSERT_TRUE(decoded.ok()) << decoded.status().reason();
  EXPECT_EQ(decoded->chunk_len, 1ull << 20);
  EXPECT_EQ(decoded->rkeys, std::vector<uint32_t>(std::begin(rkeys), std::end(rkeys)));
}

TEST(ChunkPlan, DecodeRefusesWhatIsNotAVerbsRawKey) {
  EXPECT_FALSE(decode_raw_key(KeyBytes::from_u64(7, 8)).ok());
  const uint32_t rkey = 5;
  KeyBytes key = encode_raw_key({&rkey, 1}, 4096);
  key.bytes[12] = 4;  // more chunks than fit
  EXPECT_EQ(decode_raw_key(key).status().code(), HMR_EINVAL);
  key.bytes[12] = 0;
  EXPECT_FALSE(decode_raw_key(key).ok());
}

}  // namespace
}  // namespace hmr::verbs
