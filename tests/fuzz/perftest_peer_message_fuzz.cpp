// libFuzzer target: hmr-perftest's decoders of the out-of-band control protocol, which reads a
// peer process that may be anything (tools/hmr-perftest/peer_message.h), and its check of the
// fabric address a peer sends (peer_address.h).  The first byte picks the decoder; the
// invariants are tests/tools/peer_message_exercise.cpp's.  The sources are compiled in with
// coverage (CMake), so the fuzzer sees past each length check.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/tools/peer_message_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string broken = hmr::perftest::test::exercise_peer_decoders(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "invariant broken: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
