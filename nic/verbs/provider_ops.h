// The verbs that rdma-core offers as static inlines over the provider's ops tables rather than as
// exported functions (ibv_query_device_ex, ibv_advise_mr, ibv_alloc_mw, ibv_dealloc_mw,
// ibv_bind_mw, ibv_post_send).  hmr has no rdma-core header to inline them from, so these do
// what those inlines do, with one difference: an entry a provider left empty gives EOPNOTSUPP
// instead of a call through a null pointer.
//
// Return conventions are the verbs' own: 0 or an errno value, or null with errno set.
#pragma once

#include "nic/verbs/verbs_abi.h"
#include "nic/verbs/verbs_symbols.h"

namespace hmr::verbs {

// The extended context a provider built `context` in, or null for a legacy provider.
verbs_context* extended_context(ibv_context* context);

// Fills `attr`; falls back to ibv_query_device (orig_attr only, the rest zero) when the provider
// has no query_device_ex or answers EOPNOTSUPP/ENOSYS.  `extended` says which one answered.
int query_device_ex(const IbverbsSymbols& symbols, ibv_context* context, ibv_device_attr_ex* attr,
                    bool* extended);

int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge);

// Whether the provider of `pd` implements ibv_advise_mr.
bool advise_available(ibv_pd* pd);

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
// Type 1 windows only, as ibv_bind_mw.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);

// The context a QP was created in (the first member of every provider's QP).
ibv_context* qp_context(ibv_qp* qp);

}  // namespace hmr::verbs
