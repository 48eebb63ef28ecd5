// hmr-perftest's decoders of what its peer sends (tools/hmr-perftest/peer_message.h) and its
// check of the peer's fabric address (peer_address.h), run on one input with their invariants
// checked: shared by the libFuzzer target (tests/fuzz/perftest_peer_message_fuzz.cpp, clang)
// and the mutation test that runs the same checks in every build
// (peer_message_mutation_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hmr::perftest::test {

// The first byte picks the decoder (header, hello, buffer, done, progress, error, fabric
// address); the rest is its input.  Returns "" when every invariant held, else which one broke.
std::string exercise_peer_decoders(const uint8_t* data, size_t size);

}  // namespace hmr::perftest::test
