#include "admission.h"

namespace hmr::perftest {

std::optional<std::string> admission_refusal(const Hello& hello, const Options& server) {
  if (hello.provider != server.provider) {
    return "the client uses provider '" + hello.provider + "', this server '" + server.provider +
           "': start both with the same --provider";
  }
  // The server's buffer is the client's largest message: over the limit, nothing is allocated.
  if (hello.max_size > server.size_limit) {
    return "the client asks for messages up to " + size_text(hello.max_size) +
           ", over this server's --max-size " + size_text(server.size_limit) +
           ": use smaller messages, or start the server with a larger --max-size (up to 4G)";
  }
  // The server never learns the test from its own options (the client names it): what its
  // memory cannot do is refused here.  write_lat polls the buffer with the CPU; a read_bw
  // into a host buffer checks the bytes against a pattern this side cannot put into device
  // memory (the client's own --mem check covers only its side).  (Buffer::allocate gives
  // host memory exactly for --mem host.)
  const bool host = server.memory == "host";
  if (!host && hello.test == TestKind::write_lat) {
    return "write_lat polls memory with the CPU, and this server's is " + server.memory +
           ": start the server with --mem host";
  }
  if (!host && hello.test == TestKind::read_bw && hello.memory == "host") {
    return "read_bw into host memory checks the bytes read against the server's pattern, "
           "which it cannot write into " + server.memory +
           ": use device memory on both sides, or --mem host on the server";
  }
  return std::nullopt;
}

}  // namespace hmr::perftest
