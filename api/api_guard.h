// Every C entry point runs its body through guarded(): no C++ exception crosses the ABI.
#pragma once

#include <new>

#include "api/last_error.h"

namespace hmr {

template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return report_error(HMR_ENOMEM, "out of memory");
  } catch (...) {
    return report_error(HMR_EIO, "internal error: unexpected exception");
  }
}

}  // namespace hmr
