#include "synapseai/hlthunk_symbols.h"
#include "synapseai/scal_symbols.h"
#include "synapseai/synapse_symbols.h"

namespace hmr::synapseai {
namespace {

#define HMR_SYNAPSEAI_SPEC(member, symbol, need, ret, params) {symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kSynapseSymbolSpecs[] = {HMR_SYNAPSE_SYMBOLS(HMR_SYNAPSEAI_SPEC)};
constexpr hmem::SymbolSpec kHlthunkSymbolSpecs[] = {HMR_HLTHUNK_SYMBOLS(HMR_SYNAPSEAI_SPEC)};
constexpr hmem::SymbolSpec kScalSymbolSpecs[] = {HMR_SCAL_SYMBOLS(HMR_SYNAPSEAI_SPEC)};
#undef HMR_SYNAPSEAI_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> synapse_symbol_specs() { return kSynapseSymbolSpecs; }
std::span<const hmem::SymbolSpec> hlthunk_symbol_specs() { return kHlthunkSymbolSpecs; }
std::span<const hmem::SymbolSpec> scal_symbol_specs() { return kScalSymbolSpecs; }

// dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_SYNAPSEAI_BIND(member, symbol, need, ret, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));

void bind_synapse_symbols(const hmem::SymbolTable& table, SynapseSymbols& symbols) {
  size_t index = 0;
  HMR_SYNAPSE_SYMBOLS(HMR_SYNAPSEAI_BIND)
}

void bind_hlthunk_symbols(const hmem::SymbolTable& table, HlthunkSymbols& symbols) {
  size_t index = 0;
  HMR_HLTHUNK_SYMBOLS(HMR_SYNAPSEAI_BIND)
}

void bind_scal_symbols(const hmem::SymbolTable& table, ScalSymbols& symbols) {
  size_t index = 0;
  HMR_SCAL_SYMBOLS(HMR_SYNAPSEAI_BIND)
}

#undef HMR_SYNAPSEAI_BIND

}  // namespace hmr::synapseai
