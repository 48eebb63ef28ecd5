// What the kernel and this process's limits say about RDMA, before any NIC is opened: the
// kernel version, the RDMA core modules, the devices registered in sysfs, and
// RLIMIT_MEMLOCK (registrations pin memory and count against it).
#pragma once

#include <string>

#include "json_value.h"

namespace hmr::info {

struct KernelVersion {
  std::string release;  // uname -r
  int major = 0;
  int minor = 0;
};

KernelVersion kernel_version();
// {"release", "version", "machine"}
JsonValue kernel_json();

// {"ib_core", "ib_uverbs", "evidence"}: whether the RDMA core and its user-space interface are
// in the kernel, from /sys/module and /sys/class/infiniband_verbs.
JsonValue rdma_modules_json();

// {"path", "entries": [...], "reason"}: the RDMA devices the kernel registered.
JsonValue infiniband_sysfs_json();

// {"soft", "hard" (bytes, or "unlimited"), "cap_ipc_lock", "reason"}.
JsonValue memlock_json();

}  // namespace hmr::info
