#include "util/page_array.h"

#include <sys/mman.h>

#include <cstdint>

namespace hmr::page_array_detail {

namespace {
size_t round_up(size_t bytes) { return (bytes + kHugePage - 1) & ~(kHugePage - 1); }
}  // namespace

void* map_huge(size_t bytes) {
  const size_t length = round_up(bytes);
  // Over-map by one huge page and trim, so the array starts on a 2 MiB boundary and every
  // 2 MiB of it can be one huge page.
  void* raw = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + length + kHugePage;
  if (end > aligned + length) munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  // Advice only: without transparent huge pages the array works the same on small pages.
  (void)madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap(void* address, size_t bytes) { munmap(address, round_up(bytes)); }

}  // namespace hmr::page_array_detail
