// Per-tag state of a comm: NCCL gives each sender of a grouped receive its own tag (its rank),
// and the k-th isend of a tag fills the k-th posted buffer of that tag (wire/control_message.h).
// A comm sees a handful of tags (one per sender sharing it, at most maxRecvs in a receive), so
// a flat table searched from the last one found is the whole index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hmr::nccl {

template <typename State>  // State has `int32_t tag` and is default-constructible
class TagStreams {
 public:
  // The tag's state, made (zeroed) on first use.
  State& at(int32_t tag) {
    if (State* found = find(tag)) return *found;
    streams_.emplace_back();
    streams_.back().tag = tag;
    last_ = streams_.size() - 1;
    return streams_.back();
  }
  // The tag's state, or nullptr when the tag was never used.
  State* find(int32_t tag) {
    if (last_ < streams_.size() && streams_[last_].tag == tag) return &streams_[last_];
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].tag == tag) {
        last_ = i;
        return &streams_[i];
      }
    }
    return nullptr;
  }
  size_t size() const { return streams_.size(); }

 private:
  std::vector<State> streams_;
  size_t last_ = 0;
};

}  // namespace hmr::nccl
