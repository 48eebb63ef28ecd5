#include "ze/ze_symbols.h"

namespace hmr::ze {
namespace {

#define HMR_ZE_SPEC(member, symbol, need, params) {symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kZeSymbolSpecs[] = {HMR_ZE_SYMBOLS(HMR_ZE_SPEC)};
#undef HMR_ZE_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> ze_symbol_specs() { return kZeSymbolSpecs; }

void bind_ze_symbols(const hmem::SymbolTable& table, ZeSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_ZE_BIND(member, symbol, need, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));
  HMR_ZE_SYMBOLS(HMR_ZE_BIND)
#undef HMR_ZE_BIND
}

}  // namespace hmr::ze
