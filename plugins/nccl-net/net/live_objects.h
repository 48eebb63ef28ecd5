// Which comms and memory handles are alive.  NCCL hands the plugin back the pointers it was
// given, but a caller with a bug (or a test) may pass a closed comm or another plugin's
// handle: every entry point looks the pointer up here before touching what it points to, so
// such a call is an error with a reason instead of a use after free.
#pragma once

#include <mutex>
#include <unordered_set>

namespace hmr::nccl {

class LiveObjects {
 public:
  void add(const void* object) {
    std::lock_guard lock(mutex_);
    objects_.insert(object);
  }
  // False when `object` was not alive (already removed, or never added).
  bool remove(const void* object) {
    std::lock_guard lock(mutex_);
    return objects_.erase(object) == 1;
  }
  bool contains(const void* object) const {
    std::lock_guard lock(mutex_);
    return objects_.count(object) == 1;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<const void*> objects_;
};

}  // namespace hmr::nccl
