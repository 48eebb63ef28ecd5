/* See memory_ops_raw_enum_calls.c. */
#ifndef HMR_TESTS_API_MEMORY_OPS_RAW_ENUM_CALLS_H
#define HMR_TESTS_API_MEMORY_OPS_RAW_ENUM_CALLS_H

#include <hmr/hmr.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int raw_mw_alloc(hmr_domain *domain, int type, hmr_mw **mw);
int raw_mem_advise(hmr_mr *mr, const void *addr, size_t len, int advice);
int raw_md_query_op(hmr_domain *domain, int op, char *reason, size_t reason_size);

#ifdef __cplusplus
}
#endif

#endif
