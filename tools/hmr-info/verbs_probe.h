// The rdma-core side: libibverbs (loaded the way the verbs NIC adapter loads it) and, per RDMA
// device, what it can do for memory registration, each answer with its reason.
#pragma once

#include "json_value.h"

namespace hmr::info {

// {"library", "loaded", "reason", "devices": [{name, limits, dmabuf, peer_direct,
//  on_demand_paging, relaxed_ordering, offset_addressing, window_type1, window_type2}]}.
// reason is null when devices were found.  Never fails: a missing library, a kernel without
// RDMA and a device that cannot be opened each become a reason.
JsonValue verbs_json();

}  // namespace hmr::info
