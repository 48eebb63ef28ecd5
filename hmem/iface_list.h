// FI_HMEM: which memory interfaces a process enables, and the order in which detection asks
// them about a pointer.
//
// Syntax, as libfabric's FI_HMEM plus exclusion (FI_PROVIDER style):
//   unset or ""        every interface, detection order cuda, rocr, ze, neuron, synapseai
//   "cuda,ze"          only these (',' or ';' separate; case and spaces ignored); detection
//                      asks them in the order listed
//   "^rocr" "^rocr,ze" every interface but these, in the default order
// The system interface is always enabled: naming it is allowed, excluding it is an error.
// An unknown name is an error, never a silent guess.
#pragma once

#include <hmr/hmr.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace hmr::hmem {

struct IfaceSelection {
  std::array<bool, HMR_HMEM_IFACE_COUNT> enabled{};  // indexed by enum hmr_hmem_iface
  std::vector<int> detection_order;                   // enabled device ifaces, asked in order
  std::string text;                                   // the FI_HMEM value it came from

  bool is_enabled(int iface) const {
    return iface >= 0 && iface < HMR_HMEM_IFACE_COUNT && enabled[static_cast<size_t>(iface)];
  }
};

// The iface a name (as FI_HMEM and hmr-info spell it) stands for, or -1.
int iface_from_name(std::string_view name);

// Every interface, in the default detection order.
IfaceSelection all_ifaces();

// Parses an FI_HMEM value; NULL or blank means every interface.  Errors name the variable.
Result<IfaceSelection> parse_iface_list(const char* text);

// FI_HMEM of this process, parsed.  Read once per process, by hmem::Registry::global().
Result<IfaceSelection> read_hmem_selection();

}  // namespace hmr::hmem
