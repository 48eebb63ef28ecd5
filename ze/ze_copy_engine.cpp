#include "ze/ze_copy_engine.h"

#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include "util/log.h"
#include "ze/ze_error.h"

namespace hmr::ze {

ZeCopyEngine::ZeCopyEngine(const ZeSymbols& symbols, std::vector<Target> targets)
    : symbols_(symbols), targets_(std::move(targets)), idle_(targets_.size()) {}

ZeCopyEngine::~ZeCopyEngine() {
  std::vector<ze_command_list_handle_t> lists = std::move(undestroyed_);
  for (auto& idle : idle_) lists.insert(lists.end(), idle.begin(), idle.end());
  for (ze_command_list_handle_t list : lists) {
    const ze_result_t result = symbols_.zeCommandListDestroy(list);
    if (result != ZE_RESULT_SUCCESS) {
      log_message(LogLevel::warn, "ze copy engine: zeCommandListDestroy of %p failed: %s (the "
                  "driver keeps it, and its context, until the process ends)",
                  static_cast<void*>(list), describe_ze_result(result).c_str());
    }
  }
}

void ZeCopyEngine::destroy(ze_command_list_handle_t list) {
  const ze_result_t result = symbols_.zeCommandListDestroy(list);
  if (result == ZE_RESULT_SUCCESS) return;
  try {
    std::lock_guard lock(mutex_);
    undestroyed_.push_back(list);
  } catch (const std::bad_alloc&) {
    log_message(LogLevel::warn, "ze copy engine: zeCommandListDestroy of %p failed: %s",
                static_cast<void*>(list), describe_ze_result(result).c_str());
  }
}

Result<ze_command_list_handle_t> ZeCopyEngine::acquire(size_t target) {
  {
    std::lock_guard lock(mutex_);
    if (!idle_[target].empty()) {
      ze_command_list_handle_t list = idle_[target].back();
      idle_[target].pop_back();
      return list;
    }
  }
  ze_command_queue_desc_t desc{};
  desc.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
  desc.mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
  desc.priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL;
  ze_command_list_handle_t list = nullptr;
  const ze_result_t result = symbols_.zeCommandListCreateImmediate(
      targets_[target].context, targets_[target].device, &desc, &list);
  if (result != ZE_RESULT_SUCCESS) {
    return make_error(hmr_code_for(result), "zeCommandListCreateImmediate failed: %s",
                      describe_ze_result(result).c_str());
  }
  return list;
}

void ZeCopyEngine::release(size_t target, ze_command_list_handle_t list) {
  try {
    std::lock_guard lock(mutex_);
    idle_[target].push_back(list);
    return;
  } catch (const std::bad_alloc&) {
  }
  destroy(list);  // could not keep it: do not leak it
}

Status ZeCopyEngine::copy(size_t target, void* dst, const void* src, size_t len, const char* what) {
  Result<ze_command_list_handle_t> list = acquire(target);
  if (!list.ok()) {
    return Status(list.status().code(), std::string("ze copy ") + what + ": " +
                                            list.status().reason());
  }
  const char* call = "zeCommandListAppendMemoryCopy";
  ze_result_t result =
      symbols_.zeCommandListAppendMemoryCopy(*list, dst, src, len, nullptr, 0, nullptr);
  if (result == ZE_RESULT_SUCCESS && symbols_.zeCommandListHostSynchronize != nullptr) {
    call = "zeCommandListHostSynchronize";
    result = symbols_.zeCommandListHostSynchronize(*list, UINT64_MAX);
  }
  if (result != ZE_RESULT_SUCCESS) {
    // A list whose command failed is not trusted again.
    destroy(*list);
    return make_error(hmr_code_for(result), "%s for the copy %s (%p <- %p, %zu bytes) failed: %s",
                      call, what, dst, src, len, describe_ze_result(result).c_str());
  }
  release(target, *list);
  return ok_status();
}

}  // namespace hmr::ze
