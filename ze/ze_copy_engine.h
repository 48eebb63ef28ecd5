// Synchronous copies through Level Zero immediate command lists, pooled per device.
//
// A command list must never be appended to from two threads at once, and hmr holds no lock
// across a driver call; so a copy takes an idle list out of its device's pool (creating one when
// none is idle), appends with no lock held, and puts the list back.  Lists are created in
// synchronous mode: the append returns when the bytes have moved.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "util/status.h"
#include "ze/ze_symbols.h"

namespace hmr::ze {

class ZeCopyEngine {
 public:
  struct Target {
    ze_context_handle_t context = nullptr;
    ze_device_handle_t device = nullptr;
  };

  ZeCopyEngine(const ZeSymbols& symbols, std::vector<Target> targets);
  // Destroys every list, and tries again those the driver refused to destroy before (a
  // refusal is logged); no copy may be running.
  ~ZeCopyEngine();
  ZeCopyEngine(const ZeCopyEngine&) = delete;
  ZeCopyEngine& operator=(const ZeCopyEngine&) = delete;

  // Copies on targets[target]'s engine; `what` names the copy in a failure's reason.
  Status copy(size_t target, void* dst, const void* src, size_t len, const char* what);

 private:
  Result<ze_command_list_handle_t> acquire(size_t target);
  void release(size_t target, ze_command_list_handle_t list);
  // zeCommandListDestroy, keeping a list the driver refuses for the destructor.
  void destroy(ze_command_list_handle_t list);

  ZeSymbols symbols_;
  std::vector<Target> targets_;
  std::mutex mutex_;
  std::vector<std::vector<ze_command_list_handle_t>> idle_;  // per target
  // Lists whose command failed and whose zeCommandListDestroy was refused: never used again,
  // destroyed by the destructor (a context is not destroyed while a list of it lives).
  std::vector<ze_command_list_handle_t> undestroyed_;
};

}  // namespace hmr::ze
