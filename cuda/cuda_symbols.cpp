#include "cuda/cuda_symbols.h"

namespace hmr::cuda {
namespace {

#define HMR_CUDA_SPEC(member, symbol, need, params) {symbol, hmem::SymbolNeed::need},
constexpr hmem::SymbolSpec kCudaSymbolSpecs[] = {HMR_CUDA_SYMBOLS(HMR_CUDA_SPEC)};
#undef HMR_CUDA_SPEC

}  // namespace

std::span<const hmem::SymbolSpec> cuda_symbol_specs() { return kCudaSymbolSpecs; }

void bind_cuda_symbols(const hmem::SymbolTable& table, CudaSymbols& symbols) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_CUDA_BIND(member, symbol, need, params) \
  symbols.member = reinterpret_cast<decltype(symbols.member)>(table.address(index++));
  HMR_CUDA_SYMBOLS(HMR_CUDA_BIND)
#undef HMR_CUDA_BIND
}

}  // namespace hmr::cuda
