// One input, every parser of bytes a peer controls (the 128-byte listen handle, control
// messages, the 4 bytes of remote CQ data of writes, the parts they add up, and of eager
// messages), with the invariants each must keep: never read
// out of bounds (the sanitizers watch), and whatever is accepted re-encodes to exactly the
// bytes it was decoded from, so no two different inputs mean the same thing and nothing of a
// message is silently ignored.  Shared by the libFuzzer target and the deterministic test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hmr::nccl::test {

// Empty when every invariant held, else what broke.
std::string exercise_wire_parsers(const uint8_t* data, size_t size);

}  // namespace hmr::nccl::test
