// The "nics" section: the kernel's RDMA support, the hints for the two ways device memory
// reaches a NIC (dma-buf import, kernel peer-memory clients), the memory-lock limit, and what
// libibverbs and libfabric find.
#pragma once

#include "json_value.h"

namespace hmr::info {

JsonValue nics_section();

}  // namespace hmr::info
