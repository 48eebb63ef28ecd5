// The worker that completes registrations of a domain bound to an event queue with
// HMR_REG_MR: the caller gets its MR handle at once, the NIC registration happens here, and
// the completion (or error) is posted to the queue afterwards.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace hmr::core {

class MemoryRegion;

class AsyncRegistrar {
 public:
  AsyncRegistrar();
  ~AsyncRegistrar();  // finishes queued work first

  void submit(MemoryRegion* region);
  // True when `region` was still queued and is now removed: it will never be registered.
  bool cancel(MemoryRegion* region);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<MemoryRegion*> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hmr::core
