/* Calls that pass values outside an enum's range, as a C caller may.  In C an enum parameter
 * takes any value of its integer type; doing the same from C++ would be undefined behaviour
 * (and UBSan says so), so the bad-argument tests make these calls through here. */
#include <hmr/hmr.h>

#include "raw_enum_calls.h"

int raw_mem_alloc(int iface, uint64_t device, size_t len, int kind, void **ptr) {
	return hmr_mem_alloc((enum hmr_hmem_iface)iface, device, len, (enum hmr_mem_kind)kind, ptr);
}

int raw_mem_free(int iface, void *ptr) {
	return hmr_mem_free((enum hmr_hmem_iface)iface, ptr);
}
