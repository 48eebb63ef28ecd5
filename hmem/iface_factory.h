// The memory interfaces this hmr build knows, and how to make each.  The registry creates
// them; nothing else names a vendor class.
#pragma once

#include <memory>
#include <span>

#include "hmem/iface.h"

namespace hmr::hmem {

struct IfaceDescriptor {
  int iface = HMR_HMEM_SYSTEM;      // enum hmr_hmem_iface
  const char* vendor = "";          // names the override variable HMR_<VENDOR>_LIBRARY
  const char* default_library = ""; // what is dlopen'ed when the override is unset
  // Whether query() knows every allocation of the runtime.  A runtime without a pointer query
  // (Neuron, SynapseAI) knows only what hmr allocated: a declared pointer it does not know is
  // taken on the caller's word, never reported as a contradiction.
  bool detects_all = true;
  std::unique_ptr<Iface> (*make)() = nullptr;  // null: this build has no such iface
};

// One descriptor per device iface (CUDA, ROCr, Level Zero, Neuron, SynapseAI), in enum order.
std::span<const IfaceDescriptor> builtin_ifaces();

}  // namespace hmr::hmem
