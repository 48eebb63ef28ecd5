// The 4 bytes of remote CQ data an eager message carries (fi_senddata into the receiver's
// bounce buffers, net/eager.h): which buffer it is for, named by tag and ordinal, so the
// receiver matches it to a receive posted before or after it arrived:
//
//   bits 0-11 ordinal (the low 12 bits of the k-th message of this tag) | 12-31 tag
//
// Four bytes because EFA and verbs carry no more (wire/write_completion.h).  So only tags from
// 0 to 2^20 - 1 move eagerly: NCCL's tags are ranks (the sender's rank in the communicator);
// a message of any other tag waits for its receive's announcement, as every message larger
// than the eager max does.  The ordinal's high bits are the receiver's to restore: the buffer
// a message is for was posted at most kEagerOrdinalsBehind ordinals before the tag's next
// posting, or is at most kEagerOrdinalsAhead after it (the sender holds that many eager
// messages of a tag unconsumed at most), and 12 bits tell apart every ordinal of that window.
//
// The receiver tells an eager message from an RMA write's completion by the completion's
// flags (FI_RECV), not by these bits.  It comes from the peer: decode() only splits it; the
// recv comm checks the ordinal against what it posted and consumed.
#pragma once

#include <cstdint>

#include "limits.h"

namespace hmr::nccl {

inline constexpr unsigned kEagerOrdinalBits = 12;
inline constexpr int32_t kMaxEagerTag = (int32_t{1} << (32 - kEagerOrdinalBits)) - 1;
// The window of ordinals an eager message of a tag may name, around that tag's next posting.
inline constexpr uint32_t kEagerOrdinalsBehind = kMaxRequests * kMaxRecvs;  // posted at once
inline constexpr uint32_t kEagerOrdinalsAhead = kMaxEagerCredits;
static_assert(kEagerOrdinalsBehind + kEagerOrdinalsAhead <= (1u << kEagerOrdinalBits),
              "12 bits must tell apart every ordinal of the window");

struct EagerAddress {
  int32_t tag = 0;
  uint32_t ordinal = 0;
};

// Whether messages of `tag` can move eagerly (it fits the CQ data).
inline bool eager_tag(int32_t tag) { return tag >= 0 && tag <= kMaxEagerTag; }

// (a.tag must satisfy eager_tag.)
inline uint32_t encode(const EagerAddress& a) {
  return static_cast<uint32_t>(a.tag) << kEagerOrdinalBits |
         (a.ordinal & ((1u << kEagerOrdinalBits) - 1));
}

// The tag, and the ordinal's low bits (restore_ordinal gives the rest).
inline EagerAddress decode_eager_address(uint32_t data) {
  return EagerAddress{static_cast<int32_t>(data >> kEagerOrdinalBits),
                      data & ((1u << kEagerOrdinalBits) - 1)};
}

// The ordinal whose low bits are `low` in the window that starts kEagerOrdinalsBehind before
// `next_posted` (the ordinal the tag's next posted buffer will get); wrapping like the count.
inline uint32_t restore_ordinal(uint32_t low, uint32_t next_posted) {
  const uint32_t start = next_posted - kEagerOrdinalsBehind;
  return start + ((low - start) & ((1u << kEagerOrdinalBits) - 1));
}

// Whether ordinal `a` comes before `b` (both from one wrapping 32-bit count, less than 2^31
// apart).
inline bool ordinal_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

}  // namespace hmr::nccl
