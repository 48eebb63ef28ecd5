// The 8 bytes of remote CQ data each RMA write of a message carries, so the receiver learns
// which posted buffer was filled and with how many bytes without another message:
//   bits 0-7 slot | 8-15 generation | 16-23 buffer index | 24-63 size (40 bits)
// It comes from the peer: decode() only splits it; the recv comm checks slot, generation and
// index against what it posted and the size against the buffer.
#pragma once

#include <cstdint>

#include "limits.h"

namespace hmr::nccl {

struct WriteCompletion {
  uint8_t slot = 0;
  uint8_t generation = 0;
  uint8_t index = 0;
  uint64_t size = 0;
};

inline uint64_t encode(const WriteCompletion& c) {
  return uint64_t{c.slot} | uint64_t{c.generation} << 8 | uint64_t{c.index} << 16 |
         (c.size & kMaxMessageSize) << 24;
}

inline WriteCompletion decode_write_completion(uint64_t data) {
  return WriteCompletion{static_cast<uint8_t>(data), static_cast<uint8_t>(data >> 8),
                         static_cast<uint8_t>(data >> 16), data >> 24};
}

}  // namespace hmr::nccl
