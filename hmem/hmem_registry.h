// Which memory interfaces this process can serve.  Today only system (host) memory; the
// device interfaces (CUDA, ROCr, Level Zero, Neuron, SynapseAI) arrive with the hmem layer.
// Fail closed: memory declared as device memory is never treated as host memory because
// its runtime is missing.
#pragma once

#include <hmr/hmr.h>

#include <cstdint>

#include "core/status.h"

namespace hmr::hmem {

const char* iface_name(int iface);

// Checks a caller-declared iface/device pair: in range, well formed, and served here.
// `iface` is the caller's raw enum value, which may be out of range.
Status check_declared_device(int iface, uint64_t device);

}  // namespace hmr::hmem
