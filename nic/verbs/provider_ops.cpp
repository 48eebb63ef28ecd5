#include "nic/verbs/provider_ops.h"

#include <cerrno>
#include <cstring>

namespace hmr::verbs {
namespace {

// The extended context when the provider's verbs_context reaches the member at `offset`: it
// grows towards lower addresses, and `sz` counts from its oldest member to the end, so an older
// provider's is shorter and lacks the newest members.
verbs_context* context_reaching(ibv_context* context, size_t offset) {
  verbs_context* extended = extended_context(context);
  if (extended == nullptr || extended->sz < sizeof(verbs_context) - offset) return nullptr;
  return extended;
}

}  // namespace

verbs_context* extended_context(ibv_context* context) {
  if (context->abi_compat != HMR_VERBS_ABI_IS_EXTENDED) return nullptr;
  auto* bytes = reinterpret_cast<unsigned char*>(context);
  return reinterpret_cast<verbs_context*>(bytes - offsetof(verbs_context, context));
}

int query_device_ex(const IbverbsSymbols& symbols, ibv_context* context, ibv_device_attr_ex* attr,
                    bool* extended) {
  verbs_context* vctx = context_reaching(context, offsetof(verbs_context, query_device_ex));
  *extended = false;
  if (vctx != nullptr && vctx->query_device_ex != nullptr) {
    const int result = vctx->query_device_ex(context, nullptr, attr, sizeof(*attr));
    if (result != EOPNOTSUPP && result != ENOSYS) {
      *extended = result == 0;
      return result;
    }
  }
  std::memset(attr, 0, sizeof(*attr));
  return symbols.query_device(context, &attr->orig_attr);
}

int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  verbs_context* vctx = context_reaching(pd->context, offsetof(verbs_context, advise_mr));
  if (vctx == nullptr || vctx->advise_mr == nullptr) return EOPNOTSUPP;
  return vctx->advise_mr(pd, advice, flags, sg_list, num_sge);
}

bool advise_available(ibv_pd* pd) {
  verbs_context* vctx = context_reaching(pd->context, offsetof(verbs_context, advise_mr));
  return vctx != nullptr && vctx->advise_mr != nullptr;
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (pd->context->ops.alloc_mw == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return pd->context->ops.alloc_mw(pd, type);
}

int dealloc_mw(ibv_mw* mw) {
  if (mw->context->ops.dealloc_mw == nullptr) return EOPNOTSUPP;
  return mw->context->ops.dealloc_mw(mw);
}

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  const ibv_mw_bind_info& info = mw_bind->bind_info;
  if (mw->type != IBV_MW_TYPE_1) return EINVAL;
  if (info.mr == nullptr && (info.addr != 0 || info.length != 0)) return EINVAL;
  if (info.mr != nullptr && info.mr->pd != mw->pd) return EPERM;
  if (mw->context->ops.bind_mw == nullptr) return EOPNOTSUPP;
  return mw->context->ops.bind_mw(qp, mw, mw_bind);
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  ibv_context* context = qp_context(qp);
  if (context->ops.post_send == nullptr) return EOPNOTSUPP;
  return context->ops.post_send(qp, wr, bad_wr);
}

ibv_context* qp_context(ibv_qp* qp) { return reinterpret_cast<hmr_ibv_qp_head*>(qp)->context; }

}  // namespace hmr::verbs
