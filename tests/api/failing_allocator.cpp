// Replacement operator new and delete ([new.delete] lets a program define them): malloc and
// free, with the calling thread's armed failure (failing_allocator.h).  Every form is replaced
// (plain, array, nothrow, aligned, sized delete), so no allocation passes by the arming.
// Not built under ThreadSanitizer: its runtime's operators are not replaceable (the link fails
// with multiple definitions), where ASan's are (this binary then loses ASan's new/delete
// mismatch checks; its leak checks, through malloc, stay).
#include "tests/api/failing_allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace hmr_test::allocation_failure {
namespace {

// Constant-initialised: read inside operator new, before anything dynamic could run.
thread_local uint64_t countdown = 0;       // 0: no nth failure armed
thread_local size_t smallest_failing = 0;  // 0: no size failure armed
thread_local bool failed = false;
std::atomic<uint64_t> failures{0};

bool should_fail(size_t bytes) {
  if ((smallest_failing != 0 && bytes >= smallest_failing) ||
      (countdown != 0 && --countdown == 0)) {
    failed = true;
    failures.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void* allocate(size_t bytes, size_t alignment) {
  if (should_fail(bytes)) return nullptr;
  if (bytes == 0) bytes = 1;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes);
  if (bytes > SIZE_MAX - alignment) return nullptr;  // (rounding up would wrap to a tiny block)
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc's rule
  return std::aligned_alloc(alignment, rounded);
}

void* allocate_or_throw(size_t bytes, size_t alignment) {
  void* memory = allocate(bytes, alignment);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}

}  // namespace

void fail_nth(uint64_t nth) {
  countdown = nth;
  failed = false;
}

void fail_at_least(size_t bytes) {
  smallest_failing = bytes;
  failed = false;
}

bool disarm() {
  countdown = 0;
  smallest_failing = 0;
  return failed;
}

uint64_t failures_made() { return failures.load(std::memory_order_relaxed); }

}  // namespace hmr_test::allocation_failure

using hmr_test::allocation_failure::allocate;
using hmr_test::allocation_failure::allocate_or_throw;
constexpr size_t kPlain = alignof(std::max_align_t);

void* operator new(size_t bytes) { return allocate_or_throw(bytes, kPlain); }
void* operator new[](size_t bytes) { return allocate_or_throw(bytes, kPlain); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept { return allocate(bytes, kPlain); }
void* operator new[](size_t bytes, const std::nothrow_t&) noexcept {
  return allocate(bytes, kPlain);
}
void* operator new(size_t bytes, std::align_val_t alignment) {
  return allocate_or_throw(bytes, static_cast<size_t>(alignment));
}
void* operator new[](size_t bytes, std::align_val_t alignment) {
  return allocate_or_throw(bytes, static_cast<size_t>(alignment));
}
void* operator new(size_t bytes, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate(bytes, static_cast<size_t>(alignment));
}
void* operator new[](size_t bytes, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate(bytes, static_cast<size_t>(alignment));
}

void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t) noexcept { std::free(memory); }
void operator delete(void* memory, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete[](void* memory, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(memory);
}
void operator delete[](void* memory, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(memory);
}
