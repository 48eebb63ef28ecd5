// NRT_STATUS, turned into what hmr reports: an HMR_E* code and words a user can act on.
#pragma once

#include <string>

#include "neuron/neuron_symbols.h"

namespace hmr::neuron {

// The HMR_E* code a failed runtime call maps to (HMR_EIO when nothing closer fits).
int hmr_code_for(NRT_STATUS status);

// How a failed nrt_get_dmabuf_fd{,_v2} is read, as libfabric reads it: NRT_RESOURCE is a hard
// error (HMR_ENOMEM); any other status means "this memory cannot be exported as dma-buf"
// (HMR_EOPNOTSUPP), so a caller may fall back to another way.
int hmr_code_for_dmabuf(NRT_STATUS status);

// "NRT_RESOURCE (4: ...)".  Uses the runtime's own text when it has nrt_get_status_as_str;
// `symbols` may be only partly bound (or empty) before init.
std::string describe_nrt_status(const NrtSymbols& symbols, NRT_STATUS status);

}  // namespace hmr::neuron
