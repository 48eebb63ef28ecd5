// Which Gaudi device hmr opens through hl-thunk for memory it allocates itself.
//
// Gaudi devices are exclusive: hl-thunk's open of a device another process holds fails, and
// hlthunk_open(DONT_CARE) opens the first device that is free (src/libhlthunk.c: the lowest
// minor whose open succeeds).  On a host with several devices and one process per device, that
// is another rank's device, taken before the rank acquires it.  So hmr opens:
// - the device HLS_MODULE_ID names (the variable SynapseAI acquires a rank's device by, and
//   launchers set per rank), with hlthunk_open_by_module_id;
// - else, on a host with one device, that device;
// - else none: it says to name one.
// The device the application itself acquired is not opened twice: a named device that is busy
// fails with EBUSY and says so.
#pragma once

#include <string>

#include "synapseai/hlthunk_symbols.h"
#include "util/status.h"

namespace hmr::synapseai {

// The fd of the device hmr may use, opened now; `device_count` is SynapseAI's count for this
// host and `library` names libhl-thunk in reasons.
Result<int> open_own_device(const HlthunkSymbols& symbols, const std::string& library,
                            int device_count);

}  // namespace hmr::synapseai
