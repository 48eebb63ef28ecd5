// HMR_NCCL_CHECK_LANDED (net/settings.h): for diagnosis, whether the bytes of a completed
// receive stay as they were until NCCL posts the buffer again.
//
// Between test() reporting a receive done and the next irecv of the same buffer, nothing may
// write it: NCCL only reads it (its GPU copies a host staging slot out), and the sender may
// write it again only after the next irecv announced it.  Bytes that change in between landed
// after their completion was reported (a transport that reports a write complete before its
// data is in place) or came from a writer besides the sender; NCCL's GPU then read a mixture.
// The recv comm keeps a copy of each completed receive in host memory (NCCL_PTR_HOST: the CPU
// can read it), and compares it when a receive is posted into that buffer, or over any of it.
// It costs a copy and a comparison of every received byte, so it is off unless asked for.
//
// And what lands is what was sent: with the same setting each send comm logs a checksum of
// every message from host memory as isend hands it to the provider, and each recv comm one of
// every such buffer when test() reports it done, both as INFO lines naming the connection
// (the listener's nonce), the tag and the message's ordinal in its tag, which is how the two
// ends match a message to a buffer (net/eager.h).  Two logs whose lines differ for one key
// locate a corruption between isend and test() (tests/gpu/nccl_two_ranks.py compares them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hmr::nccl {

// The checksum of `len` bytes at `data` (FNV-1a over 8-byte words, then the tail bytes).
uint64_t message_checksum(const void* data, size_t len);
// The INFO line for one message: "HMR_NCCL_CHECK_SUM <side> nonce=... tag=... ordinal=...
// bytes=... sum=..." (`side`: "sent" or "received").
std::string message_checksum_line(const char* side, uint64_t nonce, int32_t tag,
                                  uint32_t ordinal, size_t len, uint64_t sum);

class LandedBytesCheck {
 public:
  // Copies kept at most (the oldest goes first): NCCL reposts a staging slot after at most
  // NCCL_STEPS (8) others per connection, and a recv comm has one or a few connections' worth.
  static constexpr size_t kKept = 64;

  // A receive of `len` bytes at `data` was reported done: its bytes as they are now.
  void received(const void* data, size_t len);
  // `data` (`len` bytes) is being posted: what changed in a kept receive at the same address,
  // or one the new buffer overlaps, since it was reported done (which receive, how many bytes,
  // the first and last offsets; the first such receive), or nullopt when nothing did.  Those
  // copies are dropped either way: the new receive may write their bytes from now on.
  std::optional<std::string> posting_again(const void* data, size_t len);

 private:
  struct Kept {
    const void* data = nullptr;
    std::vector<uint8_t> bytes;
    uint64_t order = 0;  // when it was kept, for choosing the oldest
  };
  std::vector<Kept> kept_;
  uint64_t next_order_ = 0;
};

}  // namespace hmr::nccl
