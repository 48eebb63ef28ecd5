// The libfabric side: the library the ofi NIC adapter would load (dlopen'ed, never linked:
// linking it costs every hmr user ~0.2 s at start) and the providers fi_getinfo offers, with
// and without the RMA question the adapter asks.
#pragma once

#include "json_value.h"

namespace hmr::info {

// {"library", "loaded", "version", "api_version", "reason", "providers": [{name, fabrics,
//  endpoint_types, domains, mr_mode, hmem, rma}]}.  Never fails: each failure is a reason.
JsonValue libfabric_json();

}  // namespace hmr::info
