// What a completion's context points to: every operation the plugin posts is one of these, so
// a comm's progress loop knows what finished without a lookup.
#pragma once

#include <cstdint>

#include "../fabric/endpoint.h"

namespace hmr::nccl {

enum class OperationKind : uint8_t {
  control_receive,  // a control-message buffer posted for receiving
  control_send,     // a control message being sent
  data_write,       // a message's RMA write into the peer's announced buffer
  eager_send,       // a message sent eagerly into the peer's bounce buffers (net/eager.h)
  eager_copy,       // an eager message's RMA write from a bounce buffer into its receive
  flush_read,       // iflush's read-back through the NIC
};

struct Operation : OperationContext {
  OperationKind kind = OperationKind::control_receive;
  void* owner = nullptr;  // the control slot's channel or the request
  uint32_t index = 0;     // which control slot
  // On a shared endpoint (net/shared_endpoint.h), the port of the comm that posted it, whose
  // poll its completion goes to; 0 on an endpoint of the comm's own, and for the shared
  // endpoint's own receive buffers.
  uint64_t port = 0;
};

}  // namespace hmr::nccl
