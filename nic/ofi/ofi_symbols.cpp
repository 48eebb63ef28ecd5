#include "nic/ofi/ofi_symbols.h"

namespace hmr::nic::ofi {
namespace {

#define HMR_OFI_SPEC(symbol, need) {#symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kOfiSymbolSpecs[] = {HMR_OFI_SYMBOLS(HMR_OFI_SPEC)};
#undef HMR_OFI_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> ofi_symbol_specs() { return kOfiSymbolSpecs; }

void bind_ofi_symbols(const hmem::SymbolTable& table, OfiSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_OFI_BIND(symbol, need) \
  symbols.symbol = reinterpret_cast<decltype(symbols.symbol)>(table.address(index++));
  HMR_OFI_SYMBOLS(HMR_OFI_BIND)
#undef HMR_OFI_BIND
}

}  // namespace hmr::nic::ofi
