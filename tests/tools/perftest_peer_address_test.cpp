// What a peer may send as its fabric address (tools/hmr-perftest/peer_address.*): fi_av_insert
// takes no length, so anything that would make the provider read past the bytes received is
// refused first.  Before, every address had to be exactly our own size: shm's string
// addresses ("fi_shm://<pid>:0:0", NUL included) of a peer whose pid has another number of
// digits were refused, and a string without its NUL of our size was read past.
#include "peer_address.h"

#include <gtest/gtest.h>

#include <rdma/fabric.h>

#include <optional>
#include <string>
#include <vector>

#include "fabric.h"

namespace hmr::perftest {
namespace {

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// A C string's bytes with its NUL, as fi_getname gives a string address.
std::vector<uint8_t> c_string(const std::string& text) {
  std::vector<uint8_t> bytes = bytes_of(text);
  bytes.push_back(0);
  return bytes;
}

TEST(PerftestPeerAddress, StringAddressesOfAnyLengthWithinTheBoundAreTaken) {
  const std::vector<uint8_t> own = c_string("fi_shm://123456:0:0");
  std::string why;
  for (const char* peer : {"fi_shm://7:0:0", "fi_shm://1234567:0:0", "fi_shm://123456:0:0"}) {
    EXPECT_TRUE(acceptable_peer_address(FI_ADDR_STR, own, c_string(peer), &why)) << peer << ": " << why;
  }
  EXPECT_TRUE(acceptable_peer_address(FI_ADDR_STR, own,
                                      c_string(std::string(kMaxStringAddress - 1, 'a')), &why))
      << why;
}

TEST(PerftestPeerAddress, HostileStringAddressesAreRefused) {
  const std::vector<uint8_t> own = c_string("fi_shm://123456:0:0");
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> hostile = {
      {bytes_of("fi_shm://123456:0:0x"), "NUL"},  // our size, no NUL: fi_av_insert read on
      {bytes_of("fi_shm://1:0:0"), "NUL"},
      {{}, "NUL"},
      {{0}, "empty"},
      {c_string(std::string(kMaxStringAddress, 'a')), "over the 256"},
      {bytes_of(std::string("fi_shm://1\0:0:0", 15) + '\0'), "printable"},  // a NUL inside
      {c_string("fi_shm://1:0:0\x1b[2J"), "printable"},
      {c_string("fi_shm://1:0:0\xff"), "printable"},
      {c_string("fi shm://1:0:0"), "printable"},
      {bytes_of(std::string("fi_shm://1:0:0\0\0", 16)), "printable"},  // bytes after its NUL
  };
  for (const auto& [address, reason] : hostile) {
    std::string why;
    EXPECT_FALSE(acceptable_peer_address(FI_ADDR_STR, own, address, &why))
        << std::string(address.begin(), address.end());
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_EQ(why.rfind("the peer's fabric address ", 0), 0u) << why;
  }
}

// A fixed-size format is read at its size: nothing else is taken.
TEST(PerftestPeerAddress, FixedSizeAddressesMustBeOurSize) {
  const std::vector<uint8_t> own(16, 1);
  std::string why;
  EXPECT_TRUE(acceptable_peer_address(FI_SOCKADDR_IN, own, std::vector<uint8_t>(16, 2), &why));
  for (size_t size : {0, 3, 15, 17, 28}) {
    EXPECT_FALSE(acceptable_peer_address(FI_SOCKADDR_IN, own, std::vector<uint8_t>(size, 2), &why))
        << size;
    EXPECT_NE(why.find("this provider's are 16"), std::string::npos) << why;
  }
}

// shm end to end: a peer whose pid has another number of digits than ours is inserted (before:
// "the peer's fabric address is 18 bytes; this provider's are 19"), and one without its NUL
// is refused before fi_av_insert reads it.
TEST(PerftestPeerAddress, ShmTakesAPeerWhosePidHasAnotherLength) {
  std::string why;
  std::optional<Fabric> fabric = Fabric::open("shm", &why);
  if (!fabric) GTEST_SKIP() << "no shm provider here: " << why;
  const std::vector<uint8_t> own = fabric->address();
  ASSERT_FALSE(own.empty());
  if (own.back() != 0) GTEST_SKIP() << "shm's addresses here are not C strings";
  const std::string text(own.begin(), own.end() - 1);
  ASSERT_EQ(text.rfind("fi_shm://", 0), 0u) << text;
  // Our own name with its pid one digit longer, and with one digit: another process's.
  const size_t colon = text.find(':', 9);
  ASSERT_NE(colon, std::string::npos) << text;
  const std::string longer = text.substr(0, 9) + "9" + text.substr(9);
  EXPECT_TRUE(fabric->insert_peer(c_string(longer), &why)) << longer << ": " << why;
  const std::string shorter = "fi_shm://1" + text.substr(colon);
  EXPECT_TRUE(fabric->insert_peer(c_string(shorter), &why)) << shorter << ": " << why;
  EXPECT_FALSE(fabric->insert_peer(bytes_of(text + "x"), &why));
  EXPECT_NE(why.find("NUL"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::perftest
