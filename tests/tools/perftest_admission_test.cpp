// hmr-perftest's admission: what a client's Hello may ask of a server, decided before the
// server allocates anything for it.  A client asking for more than the server's --max-size
// (the server allocated and registered whatever a client asked for, up to 4 GiB) is refused
// with a reason the client prints; so are the requests the server's options cannot serve.
#include "admission.h"

#include <gtest/gtest.h>

#include <string>

namespace hmr::perftest {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kGiB = uint64_t{1} << 30;

Options server_options() {
  Options server;
  server.server = true;
  server.provider = "tcp";
  return server;
}

Hello hello_for(uint64_t max_size) {
  Hello hello;
  hello.test = TestKind::write_bw;
  hello.min_size = 2;
  hello.max_size = max_size;
  hello.iterations = 1000;
  hello.provider = "tcp";
  hello.memory = "host";
  return hello;
}

TEST(PerftestAdmission, AClientWithinTheServersMaxSizeIsServed) {
  const Options server = server_options();
  EXPECT_EQ(admission_refusal(hello_for(8 * kKiB), server), std::nullopt);
  EXPECT_EQ(admission_refusal(hello_for(kGiB), server), std::nullopt);  // at the 1G default
  Options large = server;
  large.size_limit = 4 * kGiB;
  EXPECT_EQ(admission_refusal(hello_for(4 * kGiB), large), std::nullopt);
}

TEST(PerftestAdmission, AClientOverTheServersMaxSizeIsRefusedWithTheReason) {
  const Options server = server_options();
  // The protocol lets a client ask for 4 GiB; the server allocated it (and failed to, or
  // took it from everything else on the host) before anything was checked.
  std::optional<std::string> refused = admission_refusal(hello_for(4 * kGiB), server);
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, "the client asks for messages up to 4G, over this server's --max-size "
                      "1G: use smaller messages, or start the server with a larger "
                      "--max-size (up to 4G)");
  EXPECT_TRUE(admission_refusal(hello_for(kGiB + 1), server));
  Options small = server;
  small.size_limit = 64 * kKiB;
  refused = admission_refusal(hello_for(64 * kKiB + 1), small);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("asks for messages up to 65537 bytes, over this server's --max-size 64K"),
            std::string::npos) << *refused;
  EXPECT_EQ(admission_refusal(hello_for(64 * kKiB), small), std::nullopt);
  // Whatever the test: the server's buffer is the largest message for each (write_lat's
  // client holds two, its own affair).
  for (TestKind test : {TestKind::read_bw, TestKind::write_lat}) {
    Hello hello = hello_for(2 * kGiB);
    hello.test = test;
    EXPECT_TRUE(admission_refusal(hello, server)) << test_name(test);
  }
}

TEST(PerftestAdmission, AnotherProviderIsRefusedFirst) {
  Hello hello = hello_for(4 * kGiB);  // over the limit as well: the provider is the news
  hello.provider = "shm";
  std::optional<std::string> refused = admission_refusal(hello, server_options());
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, "the client uses provider 'shm', this server 'tcp': start both with the "
                      "same --provider");
}

// A server with device memory cannot serve write_lat (the CPU polls the buffer), nor a host
// client's read_bw (its pattern): refused here too, before the device memory is allocated.
TEST(PerftestAdmission, TestsTheServersMemoryCannotServeAreRefused) {
  Options server = server_options();
  server.memory = "cuda:0";
  Hello hello = hello_for(4 * kKiB);
  EXPECT_EQ(admission_refusal(hello, server), std::nullopt);  // write_bw
  hello.test = TestKind::write_lat;
  std::optional<std::string> refused = admission_refusal(hello, server);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("write_lat polls memory with the CPU, and this server's is cuda:0: "
                          "start the server with --mem host"), std::string::npos) << *refused;
  hello.test = TestKind::read_bw;
  refused = admission_refusal(hello, server);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("or --mem host on the server"), std::string::npos) << *refused;
  hello.memory = "cuda:1";  // device memory on both sides: the client checks nothing
  EXPECT_EQ(admission_refusal(hello, server), std::nullopt);
}

}  // namespace
}  // namespace hmr::perftest
