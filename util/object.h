// Every public handle points at an object whose first bytes are an ObjectTag, so the C ABI
// can refuse a NULL handle or a handle of the wrong type with an error instead of a crash.
#pragma once

#include <cstddef>
#include <cstdint>

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
  static constexpr uint32_t kLive = 0x686d7221;  // "hmr!"
  uint32_t magic;
  ObjectClass object_class;
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
  ObjectTag tag_{ObjectTag::kLive, Class};
};

// The object behind a public handle, or nullptr when the handle is NULL or of another type.
template <typename T>
T* from_handle(const void* handle) {
  if (handle == nullptr) return nullptr;
  const auto* tag = static_cast<const ObjectTag*>(handle);
  if (tag->magic != ObjectTag::kLive || tag->object_class != T::kClass) return nullptr;
  return static_cast<T*>(const_cast<void*>(handle));
}

template <typename Handle, typename T>
Handle* to_handle(T* object) {
  return reinterpret_cast<Handle*>(object);
}

}  // namespace hmr::core
