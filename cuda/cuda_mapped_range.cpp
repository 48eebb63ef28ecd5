#include "cuda/cuda_mapped_range.h"

#include <algorithm>

#include "cuda/cuda_error.h"

namespace hmr::cuda {
namespace {

// splitmix64's finaliser: a cheap mix in which every input bit moves every output bit.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

uint64_t combine(uint64_t identity, unsigned long long buffer_id) {
  return mix(identity ^ mix(buffer_id));
}

struct Reservation {
  CUdeviceptr start = 0;
  size_t size = 0;
};

Result<Reservation> reservation_of(const CudaSymbols& symbols, uintptr_t address) {
  Reservation reservation;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&reservation.start, &reservation.size};
  const CUresult result = symbols.cuPointerGetAttributes(2, attributes, data, address);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result),
                      "cuPointerGetAttributes(RANGE_START_ADDR, RANGE_SIZE) of 0x%llx failed: %s",
                      static_cast<unsigned long long>(address),
                      describe_cuda_error(symbols, result).c_str());
  }
  return reservation;
}

// One walk over the segments of a requested range.
struct Walk {
  const CudaSymbols& symbols;
  SegmentLookup lookup;
  uintptr_t address;  // the requested range, for reasons
  size_t len;
  const FirstSegment& first;
  Reservation reservation;
  uint64_t identity;
  std::vector<hmem::PointerInfo::Piece>& pieces;
};

// The end of the segment at `cursor`, which must start there and continue the first one.
Result<CUdeviceptr> next_segment_end(Walk& walk, CUdeviceptr cursor) {
  const CudaSymbols& symbols = walk.symbols;
  const FirstSegment& first = walk.first;
  const Reservation& reservation = walk.reservation;
  unsigned int memory_type = 0;
  int ordinal = -1;
  unsigned long long buffer_id = 0;
  unsigned int managed = 0;  // bools in the driver; zeroed so any width reads right
  unsigned int mapped = 0;
  CUdeviceptr range_start = 0;
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_BUFFER_ID,   CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_MAPPED,      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  void* data[] = {&memory_type, &ordinal, &buffer_id, &managed, &mapped, &range_start};
  CUresult result = symbols.cuPointerGetAttributes(6, attributes, data, cursor);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result), "cuPointerGetAttributes(0x%llx) failed: %s", cursor,
                      describe_cuda_error(symbols, result).c_str());
  }
  if (mapped == 0 || memory_type == 0) {
    return make_error(HMR_EFAULT,
                      "0x%llx, inside [0x%llx, +%zu), is not mapped: the cuda VMM reservation "
                      "[0x%llx, +%zu) has a hole there, and a registration cannot cover unmapped "
                      "memory",
                      cursor, static_cast<unsigned long long>(walk.address), walk.len,
                      reservation.start, reservation.size);
  }
  if (range_start != reservation.start) {
    return make_error(HMR_EINVAL,
                      "0x%llx belongs to another cuda reservation (starting at 0x%llx, not "
                      "0x%llx): one registration cannot span two",
                      cursor, range_start, reservation.start);
  }
  if (ordinal != first.ordinal) {
    return make_error(HMR_EINVAL,
                      "the segment at 0x%llx is memory of cuda device %d, but the range starts "
                      "on device %d: one registration cannot span two devices",
                      cursor, ordinal, first.ordinal);
  }
  if (memory_type != first.memory_type || (managed != 0) != first.managed) {
    return make_error(HMR_EINVAL,
                      "the segment at 0x%llx is cuda memory of another kind (type %u%s) than "
                      "the start of the range (type %u%s)",
                      cursor, memory_type, managed != 0 ? ", managed" : "", first.memory_type,
                      first.managed ? ", managed" : "");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  result = segment_at(symbols, walk.lookup, cursor, &base, &size);
  if (result != CUDA_SUCCESS) {
    return make_error(hmr_code_for(result), "%s of 0x%llx failed: %s", lookup_name(walk.lookup),
                      cursor, describe_cuda_error(symbols, result).c_str());
  }
  if (base != cursor || size == 0) {
    // The loop relies on progress; a driver answer that does not advance is a driver fault.
    return make_error(HMR_EIO,
                      "%s of 0x%llx gave the segment [0x%llx, +%zu), which does not start where "
                      "the previous segment ended",
                      lookup_name(walk.lookup), cursor, base, size);
  }
  walk.identity = combine(walk.identity, buffer_id);
  walk.pieces.push_back({base, size, buffer_id});
  return base + size;
}

}  // namespace

const char* lookup_name(SegmentLookup lookup) {
  return lookup == SegmentLookup::attributes
             ? "cuPointerGetAttributes(RANGE_START_ADDR, RANGE_SIZE, MAPPING_BASE_ADDR, "
               "MAPPING_SIZE)"
             : "cuMemGetAddressRange";
}

CUresult segment_at(const CudaSymbols& symbols, SegmentLookup lookup, CUdeviceptr address,
                    CUdeviceptr* base, size_t* size) {
  if (lookup == SegmentLookup::address_range) {
    return symbols.cuMemGetAddressRange(base, size, address);
  }
  CUdeviceptr range_start = 0;
  size_t range_size = 0;
  CUdeviceptr mapping_base = 0;
  size_t mapping_size = 0;
  void* pool = nullptr;
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
      CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
      CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  void* data[] = {&range_start, &range_size, &mapping_base, &mapping_size, &pool};
  const CUresult result = symbols.cuPointerGetAttributes(5, attributes, data, address);
  if (result != CUDA_SUCCESS) return result;
  uint64_t start = std::max<uint64_t>(range_start, mapping_base);
  uint64_t end = std::min<uint64_t>(range_start + range_size, mapping_base + mapping_size);
  if (pool != nullptr && mapping_size != 0) {
    // Stream-ordered pool memory (cuMemAllocAsync): the mapping is the pool's chunk (32 MiB on
    // driver 580), which an allocation may straddle; the range is the allocation itself.
    start = range_start;
    end = range_start + range_size;
  }
  // An unmapped address inside a reservation has no mapping: a hole, as cuMemGetAddressRange
  // says it (CUDA_ERROR_NOT_FOUND).
  if (mapping_size == 0 || range_size == 0 || start > address || end <= address) {
    return CUDA_ERROR_NOT_FOUND;
  }
  *base = start;
  *size = static_cast<size_t>(end - start);
  return CUDA_SUCCESS;
}

Result<MappedRange> cover_requested_range(const CudaSymbols& symbols, SegmentLookup lookup,
                                          uintptr_t address, size_t len,
                                          const FirstSegment& first) {
  const uint64_t end = static_cast<uint64_t>(address) + len;
  if (address < first.base) {
    return make_error(HMR_EIO, "%s of 0x%llx gave [0x%llx, +%zu), which does not hold the "
                      "address", lookup_name(lookup), static_cast<unsigned long long>(address),
                      first.base, first.size);
  }
  if (end <= first.base + first.size) {
    return MappedRange{first.base, first.size, first.buffer_id, 1, {}};
  }

  // Only VMM memory continues past its segment, and only inside its own reservation; for a
  // cuMemAlloc allocation the reservation is the allocation itself.
  Result<Reservation> reservation = reservation_of(symbols, address);
  if (!reservation.ok()) return reservation.status();
  if (reservation->start > address || reservation->start + reservation->size < end) {
    const bool plain = reservation->start == first.base && reservation->size == first.size;
    return make_error(HMR_EINVAL,
                      "[0x%llx, +%zu) is not inside one CUDA allocation: device %d %s is "
                      "[0x%llx, +%zu)",
                      static_cast<unsigned long long>(address), len, first.ordinal,
                      plain ? "allocation" : "VMM reservation",
                      plain ? first.base : reservation->start,
                      plain ? first.size : reservation->size);
  }

  MappedRange range;
  range.pieces.push_back({first.base, first.size, first.buffer_id});
  Walk walk{symbols, lookup, address, len, first, *reservation, mix(first.buffer_id),
            range.pieces};
  CUdeviceptr cursor = first.base + first.size;
  while (cursor < end) {
    Result<CUdeviceptr> next = next_segment_end(walk, cursor);
    if (!next.ok()) return next.status();
    cursor = *next;
  }
  range.base = first.base;
  range.length = static_cast<size_t>(cursor - first.base);
  // 0 reads as "no identity" elsewhere; a mix landing there is merely moved.
  range.alloc_id = walk.identity != 0 ? walk.identity : 1;
  range.segments = range.pieces.size();
  return range;
}

}  // namespace hmr::cuda
