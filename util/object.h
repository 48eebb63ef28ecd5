// Every public handle points at an object whose first bytes are an ObjectTag, so the C ABI
// can refuse a NULL handle or a handle of the wrong type with an error instead of a crash.
//
// The tag also names the process that made the object: its magic is kLive plus the number of
// forks that made that process (util/fork_generation.h).  In a forked child every handle its
// parent made reads as dead to from_handle(), at no cost to the check: the locks inside such
// an object may be held for ever by a parent's thread that does not exist in the child, and
// its NIC resources are the parent's.  made_before_fork() tells those handles from garbage,
// so that the C ABI can say why, and let the child close them (api/bad_handle.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/fork_generation.h"
#include "util/handle_storage.h"

namespace hmr::core {

enum class ObjectClass : uint32_t {
  domain = 0x444f4d4e,  // "DOMN"
  memory_region = 0x4d52454e,
  cached_memory_region = 0x4d524843,  // an MR handed out by the cache hit path (core/cached_mr.h)
  event_queue = 0x45514551,
  counter = 0x434e5452,
  endpoint = 0x45505054,
  monitor = 0x4d4f4e49,
  remote_key = 0x524b4559,  // "RKEY": a peer's unpacked key (core/remote_key.h)
  memory_window = 0x4d57494e,  // "MWIN": core/memory_window.h
};

struct ObjectTag {
  static constexpr uint32_t kLive = 0x686d7221;  // "hmr!", in the process that loaded hmr
  uint32_t magic;
  ObjectClass object_class;

  // The magic of an object made in this process (a forked child's differs from its parent's).
  static uint32_t live_here() { return kLive + forks_counted(); }
};

// Base of every handle type; non-polymorphic so the tag sits at offset 0.  Objects made with
// new live in handle storage (util/handle_storage.h): after delete their memory stays hmr's
// and their tag dead, so a handle used after close is refused, not a read of freed memory.
template <ObjectClass Class>
class Tagged {
 public:
  static constexpr ObjectClass kClass = Class;

  static void* operator new(size_t bytes) { return allocate_handle_storage(bytes); }
  static void operator delete(void* block, size_t bytes) noexcept {
    release_handle_storage(block, bytes);
  }
  // Placement (pooled handles build themselves in storage of their own).
  static void* operator new(size_t, void* where) noexcept { return where; }
  static void operator delete(void*, void*) noexcept {}

 protected:
  Tagged() = default;
  // Storage that outlives the object (handle storage, the hit path's pool) zeroes the tag
  // again itself: the compiler may drop this store, since the object's lifetime ends here.
  ~Tagged() { tag_.magic = 0; }

 private:
  ObjectTag tag_{ObjectTag::live_here(), Class};
};

// The object behind a public handle, or nullptr when the handle is NULL or of another type.
template <typename T>
T* from_handle(const void* handle) {
  if (handle == nullptr) return nullptr;
  const auto* tag = static_cast<const ObjectTag*>(handle);
  if (tag->magic != ObjectTag::live_here() || tag->object_class != T::kClass) return nullptr;
  return static_cast<T*>(const_cast<void*>(handle));
}

// Whether `handle` is an object of a known class that an ancestor of this process made before
// it forked (and that was open then).  Only for a handle from_handle() refused.
bool made_before_fork(const void* handle);
// Its class, for messages ("domain", "MR", ...); only for a handle made_before_fork() named.
const char* class_name(const void* handle);
// Marks such a handle closed in this process, touching nothing else in it: later calls with
// it are refused as not a handle, as after any close.
void forget_inherited(void* handle);

template <typename Handle, typename T>
Handle* to_handle(T* object) {
  return reinterpret_cast<Handle*>(object);
}

}  // namespace hmr::core
