// libmlx5, the mlx5 provider's direct-verbs library, as hmr uses it for indirect keys: loaded
// on demand, never linked, through hmem::SymbolTable under the vendor name "MLX5" (so
// HMR_MLX5_LIBRARY overrides the path), each symbol at the MLX5_1.x version that introduced it.
// A missing library or symbol is a reason ("indirect keys unavailable: ..."), never a failure of
// the verbs adapter, which needs nothing of libmlx5 for anything else.
#pragma once

#include <memory>

#include "hmem/symbol_table.h"
#include "nic/verbs/mlx5dv_abi.h"
#include "util/status.h"

namespace hmr::verbs {

inline constexpr const char* kMlx5Vendor = "MLX5";
inline constexpr const char* kMlx5Soname = "libmlx5.so.1";

// X(member, symbol, version, return type, parameter list); all required.
#define HMR_MLX5DV_SYMBOLS(X)                                                                  \
  X(is_supported, "mlx5dv_is_supported", "MLX5_1.8", bool, (ibv_device* device))             \
  X(open_device, "mlx5dv_open_device", "MLX5_1.7", ibv_context*,                             \
    (ibv_device* device, mlx5dv_context_attr* attr))                                          \
  X(create_qp, "mlx5dv_create_qp", "MLX5_1.3", ibv_qp*,                                      \
    (ibv_context* context, ibv_qp_init_attr_ex* qp_attr, mlx5dv_qp_init_attr* mlx5_qp_attr))  \
  X(qp_ex_from_ibv_qp_ex, "mlx5dv_qp_ex_from_ibv_qp_ex", "MLX5_1.10", mlx5dv_qp_ex*,         \
    (ibv_qp_ex* qp))                                                                          \
  X(create_mkey, "mlx5dv_create_mkey", "MLX5_1.10", mlx5dv_mkey*,                            \
    (mlx5dv_mkey_init_attr* attr))                                                            \
  X(destroy_mkey, "mlx5dv_destroy_mkey", "MLX5_1.10", int, (mlx5dv_mkey* mkey))

struct Mlx5dvSymbols {
#define HMR_MLX5DV_DECLARE_MEMBER(member, symbol, version, result, params) \
  result(*member) params = nullptr;
  HMR_MLX5DV_SYMBOLS(HMR_MLX5DV_DECLARE_MEMBER)
#undef HMR_MLX5DV_DECLARE_MEMBER
};

class Mlx5dvLibrary {
 public:
  // dlopen's libmlx5.so.1 (or HMR_MLX5_LIBRARY); HMR_ENOSYS with the path and dlerror(), or the
  // first missing symbol, when it cannot.
  static Result<std::shared_ptr<const Mlx5dvLibrary>> load();

  const Mlx5dvSymbols& symbols() const { return symbols_; }
  const std::string& path() const { return table_.path(); }

  explicit Mlx5dvLibrary(hmem::SymbolTable table);

 private:
  hmem::SymbolTable table_;
  Mlx5dvSymbols symbols_;
};

}  // namespace hmr::verbs
