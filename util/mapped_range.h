// Whether a range of this process's address space is mapped at all, with any protection: the
// one question about a mapping that every kernel answers without /proc (MappingQuery's
// PROCMAP_QUERY needs Linux 6.11).  A device iface asks it where its runtime cannot say what an
// address is (rocr/: in a forked child, the parent's GPU memory is not mapped there).
#pragma once

#include <cstddef>

namespace hmr::core {

// True when every page of [address, address + length) is mapped (a PROT_NONE mapping counts);
// false when any is not.  One msync(MS_ASYNC), which touches nothing and fails with ENOMEM
// exactly for an unmapped page; any other failure (none is known for MS_ASYNC on a page-aligned
// range) answers true, so that a kernel's surprise never turns memory away.
bool range_mapped(const void* address, size_t length);

}  // namespace hmr::core
