// The "nics" section: the kernel's RDMA support, the hints for the two ways device memory
// reaches a NIC (dma-buf import, kernel peer-memory clients), the memory-lock limit, what
// libibverbs and libfabric find, and which memory operations (rereg, windows, ODP, advice,
// indirect keys) each NIC has, asked through hmr_md_query_op as an application would.
#pragma once

#include "json_value.h"

namespace hmr::info {

JsonValue nics_section();

}  // namespace hmr::info
