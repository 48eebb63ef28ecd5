// libibverbs as hmr uses it: the exported entry points, dlopen'ed from libibverbs.so.1 (never
// linked) through hmem::SymbolTable under the vendor name "IBVERBS", so HMR_IBVERBS_LIBRARY
// overrides the path.
//
// Every symbol is looked up at the version whose ABI hmr declares (verbs_abi.h): libibverbs
// keeps an IBVERBS_1.0 ABI of the same names with other struct layouts.  ibv_reg_mr_iova2
// (IBVERBS_1.8, rdma-core 28) and ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34) are optional:
// without them hmr registers through ibv_reg_mr and reports dma-buf import as unsupported.
// The completion-queue and queue-pair verbs are optional too: only the UMR queue that fills
// indirect keys needs them (ibv_qp_to_qp_ex is IBVERBS_1.6, rdma-core 24), and without them the
// adapter reports indirect keys as unavailable, naming the one missing.  ibv_is_fork_initialized
// (IBVERBS_1.13, rdma-core 35) is optional: fork_protection.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "hmem/symbol_table.h"
#include "nic/verbs/verbs_abi.h"
#include "nic/verbs/verbs_qp_abi.h"

namespace hmr::verbs {

inline constexpr const char* kIbverbsVendor = "IBVERBS";
inline constexpr const char* kIbverbsSoname = "libibverbs.so.1";

// X(member, symbol, version, required|optional, return type, parameter list)
#define HMR_IBVERBS_SYMBOLS(X)                                                                  \
  X(get_device_list, "ibv_get_device_list", "IBVERBS_1.1", required, ibv_device**,            \
    (int* num_devices))                                                                        \
  X(free_device_list, "ibv_free_device_list", "IBVERBS_1.1", required, void,                   \
    (ibv_device** list))                                                                       \
  X(get_device_name, "ibv_get_device_name", "IBVERBS_1.1", required, const char*,              \
    (ibv_device* device))                                                                      \
  X(open_device, "ibv_open_device", "IBVERBS_1.1", required, ibv_context*,                    \
    (ibv_device* device))                                                                      \
  X(close_device, "ibv_close_device", "IBVERBS_1.1", required, int, (ibv_context* context))   \
  X(query_device, "ibv_query_device", "IBVERBS_1.1", required, int,                            \
    (ibv_context* context, ibv_device_attr* attr))                                             \
  X(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1", required, ibv_pd*, (ibv_context* context))       \
  X(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1", required, int, (ibv_pd* pd))                  \
  X(reg_mr, "ibv_reg_mr", "IBVERBS_1.1", required, ibv_mr*,                                    \
    (ibv_pd* pd, void* addr, size_t length, int access))                                       \
  X(rereg_mr, "ibv_rereg_mr", "IBVERBS_1.1", required, int,                                    \
    (ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access))                \
  X(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1", required, int, (ibv_mr* mr))                      \
  X(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8", optional, ibv_mr*,                        \
    (ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access))               \
  X(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", optional, ibv_mr*,                     \
    (ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access))            \
  X(create_cq, "ibv_create_cq", "IBVERBS_1.1", optional, ibv_cq*,                              \
    (ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,               \
     int comp_vector))                                                                         \
  X(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1", optional, int, (ibv_cq* cq))                  \
  X(modify_qp, "ibv_modify_qp", "IBVERBS_1.1", optional, int,                                  \
    (ibv_qp* qp, ibv_qp_attr* attr, int attr_mask))                                            \
  X(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1", optional, int, (ibv_qp* qp))                  \
  X(query_port, "ibv_query_port", "IBVERBS_1.1", optional, int,                                \
    (ibv_context* context, uint8_t port_num, ibv_port_attr* attr))                             \
  X(query_gid, "ibv_query_gid", "IBVERBS_1.1", optional, int,                                  \
    (ibv_context* context, uint8_t port_num, int index, ibv_gid* gid))                         \
  X(qp_to_qp_ex, "ibv_qp_to_qp_ex", "IBVERBS_1.6", optional, ibv_qp_ex*, (ibv_qp* qp))        \
  X(fork_init, "ibv_fork_init", "IBVERBS_1.1", required, int, ())                                \
  X(is_fork_initialized, "ibv_is_fork_initialized", "IBVERBS_1.13", optional,                  \
    ibv_fork_status, ())

// The resolved entry points; null only for an optional symbol the library lacks.
struct IbverbsSymbols {
#define HMR_IBVERBS_DECLARE_MEMBER(member, symbol, version, need, result, params) \
  result(*member) params = nullptr;
  HMR_IBVERBS_SYMBOLS(HMR_IBVERBS_DECLARE_MEMBER)
#undef HMR_IBVERBS_DECLARE_MEMBER
};

// The specs in X-macro order, for hmem::SymbolTable::load.
std::span<const hmem::SymbolSpec> ibverbs_symbol_specs();

// Fills `symbols` from a table loaded with ibverbs_symbol_specs().
void bind_ibverbs_symbols(const hmem::SymbolTable& table, IbverbsSymbols& symbols);

}  // namespace hmr::verbs
