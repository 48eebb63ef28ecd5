// The mapped memory behind a requested CUDA range, which may be several VMM segments.
//
// With the VMM API (cuMemAddressReserve + cuMemCreate + cuMemMap, as PyTorch's expandable
// segments use it) one reserved address range holds separately created physical segments
// mapped back to back, and cuMemGetAddressRange answers for one segment only.  A registration
// of a range that crosses segments must cover all of them, and must never cover a hole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/cuda_symbols.h"
#include "hmem/iface.h"
#include "util/status.h"

namespace hmr::cuda {

// How a segment (one cuMemAlloc allocation, or one mapping of a VMM reservation) is found:
//   attributes:    cuPointerGetAttributes(RANGE_START_ADDR, RANGE_SIZE, MAPPING_BASE_ADDR,
//                  MAPPING_SIZE, MEMPOOL_HANDLE), the allocation or reservation cut to the
//                  mapping that holds the address.  Needs no context: on an H100 (driver 580)
//                  the range is the exact allocation and the mapping its 2 MiB-rounded
//                  physical backing for cuMemAlloc memory, the reservation and the one segment
//                  for VMM memory.  Pool memory (cuMemAllocAsync) is the exception: its mapping
//                  is the pool's 32 MiB chunk, so its segment is the range alone.
//   address_range: cuMemGetAddressRange, for drivers without the mapping attributes (they
//                  refuse them with CUDA_ERROR_INVALID_VALUE); needs a current context.
enum class SegmentLookup { attributes, address_range };
// The driver call a lookup makes, for reasons.
const char* lookup_name(SegmentLookup lookup);

// The segment holding `address`, by `lookup`: the driver's own result, so a caller can tell
// CUDA_ERROR_INVALID_VALUE (no mapping attributes) from a hole (CUDA_ERROR_NOT_FOUND).
CUresult segment_at(const CudaSymbols& symbols, SegmentLookup lookup, CUdeviceptr address,
                    CUdeviceptr* base, size_t* size);

// What the driver says about the segment that holds the start of the range.
struct FirstSegment {
  CUdeviceptr base = 0;  // from segment_at
  size_t size = 0;
  unsigned int memory_type = 0;
  bool managed = false;
  int ordinal = -1;
  unsigned long long buffer_id = 0;
};

// The whole segments that together hold the requested range.
struct MappedRange {
  CUdeviceptr base = 0;
  size_t length = 0;
  // The first segment's BUFFER_ID when one segment holds the range; otherwise a mix of every
  // segment's BUFFER_ID in address order.  The driver gives each mapping its own id and never
  // reuses one, so unmapping and remapping any segment of the range changes this identity.
  uint64_t alloc_id = 0;
  size_t segments = 0;
  // Each segment with its own BUFFER_ID, when there are several (PointerInfo::pieces).
  std::vector<hmem::PointerInfo::Piece> pieces;
};

// Walks from `first` to the next address after each segment's end until [address, +len) is
// covered.  Every segment must be mapped, in the same reservation, on the same device and of
// the same memory type; an unmapped hole fails with HMR_EFAULT, anything else that breaks the
// range with HMR_EINVAL, each with the address and why.
Result<MappedRange> cover_requested_range(const CudaSymbols& symbols, SegmentLookup lookup,
                                          uintptr_t address, size_t len,
                                          const FirstSegment& first);

}  // namespace hmr::cuda
