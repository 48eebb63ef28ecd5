// The worker that completes registrations of a domain bound to an event queue with
// HMR_REG_MR: the caller gets its MR handle at once, the NIC registration happens here, and
// the completion (or error) is posted to the queue afterwards.
#pragma once

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

namespace hmr::core {

class MemoryRegion;

class AsyncRegistrar {
 public:
  AsyncRegistrar();
  ~AsyncRegistrar();  // finishes queued work first

  // Room for one submission, taken before anything is handed out, so that submit() cannot
  // fail: the caller writes the application's MR handle first, and an MR submitted may
  // complete (and its event be read) at once.
  class Ticket {
    friend class AsyncRegistrar;
    std::list<MemoryRegion*> node_;  // one node, spliced into the queue by submit()
  };
  static Ticket reserve();  // may throw std::bad_alloc
  void submit(Ticket&& room, MemoryRegion* region) noexcept;
  // True when `region` was still queued and is now removed: it will never be registered.
  bool cancel(MemoryRegion* region);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable work_;
  std::list<MemoryRegion*> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hmr::core
