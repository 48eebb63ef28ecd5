#include "rocr/rocr_symbols.h"

namespace hmr::rocr {
namespace {

#define HMR_ROCR_SPEC(member, symbol, need, params) {symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kRocrSymbolSpecs[] = {HMR_ROCR_SYMBOLS(HMR_ROCR_SPEC)};
#undef HMR_ROCR_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> rocr_symbol_specs() { return kRocrSymbolSpecs; }

void bind_rocr_symbols(const hmem::SymbolTable& table, RocrSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_ROCR_BIND(member, symbol, need, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));
  HMR_ROCR_SYMBOLS(HMR_ROCR_BIND)
#undef HMR_ROCR_BIND
}

}  // namespace hmr::rocr
