// The few libfabric entry points hmr resolves with dlsym.
//
// libfabric is never linked: a binary linked to it pays its providers' constructors (~0.2 s
// here, libpsm2 calibrating clocks) whether or not it ever opens an ofi domain.  Everything
// else hmr calls (fi_domain, fi_mr_regattr, fi_close, fi_mr_raw_attr, fi_mr_refresh, ...) is a
// static inline in libfabric's headers that jumps through the ops table of an object these
// functions returned, so it needs no symbol.  Prototypes are libfabric's own (decltype of the
// header's declaration), so a mismatch cannot compile.
#pragma once

#include <rdma/fabric.h>

#include <span>

#include "hmem/symbol_table.h"

namespace hmr::nic::ofi {

// X(exported symbol, required|optional)
#define HMR_OFI_SYMBOLS(X) \
  X(fi_version, required)  \
  X(fi_getinfo, required)  \
  X(fi_freeinfo, required) \
  X(fi_dupinfo, required)  \
  X(fi_fabric, required)   \
  X(fi_strerror, required)

// The resolved entry points (all required, so none is null once loaded).
struct OfiSymbols {
#define HMR_OFI_DECLARE_MEMBER(symbol, need) decltype(&::symbol) symbol = nullptr;
  HMR_OFI_SYMBOLS(HMR_OFI_DECLARE_MEMBER)
#undef HMR_OFI_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> ofi_symbol_specs();

// Fills `symbols` from a table loaded with ofi_symbol_specs().
void bind_ofi_symbols(const hmem::SymbolTable& table, OfiSymbols& symbols);

}  // namespace hmr::nic::ofi
