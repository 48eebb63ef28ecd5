// Storage for the objects behind public handles (util/object.h): blocks are recycled for later
// objects and never given back to the allocator.  A handle used after its close then points
// at memory hmr still owns, with a dead tag (zeroed here, after the destructor ran), so the C
// ABI answers -HMR_EINVAL "not a ... handle" instead of reading freed memory — until the block
// is reused for an object of the same size, as with any allocator.
//
// Blocks are kept per size class (64-byte steps), under 8 striped locks that fork() holds (so
// a forked child never inherits one held); the memory a process's handles ever used at once
// stays with it (as UCX's memory pools do).
#pragma once

#include <cstddef>

namespace hmr {

void* allocate_handle_storage(size_t bytes);
// `bytes` as given to allocate_handle_storage.  Zeroes the first 8 bytes (the object's tag).
void release_handle_storage(void* block, size_t bytes) noexcept;

}  // namespace hmr
