// The domains whose device caches may hold dma-buf exports, process-wide.  An export is one
// per allocation and shared by every domain of the process (hmem/dmabuf_share.h), so when the
// descriptor table is full, giving back the refused domain's idle registrations may close no
// fd while another domain's idle registrations of the same allocations keep them open (a
// process with a domain per NIC, each registering the same GPU buffers).  A domain whose NIC
// is serialized by the application (threading=domain) is not listed: its NIC may be called
// only from the application's own calls into it, never from another domain's registration.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>

#include "registration/nic_pressure.h"

namespace hmr::core {

class ExportHolders {
 public:
  static ExportHolders& instance();

  void add(NicPressureRelief& holder);
  // Waits until no giving back runs in `holder` (a domain calls it before its caches go); in
  // a forked child, for none of the parent's (they never end there).
  void remove(NicPressureRelief& holder);
  // Asks the holders other than `except`, each in turn until `count` are given back, for
  // their idle device registrations `which` names (NicPressureRelief::release_unused_exports);
  // how many.
  // Holders listed by the parent of a forked child are not asked in the child (their NIC is
  // the parent's).  No lock is held while a holder gives back.
  size_t release_unused_elsewhere(size_t count, const NicPressureRelief* except,
                                  ExportRelief which);

  // Its lock, held across fork() (util/fork_held_lock.h).
  static std::mutex& fork_lock() { return instance().mutex_; }
  // In a forked child (pthread_atfork): its condition variable made anew.
  static void renew_after_fork_in_child();

 private:
  struct Holder {
    NicPressureRelief* relief = nullptr;
    uint64_t fork_generation = 0;  // of the process that listed it
    size_t calls = 0;              // givings back running in it (remove() waits for 0)
  };
  std::mutex mutex_;
  std::condition_variable calls_ended_;
  std::list<Holder> holders_;  // (a list: a holder asked stays where it is while others go)
};

}  // namespace hmr::core
