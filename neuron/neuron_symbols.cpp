#include "neuron/neuron_symbols.h"

namespace hmr::neuron {
namespace {

#define HMR_NRT_SPEC(member, symbol, need, ret, params) {symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kNrtSymbolSpecs[] = {HMR_NRT_SYMBOLS(HMR_NRT_SPEC)};
#undef HMR_NRT_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> nrt_symbol_specs() { return kNrtSymbolSpecs; }

void bind_nrt_symbols(const hmem::SymbolTable& table, NrtSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_NRT_BIND(member, symbol, need, ret, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));
  HMR_NRT_SYMBOLS(HMR_NRT_BIND)
#undef HMR_NRT_BIND
}

}  // namespace hmr::neuron
