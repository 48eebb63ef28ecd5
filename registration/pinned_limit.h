// The bound on host bytes hmr holds pinned at one domain's NIC, and where it comes from
// (hmr_md_attr.max_pinned_bytes and its source; docs/semantics.md, "Under pressure").
#pragma once

#include <cstdint>

#include "nic/nic.h"

namespace hmr::core {

struct PinnedLimit {
  bool bounded = false;
  uint64_t bytes = 0;                 // when bounded (0 then: nothing may be pinned)
  const char* source = "not_pinned";  // "nic", "rlimit_memlock", "cap_ipc_lock", "unlimited"
};

// For a NIC that pins host memory: the smaller of its own bound and RLIMIT_MEMLOCK as it is
// in force now (none with CAP_IPC_LOCK).  The kernel counts pinned pages per process, so
// domains and other pinning in the process share the limit; hmr bounds each domain by it,
// and a refusal the kernel still makes is answered by giving back idle registrations.
PinnedLimit pinned_limit_for(const nic::Capabilities& caps);

}  // namespace hmr::core
