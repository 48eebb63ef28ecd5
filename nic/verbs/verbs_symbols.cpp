#include "nic/verbs/verbs_symbols.h"

namespace hmr::verbs {
namespace {

#define HMR_IBVERBS_SPEC(member, symbol, version, need, result, params) \
  {symbol, hmem::SymbolNeed::need, version},
constexpr hmem::SymbolSpec kIbverbsSymbolSpecs[] = {HMR_IBVERBS_SYMBOLS(HMR_IBVERBS_SPEC)};
#undef HMR_IBVERBS_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> ibverbs_symbol_specs() { return kIbverbsSymbolSpecs; }

void bind_ibverbs_symbols(const hmem::SymbolTable& table, IbverbsSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_IBVERBS_BIND(member, symbol, version, need, result, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));
  HMR_IBVERBS_SYMBOLS(HMR_IBVERBS_BIND)
#undef HMR_IBVERBS_BIND
}

}  // namespace hmr::verbs
