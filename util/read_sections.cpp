#include "util/read_sections.h"

#include <thread>

namespace hmr {

ReadSections::ReadSections() { asymmetric_fences_ready(); }

void ReadSections::wait_for_readers() {
  // After this every reader that entered before is visible as inside, and every reader that
  // enters later sees what the caller unlinked before calling.
  heavy_fence();
  for (Slot& slot : slots_) {
    const uint64_t seen = slot.sequence.load(std::memory_order_acquire);
    if ((seen & 1) != 0) {
      while (slot.sequence.load(std::memory_order_acquire) == seen) std::this_thread::yield();
    }
    while (slot.shared.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
}

}  // namespace hmr
