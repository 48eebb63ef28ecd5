#include "util/read_sections.h"

#include <pthread.h>

#include <mutex>
#include <thread>
#include <unordered_set>

namespace hmr {

namespace {

// Every ReadSections of the process, so a forked child can clear them: it has only the thread
// that forked, and a slot left inside by a thread that does not exist there would make its
// next grace period wait forever (the fork(2) of a multi-threaded application, a data loader
// forking workers, is common; sections never call fork themselves).
struct Registry {
  std::mutex mutex;
  std::unordered_set<ReadSections*> sections;
};

Registry& registry() {
  static Registry* instance = [] {
    auto* made = new Registry;  // never destroyed: sections may outlive static destructors
    pthread_atfork([] { registry().mutex.lock(); }, [] { registry().mutex.unlock(); },
                   [] {
                     for (ReadSections* sections : registry().sections) sections->forget_readers();
                     registry().mutex.unlock();
                   });
    return made;
  }();
  return *instance;
}

}  // namespace

ReadSections::ReadSections() {
  asymmetric_fences_ready();
  Registry& all = registry();
  const std::lock_guard<std::mutex> lock(all.mutex);
  all.sections.insert(this);
}

ReadSections::~ReadSections() {
  Registry& all = registry();
  const std::lock_guard<std::mutex> lock(all.mutex);
  all.sections.erase(this);
}

void ReadSections::forget_readers() {
  for (Slot& slot : slots_) {
    const uint64_t sequence = slot.sequence.load(std::memory_order_relaxed);
    slot.sequence.store(sequence + (sequence & 1), std::memory_order_relaxed);
    slot.shared.store(0, std::memory_order_relaxed);
  }
}

void ReadSections::wait_for_readers() {
  // After this every reader that entered before is visible as inside, and every reader that
  // enters later sees what the caller unlinked before calling.
  heavy_fence();
  for (Slot& slot : slots_) {
    const uint64_t seen = slot.sequence.load(std::memory_order_acquire);
    if ((seen & 1) != 0) {
      while (slot.sequence.load(std::memory_order_acquire) == seen) std::this_thread::yield();
    }
    while (slot.shared.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
}

}  // namespace hmr
