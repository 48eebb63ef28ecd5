// The verbs adapter's nic_options: "name=value" pairs separated by ';'.
//   device=<name>                 the RDMA device to open (default: the first one listed);
//                                 not allowed with a nic_handle, whose PD names the device
//   odp=on|off                    register with on-demand paging (IBV_ACCESS_ON_DEMAND); the
//                                 device must support it for the transports RC needs
//   relaxed_ordering=auto|on|off  PCIe relaxed ordering (IBV_ACCESS_RELAXED_ORDERING): auto
//                                 and on use it where libibverbs can pass it (ibv_reg_mr_iova2);
//                                 on fails where it cannot
//   raw_keys=on|off               16-byte RAW keys (the domain needs HMR_MR_RAW) that carry up to
//                                 3 chunk keys, so ranges above max_mr_size can be reached remotely
//   fork=auto|init|off            what hmr does about fork and pinned pages (fork_protection.h)
#pragma once

#include <string>

#include "nic/verbs/fork_protection.h"
#include "util/status.h"

namespace hmr::verbs {

enum class Tristate { off, on, automatic };

struct VerbsOptions {
  std::string device;
  bool odp = false;
  Tristate relaxed_ordering = Tristate::automatic;
  bool raw_keys = false;
  ForkPolicy fork = ForkPolicy::automatic;
};

Result<VerbsOptions> parse_verbs_options(const char* text);

}  // namespace hmr::verbs
