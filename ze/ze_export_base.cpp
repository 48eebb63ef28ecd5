#include "ze/ze_export_base.h"

#include "ze/ze_error.h"

namespace hmr::ze {
namespace {

// Whether `address` belongs to the allocation data of id `id` (type known, same id).
Result<bool> same_allocation(const ZeSymbols& symbols, ze_context_handle_t context,
                             uintptr_t address, uint64_t id) {
  ze_memory_allocation_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
  const ze_result_t result = symbols.zeMemGetAllocProperties(
      context, reinterpret_cast<const void*>(address), &properties, nullptr);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeMemGetAllocProperties(0x%zx), looking for the "
                      "start of a pooled allocation's buffer, failed: %s",
                      static_cast<size_t>(address), describe_ze_result(result).c_str());
  }
  return properties.type != ZE_MEMORY_TYPE_UNKNOWN && properties.id == id;
}

}  // namespace

Result<uintptr_t> exported_buffer_start(const ZeSymbols& symbols, ze_context_handle_t context,
                                        uintptr_t base, uint64_t id, size_t page) {
  if (base < page) return base;
  Result<bool> pooled = same_allocation(symbols, context, base - 1, id);
  if (!pooled.ok()) return pooled.status();
  if (!*pooled) return base;  // the common case: one query

  // Gallop down from the page before `base` until an address is not the pool's, then halve.
  uintptr_t inside = (base - 1) / page * page;  // known to be the pool's
  uintptr_t step = page;
  uintptr_t outside = 0;                        // not the pool's, or 0 if none was found
  bool found_outside = false;
  while (inside >= step) {
    Result<bool> same = same_allocation(symbols, context, inside - step, id);
    if (!same.ok()) return same.status();
    if (!*same) {
      outside = inside - step;
      found_outside = true;
      break;
    }
    inside -= step;
    if (step > (UINTPTR_MAX >> 2)) break;
    step *= 2;
  }
  if (!found_outside) {
    if (inside < page) return inside;  // the pool starts at the bottom of the address space
    outside = 0;
  }
  while (inside - outside > page) {
    const uintptr_t middle = outside + (inside - outside) / 2 / page * page;
    Result<bool> same = same_allocation(symbols, context, middle, id);
    if (!same.ok()) return same.status();
    (*same ? inside : outside) = middle;
  }
  return inside;
}

}  // namespace hmr::ze
