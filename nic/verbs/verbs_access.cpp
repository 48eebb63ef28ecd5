#include "nic/verbs/verbs_access.h"

#include <hmr/hmr.h>

#include "nic/verbs/verbs_abi.h"

namespace hmr::verbs {

unsigned int ibv_access_for(uint64_t hmr_access, const AccessExtras& extras) {
  unsigned int access = 0;
  if (hmr_access & (HMR_READ | HMR_RECV | HMR_REMOTE_WRITE)) access |= IBV_ACCESS_LOCAL_WRITE;
  if (hmr_access & HMR_REMOTE_WRITE) access |= IBV_ACCESS_REMOTE_WRITE;
  // On iWARP an RDMA Read's response is a tagged write into the reader's buffer (RFC 5040),
  // so the buffer a Read lands in must allow remote writes; libfabric's verbs provider adds
  // the bit the same way.
  if (extras.iwarp && (hmr_access & HMR_READ)) access |= IBV_ACCESS_REMOTE_WRITE;
  if (hmr_access & HMR_REMOTE_READ) access |= IBV_ACCESS_REMOTE_READ;
  // hmr's fetch-add needs both remote bits at the target, so both mean "atomics too".
  if (extras.atomics && (hmr_access & HMR_REMOTE_READ) && (hmr_access & HMR_REMOTE_WRITE)) {
    access |= IBV_ACCESS_REMOTE_ATOMIC;
  }
  if (hmr_access & HMR_MW_BIND) access |= IBV_ACCESS_MW_BIND;
  if (extras.on_demand_paging) access |= IBV_ACCESS_ON_DEMAND;
  if (extras.relaxed_ordering) access |= IBV_ACCESS_RELAXED_ORDERING;
  return access;
}

unsigned int ibv_window_access_for(uint64_t hmr_access) {
  unsigned int access = 0;
  if (hmr_access & HMR_REMOTE_WRITE) access |= IBV_ACCESS_REMOTE_WRITE;
  if (hmr_access & HMR_REMOTE_READ) access |= IBV_ACCESS_REMOTE_READ;
  return access;
}

}  // namespace hmr::verbs
