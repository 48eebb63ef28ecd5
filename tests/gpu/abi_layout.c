/* Prints the sizes and field offsets of the hmr.h structs that tests/gpu/hmr_ctypes.py mirrors,
 * in the format of `hmr_ctypes.py --layout`; the ctest hmr_ctypes_layout compares the two, so
 * the Python mirrors cannot drift from the header unnoticed. */
#include <hmr/hmr.h>
#include <stddef.h>
#include <stdio.h>

#define SIZE(type) printf(#type " size %zu\n", sizeof(struct type))
#define FIELD(type, field) printf(#type "." #field " %zu\n", offsetof(struct type, field))

int main(void) {
  /* In the order the Python side prints: structs by name, fields as declared. */
  SIZE(hmr_domain_attr);
  FIELD(hmr_domain_attr, size);
  FIELD(hmr_domain_attr, nic);
  FIELD(hmr_domain_attr, nic_options);
  FIELD(hmr_domain_attr, mr_mode);
  FIELD(hmr_domain_attr, mr_key_size);
  FIELD(hmr_domain_attr, mr_iov_limit);
  FIELD(hmr_domain_attr, mr_cnt);
  FIELD(hmr_domain_attr, threading);
  FIELD(hmr_domain_attr, cache_max_count);
  FIELD(hmr_domain_attr, cache_max_size);
  FIELD(hmr_domain_attr, cache_monitor);
  FIELD(hmr_domain_attr, nic_handle);
  FIELD(hmr_domain_attr, flags);
  SIZE(hmr_domain_stats);
  FIELD(hmr_domain_stats, size);
  FIELD(hmr_domain_stats, mr_open);
  FIELD(hmr_domain_stats, mr_bytes);
  FIELD(hmr_domain_stats, registrations);
  FIELD(hmr_domain_stats, registration_errors);
  FIELD(hmr_domain_stats, nic_registrations);
  FIELD(hmr_domain_stats, nic_deregistrations);
  FIELD(hmr_domain_stats, registration_ns);
  FIELD(hmr_domain_stats, rma_ops);
  FIELD(hmr_domain_stats, rma_bytes);
  FIELD(hmr_domain_stats, rma_errors);
  FIELD(hmr_domain_stats, cache_hits);
  FIELD(hmr_domain_stats, cache_misses);
  FIELD(hmr_domain_stats, cache_invalidations);
  FIELD(hmr_domain_stats, cache_evictions);
  FIELD(hmr_domain_stats, cache_uncached);
  FIELD(hmr_domain_stats, cache_regions);
  FIELD(hmr_domain_stats, cache_bytes);
  FIELD(hmr_domain_stats, cache_in_use);
  FIELD(hmr_domain_stats, deregistration_ns);
  FIELD(hmr_domain_stats, cache_pressure_evictions);
  FIELD(hmr_domain_stats, nic_refusal_retries);
  FIELD(hmr_domain_stats, nic_refusals);
  FIELD(hmr_domain_stats, nic_registrations_held);
  FIELD(hmr_domain_stats, nic_pinned_bytes);
  SIZE(hmr_mem_attr);
  FIELD(hmr_mem_attr, size);
  FIELD(hmr_mem_attr, field_mask);
  FIELD(hmr_mem_attr, iface);
  FIELD(hmr_mem_attr, kind);
  FIELD(hmr_mem_attr, device);
  FIELD(hmr_mem_attr, base);
  FIELD(hmr_mem_attr, alloc_len);
  FIELD(hmr_mem_attr, alloc_id);
  FIELD(hmr_mem_attr, sys_dev);
  FIELD(hmr_mem_attr, numa_node);
  FIELD(hmr_mem_attr, dmabuf_fd);
  FIELD(hmr_mem_attr, dmabuf_offset);
  SIZE(hmr_mr_info);
  FIELD(hmr_mr_info, size);
  FIELD(hmr_mr_info, iface);
  FIELD(hmr_mr_info, kind);
  FIELD(hmr_mr_info, device);
  FIELD(hmr_mr_info, path);
  FIELD(hmr_mr_info, cached);
  FIELD(hmr_mr_info, dmabuf_fd);
  FIELD(hmr_mr_info, dmabuf_offset);
  FIELD(hmr_mr_info, shadow);
  return 0;
}
