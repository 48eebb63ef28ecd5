/* See raw_enum_calls.c. */
#ifndef HMR_TESTS_HMEM_API_RAW_ENUM_CALLS_H
#define HMR_TESTS_HMEM_API_RAW_ENUM_CALLS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int raw_mem_alloc(int iface, uint64_t device, size_t len, int kind, void **ptr);
int raw_mem_free(int iface, void *ptr);

#ifdef __cplusplus
}
#endif

#endif
