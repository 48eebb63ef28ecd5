// hmr-perftest's libfabric endpoint against a peer's address (tools/hmr-perftest/fabric.*),
// and its socket's connect against a host that answers no SYN (peer_socket.*).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "fabric.h"
#include "peer_socket.h"

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

namespace hmr::perftest {
namespace {

// A server whose host drops the connection's SYNs (a firewall, a full accept queue): a
// blocking connect() waited for the kernel's SYN retries (about two minutes) whatever
// --timeout said.  Here the SYNs are dropped by a listening socket whose accept queue is full
// (backlog 0, two connections nobody accepts).
TEST(PerftestSocket, ConnectGivesUpAtItsTimeoutWhenNoSynIsAnswered) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {  // (non-blocking: the later ones stay in SYN_SENT)
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    fillers.push_back(fd);
  }
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  std::optional<PeerSocket> socket =
      PeerSocket::connect("127.0.0.1", ntohs(address.sin_port), 500, &why);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : fillers) ::close(fd);
  ::close(listener);
  if (socket) GTEST_SKIP() << "this kernel answered a SYN to a full accept queue";
  EXPECT_LT(seconds, 20.0) << "connect waited past its 500 ms timeout: " << why;
  EXPECT_NE(why.find("gave up after 500 ms"), std::string::npos) << why;
}

}  // namespace
}  // namespace hmr::perftest
