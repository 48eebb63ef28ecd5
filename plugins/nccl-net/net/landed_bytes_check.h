// HMR_NCCL_CHECK_LANDED (net/settings.h): for diagnosis, whether the bytes of a completed
// receive stay as they were until NCCL posts the buffer again.
//
// Between test() reporting a receive done and the next irecv of the same buffer, nothing may
// write it: NCCL only reads it (its GPU copies a host staging slot out), and the sender may
// write it again only after the next irecv announced it.  Bytes that change in between landed
// after their completion was reported (a transport that reports a write complete before its
// data is in place) or came from a writer besides the sender; NCCL's GPU then read a mixture.
// The recv comm keeps a copy of each completed receive in host memory (NCCL_PTR_HOST: the CPU
// can read it), and compares it when the buffer is posted again.  It costs a copy and a
// comparison of every received byte, so it is off unless asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hmr::nccl {

class LandedBytesCheck {
 public:
  // Copies kept at most (the oldest goes first): NCCL reposts a staging slot after at most
  // NCCL_STEPS (8) others per connection, and a recv comm has one or a few connections' worth.
  static constexpr size_t kKept = 64;

  // A receive of `len` bytes at `data` was reported done: its bytes as they are now.
  void received(const void* data, size_t len);
  // `data` (`len` bytes) is being posted again: what changed since a receive at the same
  // address was reported done (how many bytes, the first and last offsets), or nullopt when
  // nothing did or no copy was kept.  The copy is dropped either way.
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
