#include "nic/verbs/mlx5dv_library.h"

#include <utility>

namespace hmr::verbs {
namespace {

#define HMR_MLX5DV_SPEC(member, symbol, version, result, params) \
  {symbol, hmem::SymbolNeed::required, version},
constexpr hmem::SymbolSpec kMlx5dvSymbolSpecs[] = {HMR_MLX5DV_SYMBOLS(HMR_MLX5DV_SPEC)};
#undef HMR_MLX5DV_SPEC

}  // namespace

Mlx5dvLibrary::Mlx5dvLibrary(hmem::SymbolTable table) : table_(std::move(table)) {
  size_t index = 0;
  // dlsym gives object pointers; POSIX guarantees they convert to function pointers.
#define HMR_MLX5DV_BIND(member, symbol, version, result, params) \
  symbols_.member = reinterpret_cast<decltype(symbols_.member)>(table_.address(index++));
  HMR_MLX5DV_SYMBOLS(HMR_MLX5DV_BIND)
#undef HMR_MLX5DV_BIND
}

Result<std::shared_ptr<const Mlx5dvLibrary>> Mlx5dvLibrary::load() {
  Result<hmem::SymbolTable> table =
      hmem::SymbolTable::load(kMlx5Vendor, kMlx5Soname, kMlx5dvSymbolSpecs);
  if (!table.ok()) return table.status();
  return std::shared_ptr<const Mlx5dvLibrary>(std::make_shared<Mlx5dvLibrary>(std::move(*table)));
}

}  // namespace hmr::verbs
