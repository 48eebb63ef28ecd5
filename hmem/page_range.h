// The whole host pages that cover a byte range: what dma-buf exporters take and give.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace hmr::hmem {

struct PageRange {
  uintptr_t start = 0;  // page-aligned
  size_t length = 0;    // a multiple of the page size
  uint64_t offset = 0;  // where the original address lies inside [start, start + length)
};

// `page` must be a power of two; address + length must not overflow (callers check first).
inline PageRange page_round(uintptr_t address, size_t length, size_t page) {
  const uintptr_t mask = page - 1;
  const uintptr_t start = address & ~mask;
  const uintptr_t end = (address + length + mask) & ~mask;
  return PageRange{start, static_cast<size_t>(end - start), static_cast<uint64_t>(address - start)};
}

inline size_t host_page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace hmr::hmem
