// hmr-perftest's peer decoders on valid messages mutated (bit flips, byte sets, insertions,
// deletions, lengths rewritten) and on random bytes, every invariant of
// peer_message_exercise.cpp checked each time: what the libFuzzer target checks, run in every
// build (the fuzzer is built by clang only).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "peer_message.h"
#include "peer_message_exercise.h"

namespace hmr::perftest {
namespace {

// Each seed: the decoder's selector byte, then one valid message's body (or a whole header).
std::vector<std::vector<uint8_t>> seeds() {
  Hello hello;
  hello.test = TestKind::write_lat;
  hello.min_size = 1;
  hello.max_size = 4096;
  hello.iterations = 10;
  hello.provider = "tcp";
  hello.memory = "host";
  BufferInfo raw;
  raw.key_is_raw = true;
  raw.key = std::vector<uint8_t>(16, 0xab);
  raw.fabric_address = std::vector<uint8_t>(32, 0x11);
  BufferInfo plain;
  plain.key = std::vector<uint8_t>(8, 0x22);
  const std::vector<std::vector<uint8_t>> messages = {
      encode(hello), encode(raw), encode(plain), encode(Done{42}), encode(Progress{7}),
      encode(PeerError{"the peer gave up"})};
  const uint8_t selectors[] = {1, 2, 2, 3, 4, 5};
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    std::vector<uint8_t> body{selectors[i]};
    body.insert(body.end(), messages[i].begin() + kPeerHeaderSize, messages[i].end());
    out.push_back(body);
    std::vector<uint8_t> header{0};
    header.insert(header.end(), messages[i].begin(), messages[i].begin() + kPeerHeaderSize);
    out.push_back(header);
  }
  // Fabric addresses (peer_address.h): shm's string (format byte even), tcp's sockaddr_in (odd).
  const char shm[] = "fi_shm://4242:0:0";
  std::vector<uint8_t> string_address{6, 0};
  string_address.insert(string_address.end(), shm, shm + sizeof shm);
  out.push_back(string_address);
  std::vector<uint8_t> sockaddr{6, 1};
  sockaddr.resize(2 + 16, 0x7f);
  out.push_back(sockaddr);
  return out;
}

TEST(PeerMessageMutations, EveryInvariantHolds) {
  for (const std::vector<uint8_t>& seed : seeds()) {
    ASSERT_EQ(test::exercise_peer_decoders(seed.data(), seed.size()), "") << "a valid seed";
  }
  std::mt19937_64 random(20261202);
  const std::vector<std::vector<uint8_t>> all = seeds();
  for (int round = 0; round < 200000; ++round) {
    std::vector<uint8_t> input = all[random() % all.size()];
    const int mutations = 1 + static_cast<int>(random() % 4);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = 1 + (input.size() > 1 ? random() % (input.size() - 1) : 0);
      switch (random() % 6) {
        case 0: if (at < input.size()) input[at] ^= static_cast<uint8_t>(1u << (random() % 8)); break;
        case 1: if (at < input.size()) input[at] = static_cast<uint8_t>(random()); break;
        case 2: input.insert(input.begin() + static_cast<long>(std::min(at, input.size())),
                             static_cast<uint8_t>(random())); break;
        case 3: if (at < input.size()) input.erase(input.begin() + static_cast<long>(at)); break;
        case 4:  // a length field rewritten: a u32 of 0, small, or huge
          if (at + 4 <= input.size()) {
            const uint32_t values[] = {0, 1, 4096, 0xffffffffu};
            const uint32_t v = values[random() % 4];
            for (int b = 0; b < 4; ++b) input[at + static_cast<size_t>(b)] = static_cast<uint8_t>(v >> (8 * b));
          }
          break;
        default: input.resize(1 + random() % 128);
                 for (size_t i = 1; i < input.size(); ++i) input[i] = static_cast<uint8_t>(random());
      }
    }
    const std::string broken = test::exercise_peer_decoders(input.data(), input.size());
    ASSERT_EQ(broken, "") << "round " << round << ", " << input.size() << " bytes";
  }
}

}  // namespace
}  // namespace hmr::perftest
