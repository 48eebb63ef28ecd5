// The plugin's environment variables (docs/environment.md, "NCCL net plugin"), read once at the
// first init().  A value that does not parse fails init with the variable named.
#pragma once

#include <optional>
#include <string>

#include "nic_selection.h"

namespace hmr::nccl {

struct Settings {
  std::string provider;            // HMR_NCCL_PROVIDER; empty: the default order
  // HMR_NCCL_IFNAME (NCCL_SOCKET_IFNAME's syntax); unset: lo and docker excluded where
  // anything else is left (nic_selection.h).
  std::optional<InterfaceFilter> interfaces;
  // HMR_NCCL_CONNECT_TIMEOUT (seconds, may be fractional); 0, the default: no deadline.
  // NCCL calls connect until it returns a comm and its own transports set no deadline: the
  // listener accepts only when its rank reaches the connection, which with NCCL's runtime
  // connect (2.22 and later) may be at its first collective, any time later.
  int connect_timeout_ms = 0;
  int write_timeout_ms = 60000;    // HMR_NCCL_WRITE_TIMEOUT (seconds, may be fractional)
  // HMR_NCCL_FORCE_FLUSH: NCCL is told forceFlush=1, so it calls iflush after receives into
  // memory the NIC wrote directly (NCCL 2.28 on sm90 and later calls it only then).
  bool force_flush = false;
  // HMR_NCCL_TEST_FLUSH_HOST_MEMORY: for tests. iflush reads back through the NIC for host
  // memory too (which never needs it), so the read-back runs where no GPU is.
  bool flush_host_memory = false;
  // HMR_NCCL_EAGER_MAX: messages up to this many bytes move without waiting for the receiver's
  // announcement (net/eager.h); 0 turns that off. Both ends use the smaller of their two.
  uint32_t eager_max = 8192;
  // HMR_NCCL_TEST_EAGER_THROUGH_NIC: for tests. Eager messages reach host buffers by an RMA
  // write through the NIC, as they must reach device memory, instead of a copy.
  bool eager_through_nic = false;
  // HMR_NCCL_TEST_REORDER_ANNOUNCEMENTS: fault injection for tests. Each recv comm sends
  // every other receive announcement or eager credit after the one that follows it, and each
  // send comm every other eager message, as a fabric that does not order messages (EFA's
  // SRD) may deliver them (the plugin must not depend on the order).
  bool reorder_announcements = false;
  // HMR_NCCL_CHECK_LANDED: for diagnosis (slow). Each recv comm keeps a copy of every
  // completed receive into host memory and warns when the bytes changed before NCCL posted the
  // buffer again (net/landed_bytes_check.h).
  bool check_landed = false;
  // HMR_NCCL_TEST_FLUSH_EAGAIN=N: fault injection for tests. The first N attempts to post
  // each iflush's read-back act as if the provider said -FI_EAGAIN.
  int flush_eagain = 0;
};

std::optional<Settings> read_settings(std::string* why);

// libfabric defaults that suit the plugin, set in the environment before libfabric first reads
// it and only where the user has not set them (docs/nccl-plugin.md): ofi_rxm, which layers
// RDM endpoints over tcp and verbs, otherwise preposts 4096 bounce buffers of 16 KiB per
// connection and clears them (~0.3 s per comm), where the plugin only sends small control
// messages through them (its data moves by RMA).  Only the count: the buffer size is the
// eager limit, which rxm requires to be equal on both ends of a connection (it refuses the
// connection otherwise), so it must not depend on whether this process set it first.
void apply_libfabric_defaults();

}  // namespace hmr::nccl
