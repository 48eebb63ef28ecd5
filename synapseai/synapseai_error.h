// SynapseAI statuses and hl-thunk errno values, turned into what hmr reports: an HMR_E* code
// and words a user can act on.
#pragma once

#include <string>

#include "synapseai/scal_symbols.h"
#include "synapseai/synapse_symbols.h"

namespace hmr::synapseai {

// The HMR_E* code a failed SynapseAI call maps to (HMR_EIO when nothing closer fits).
int hmr_code_for(synStatus status);
// "synNoDeviceFound (8)".
std::string describe_syn_status(synStatus status);

// The errno behind a failed hl-thunk call: its own negative return when that is -errno, else
// the errno read right after the call, else EIO.
int hlthunk_errno(long long result, int saved_errno);
// The HMR_E* code for an errno from hl-thunk (HMR_EIO when nothing closer fits).
int hmr_code_for_errno(int error);
// "EBUSY (16: Device or resource busy)".
std::string describe_errno(int error);

// The HMR_E* code for a failed SCAL call's result (scal_symbols.h; HMR_EIO when nothing closer
// fits: hmr passes SCAL only what SCAL handed it, so even SCAL_INVALID_PARAM is SCAL's state,
// not the caller's argument).
int hmr_code_for_scal(int result);
// "SCAL_NOT_FOUND (-11)"; "SCAL result 7" for a value scal.h does not list.
std::string describe_scal_result(int result);

}  // namespace hmr::synapseai
