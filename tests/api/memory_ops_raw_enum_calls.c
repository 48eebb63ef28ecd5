/* The memory-operation calls with values outside their enum's range, as a C caller may pass
 * them.  In C an enum parameter takes any value of its integer type; forming such a value in
 * C++ is undefined behaviour (UBSan's enum check trips), so the C++ tests call through here. */
#include "memory_ops_raw_enum_calls.h"

int raw_mw_alloc(hmr_domain *domain, int type, hmr_mw **mw) {
	return hmr_mw_alloc(domain, (enum hmr_mw_type)type, mw);
}

int raw_mem_advise(hmr_mr *mr, const void *addr, size_t len, int advice) {
	return hmr_mem_advise(mr, addr, len, (enum hmr_mem_advice)advice);
}

int raw_md_query_op(hmr_domain *domain, int op, char *reason, size_t reason_size) {
	return hmr_md_query_op(domain, (enum hmr_md_op)op, reason, reason_size);
}
