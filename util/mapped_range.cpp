#include "util/mapped_range.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace hmr::core {

bool range_mapped(const void* address, size_t length) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(address);
  const uintptr_t first = start & ~(page - 1);
  // msync takes a page-aligned start; the length may end anywhere in the last page.
  if (msync(reinterpret_cast<void*>(first), length + (start - first), MS_ASYNC) == 0) return true;
  return errno != ENOMEM;
}

}  // namespace hmr::core
