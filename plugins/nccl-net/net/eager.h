// The eager protocol: small messages without waiting for the receiver's announcement.
//
// A message of up to the eager max (HMR_NCCL_EAGER_MAX, 8 KiB by default; both ends use the
// smaller of their two, agreed at connect) whose buffer has not been announced yet is sent
// straight away with fi_senddata from NCCL's registered buffer into one of the bounce buffers
// the recv comm keeps posted (its control receive buffers, made as large as the eager max).
// The 4 bytes of CQ data name the buffer it is for by tag and ordinal (wire/eager_data.h: tags
// 0 to 2^20 - 1, NCCL's ranks; others wait for announcements): the k-th isend of tag t fills
// the k-th posted buffer of tag t, whether it moves eagerly or by RMA.
//
// The receiver matches the message to that buffer when it is posted, or holds the bounce
// buffer until it is (an unexpected message), then copies the bytes into it (host memory) or
// RMA-writes them there through its own NIC (device memory, which the CPU cannot copy into;
// the receive then needs iflush as after any NIC write).  A posted buffer the sender may fill
// eagerly (host memory, no larger than the eager max) is not announced at all, so a small
// message costs one message on the fabric, as raw RMA does; any other buffer is announced as
// before, and the sender uses whichever comes first: an announcement (zero-copy RMA) or, for
// a small message, the eager send (the announcement then finds its buffer filled and is
// dropped).  A buffer left unannounced whose message does not come (a sender that wants to
// send more than the eager max into it, which NCCL never does) is announced after a while,
// so the sender's too-large refusal reaches both ends instead of a hang.
//
// Flow control: a sender may have kEagerCreditsPerTag eager messages of one tag that the
// receiver has not consumed; the receiver returns credits in batches (an eager_credit message
// per half of them: one message back per 16 eager ones).  An unexpected message keeps its
// bounce buffer while more than kEagerBounceReserve others are posted, and is copied out to
// the heap otherwise (a spill), so the messages one fast sender sent ahead can never take the
// last bounce buffers from another sender of the same grouped receive, whose message the
// posted receive is waiting for: each tag's messages are consumed in its own order, which
// NCCL posts receives in.  A spill holds at most the credits of each tag.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hmr::nccl {

inline constexpr uint32_t kEagerCreditsPerTag = 32;
// Bounce buffers a recv comm keeps posted beside its control receives (NCCL keeps 8 receives
// posted per channel, so 40 cover its window several times over), and how many must stay
// posted before an unexpected message is spilled instead of held.
inline constexpr size_t kEagerBounceBuffers = 40;
inline constexpr size_t kEagerBounceReserve = 16;
// The most eager messages a recv comm holds ahead of their receives, over all tags: the
// credits of 64 senders sharing the comm (NCCL's tags are the ranks whose proxy shares it, a
// node's worth).  A sender that sends more (new tags each time) is a broken peer: without it,
// its messages would take the receiver's memory without end (up to 2 MiB of messages of up to
// the default eager max, 128 MiB at 64 KiB, and the tags' counters).
inline constexpr size_t kMaxEarlyMessages = 64 * kEagerCreditsPerTag;

}  // namespace hmr::nccl
