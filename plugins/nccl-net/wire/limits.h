// Bounds the plugin's peer-facing formats share, from NCCL's ABI and the providers' needs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hmr::nccl {

// Receives a recv comm may have posted at once (NCCL_NET_MAX_REQUESTS) and buffers in one
// grouped receive (the properties' maxRecvs).
inline constexpr size_t kMaxRequests = 32;
inline constexpr size_t kMaxRecvs = 8;
// Largest message: 1 TiB - 1, NCCL's own ceiling for maxP2pBytes; a message of 1 MiB or more
// is written as a head counted in MiB and a tail (wire/write_completion.h).
inline constexpr uint64_t kMaxMessageSize = (uint64_t{1} << 40) - 1;
// Largest message sent eagerly (HMR_NCCL_EAGER_MAX's ceiling: the receiver keeps bounce buffers
// of that size posted), and the most eager messages of one tag a receiver may be asked to hold.
inline constexpr uint32_t kMaxEagerSize = 65536;
inline constexpr uint32_t kMaxEagerCredits = 256;
// Largest fabric address a control message carries (tcp: 16 or 28 bytes; shm: a short name).
inline constexpr size_t kMaxFabricAddress = 256;

}  // namespace hmr::nccl
