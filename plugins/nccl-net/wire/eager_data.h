// The 8 bytes of remote CQ data an eager message carries (fi_senddata into the receiver's
// bounce buffers, net/eager.h): which buffer it is for, named by tag and ordinal, so the
// receiver matches it to a receive posted before or after it arrived:
//   bits 0-31 ordinal (the k-th message of this tag, wrapping) | 32-63 tag
// The receiver tells an eager message from an RMA write's completion (wire/write_completion.h)
// by the completion's flags (FI_RECV), not by these bits.  It comes from the peer: decode()
// only splits it; the recv comm checks the ordinal against what it posted and consumed.
#pragma once

#include <cstdint>

namespace hmr::nccl {

struct EagerAddress {
  int32_t tag = 0;
  uint32_t ordinal = 0;
};

inline uint64_t encode(const EagerAddress& a) {
  return uint64_t{static_cast<uint32_t>(a.tag)} << 32 | a.ordinal;
}

inline EagerAddress decode_eager_address(uint64_t data) {
  return EagerAddress{static_cast<int32_t>(static_cast<uint32_t>(data >> 32)),
                      static_cast<uint32_t>(data)};
}

// Whether ordinal `a` comes before `b` (both from one wrapping 32-bit count, less than 2^31
// apart).
inline bool ordinal_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

}  // namespace hmr::nccl
