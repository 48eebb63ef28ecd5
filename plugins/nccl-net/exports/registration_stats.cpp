// Not part of NCCL's ABI (NCCL never looks it up): hmr's registration statistics per device,
// so a test or a diagnostic tool that loaded the plugin can see what reached the NIC.
#include <hmr/hmr.h>

#include "../net/net_api.h"

extern "C" __attribute__((visibility("default"))) int hmr_nccl_net_query_stats(
    int dev, struct hmr_domain_stats* stats) {
  return hmr::nccl::api::query_stats(dev, stats);
}
