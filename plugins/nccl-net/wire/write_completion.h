// The 4 bytes of remote CQ data each RMA write of a message carries, so the receiver learns
// which posted buffer was filled and with how many bytes without another message.  Four bytes,
// not eight, because that is what EFA and verbs (RDMA write with immediate: a 32-bit
// imm_data) offer (domain_attr->cq_data_size 4); tcp and shm offer 8 and take 4 as well.
//
//   bits 0-4 slot | 5-7 buffer index | 8-9 generation (its low 2 bits) | 10-11 part |
//   12-31 value (20 bits)
//
// A message of less than 1 MiB is one write, `whole`, whose value is its size.  A larger one
// (up to kMaxMessageSize, 1 TiB - 1) is two writes into the same buffer: the head, the first
// value x 1 MiB bytes (value >= 1), and, unless the size is a multiple of 1 MiB, the tail,
// the rest (value = its size, 1 to 1 MiB - 1) at that offset.  The head says whether a tail
// follows.  Each part's completion means its own bytes landed, so the receiver completes the
// buffer once it has seen every part, in whichever order they arrived: nothing is asked of
// the provider's ordering, and nothing of the completion's `len` (libfabric 1.17's ofi_rxm
// reports 0 for a remote write).
//
// It comes from the peer: decode() only splits it; the recv comm checks slot, generation,
// index and parts against what it posted and the sizes against the buffer.
#pragma once

#include <cstdint>

#include "limits.h"

namespace hmr::nccl {

enum class WritePart : uint8_t {
  whole = 0,           // the whole message: value = its size (< 1 MiB)
  head_only = 1,       // value x 1 MiB bytes, the whole message
  head_then_tail = 2,  // value x 1 MiB bytes; a tail follows
  tail = 3,            // value bytes (>= 1) at offset head
};

inline constexpr unsigned kWriteValueBits = 20;
// What a completion carries of a receive's generation: its low 2 bits (a write for the slot's
// previous receive, late after a failure, cannot match).
inline constexpr uint8_t kWriteGenerationMask = 3;
inline constexpr uint64_t kWholeWriteLimit = uint64_t{1} << kWriteValueBits;  // 1 MiB
static_assert(kMaxMessageSize >> kWriteValueBits < kWholeWriteLimit,
              "a head's MiB count must fit the value field");
static_assert(kMaxRequests == 32 && kMaxRecvs == 8, "slot and index fields are 5 and 3 bits");

struct WriteCompletion {
  uint8_t slot = 0;
  uint8_t generation = 0;  // only its low 2 bits travel
  uint8_t index = 0;
  WritePart part = WritePart::whole;
  uint32_t value = 0;  // < kWholeWriteLimit
};

inline uint32_t encode(const WriteCompletion& c) {
  const uint32_t value = c.value & static_cast<uint32_t>(kWholeWriteLimit - 1);
  return (uint32_t{c.slot} & 31u) | (uint32_t{c.index} & 7u) << 5 |
         (uint32_t{c.generation} & kWriteGenerationMask) << 8 |
         uint32_t{static_cast<uint8_t>(c.part)} << 10 | value << 12;
}

inline WriteCompletion decode_write_completion(uint32_t data) {
  return WriteCompletion{static_cast<uint8_t>(data & 31u),
                         static_cast<uint8_t>(data >> 8 & kWriteGenerationMask),
                         static_cast<uint8_t>(data >> 5 & 7u),
                         static_cast<WritePart>(data >> 10 & 3u), data >> 12};
}

// One write of a message: `bytes` at `offset` in it, and the part and value its completion
// carries.
struct PlannedWrite {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  WritePart part = WritePart::whole;
  uint32_t value = 0;
};

// How a message of `size` bytes (<= kMaxMessageSize) is written: writes[0] (whole, or the
// head), and writes[1] (the tail) when count is 2.
struct WritePlan {
  PlannedWrite writes[2];
  size_t count = 1;
};

inline WritePlan plan_writes(uint64_t size) {
  if (size < kWholeWriteLimit) return WritePlan{{{0, size, WritePart::whole, static_cast<uint32_t>(size)}}, 1};
  const uint64_t head = size & ~(kWholeWriteLimit - 1);
  const uint64_t tail = size - head;
  const uint32_t mib = static_cast<uint32_t>(head >> kWriteValueBits);
  if (tail == 0) return WritePlan{{{0, head, WritePart::head_only, mib}}, 1};
  return WritePlan{{{0, head, WritePart::head_then_tail, mib},
                    {head, tail, WritePart::tail, static_cast<uint32_t>(tail)}},
                   2};
}

// What has landed of the message written into one buffer, part by part.
struct LandedParts {
  static constexpr uint8_t kHeadLanded = 1, kTailLanded = 2, kTailExpected = 4;
  uint8_t seen = 0;
  uint64_t bytes = 0;  // of the parts landed
  bool complete = false;
};

// Takes the part `c` announces into `landed`: nullptr, or what is wrong with it (a part of a
// message already complete, a second head or tail, an empty one, a head that says there is
// no tail after a tail).  Sizes against the buffer are the caller's to check.
inline const char* take_part(LandedParts& landed, const WriteCompletion& c) {
  using P = LandedParts;
  if (landed.complete) return "a part of a message already complete";
  switch (c.part) {
    case WritePart::whole:
      if (landed.seen != 0) return "a whole message after part of one";
      landed.bytes = c.value;
      landed.complete = true;
      return nullptr;
    case WritePart::head_only:
    case WritePart::head_then_tail:
      if (landed.seen & P::kHeadLanded) return "a second head";
      if (c.value == 0) return "an empty head";
      if (c.part == WritePart::head_only && (landed.seen & P::kTailLanded)) {
        return "a head that says there is no tail, after a tail";
      }
      landed.bytes += uint64_t{c.value} << kWriteValueBits;
      landed.seen |= P::kHeadLanded;
      if (c.part == WritePart::head_then_tail) landed.seen |= P::kTailExpected;
      break;
    case WritePart::tail:
      // (After a head that says there is none, the message is complete: refused above.)
      if (landed.seen & P::kTailLanded) return "a second tail";
      if (c.value == 0) return "an empty tail";
      landed.bytes += c.value;
      landed.seen |= P::kTailLanded;
      break;
  }
  landed.complete = (landed.seen & P::kHeadLanded) &&
                    (!(landed.seen & P::kTailExpected) || (landed.seen & P::kTailLanded));
  return nullptr;
}

}  // namespace hmr::nccl
