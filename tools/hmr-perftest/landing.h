// The end of write_bw on the target: the client says what it wrote (a checksum), and the
// target waits for those bytes to be in its buffer before it compares.
//
// Waiting is needed where a provider completes a write at the initiator before its bytes
// land: libfabric 1.17's net provider does, though it advertises FI_DELIVERY_COMPLETE (a
// review saw write_bw's check fail now and then, with the server reading its buffer as soon
// as the client's Done arrived).  With a manual-progress provider the bytes land only while
// the target reads its CQ, so it keeps doing that in between.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "peer_watch.h"

namespace hmr::perftest {

// Reads `checksum()` until it is `expected`, calling `progress` (which reads the CQ, false
// with a reason on an error) in between.  A changed checksum is progress for `watch`, which
// otherwise ends the wait at its timeout or when the peer hangs up.  Returns the last checksum
// read; `why` says why it differs, when it does.
uint64_t await_landing(uint64_t expected, const std::function<uint64_t()>& checksum,
                       const std::function<bool(std::string*)>& progress, PeerWatch& watch,
                       std::string* why);

}  // namespace hmr::perftest
