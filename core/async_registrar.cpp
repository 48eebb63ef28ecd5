#include "core/async_registrar.h"

#include <algorithm>

#include "core/memory_region.h"

namespace hmr::core {

AsyncRegistrar::AsyncRegistrar() : thread_([this] { run(); }) {}

AsyncRegistrar::~AsyncRegistrar() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

AsyncRegistrar::Ticket AsyncRegistrar::reserve() {
  Ticket room;
  room.node_.emplace_back(nullptr);
  return room;
}

void AsyncRegistrar::submit(Ticket&& room, MemoryRegion* region) noexcept {
  room.node_.front() = region;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.splice(queue_.end(), room.node_);
  }
  work_.notify_one();
}

bool AsyncRegistrar::cancel(MemoryRegion* region) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find(queue_.begin(), queue_.end(), region);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

void AsyncRegistrar::run() {
  for (;;) {
    MemoryRegion* region = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      region = queue_.front();
      queue_.pop_front();
    }
    region->complete_async_registration();  // no lock held: this calls the NIC
  }
}

}  // namespace hmr::core
