#include "landing.h"

namespace hmr::perftest {

uint64_t await_landing(uint64_t expected, const std::function<uint64_t()>& checksum,
                       const std::function<bool(std::string*)>& progress, PeerWatch& watch,
                       std::string* why) {
  uint64_t held = checksum();
  while (held != expected) {
    // A checksum reads the whole buffer: once per watch check, not once per poll.
    for (uint64_t i = 0; i < PeerWatch::kCheckEvery; ++i) {
      if (!progress(why) || !watch.fine(why)) return held;
    }
    const uint64_t now = checksum();
    if (now != held) watch.progressed();
    held = now;
  }
  return held;
}

}  // namespace hmr::perftest
