// Address space for the cache benchmarks' regions: anonymous, 2 MiB-aligned, never touched
// (MAP_NORESERVE: nothing is ever committed), so that a million registrations' worth of
// addresses costs no memory and no page faults, and every region starts in the same place
// relative to a huge page in every run.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hmr::bench {

class HugeAlignedMapping {
 public:
  static constexpr size_t kHugeBlock = size_t{2} << 20;

  explicit HugeAlignedMapping(size_t bytes)
      : length_((bytes + kHugeBlock - 1) & ~(kHugeBlock - 1)) {
    // One block more than asked, then the unaligned head and the tail given back.
    const size_t span = length_ + kHugeBlock;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      std::fprintf(stderr, "benchmark: mmap of %zu bytes: %s\n", span, std::strerror(errno));
      std::exit(2);
    }
    const uintptr_t first = reinterpret_cast<uintptr_t>(raw);
    base_ = (first + kHugeBlock - 1) & ~(kHugeBlock - 1);
    if (base_ > first) munmap(raw, base_ - first);
    const uintptr_t tail = first + span - (base_ + length_);
    if (tail != 0) munmap(reinterpret_cast<void*>(base_ + length_), tail);
  }
  ~HugeAlignedMapping() { munmap(reinterpret_cast<void*>(base_), length_); }
  HugeAlignedMapping(const HugeAlignedMapping&) = delete;
  HugeAlignedMapping& operator=(const HugeAlignedMapping&) = delete;

  uintptr_t base() const { return base_; }

 private:
  size_t length_;
  uintptr_t base_ = 0;
};

}  // namespace hmr::bench
