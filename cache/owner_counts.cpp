#include "cache/owner_counts.h"

namespace hmr::core {

// One table per thread slot that a thread owns outright (util/thread_slot.h): 32 KiB in all.
OwnerCounts::Table OwnerCounts::tables[kThreadSlots];

}  // namespace hmr::core
