// Host-memory monitor that patches libc's memory-unmapping functions in place (the UCX
// "bistro" technique), so the calls glibc makes internally are seen too: free() of a large
// block reaches munmap through a direct jump inside libc, malloc trimming reaches brk
// through sbrk, realloc reaches mremap, arena shrinking reaches madvise.  Symbol
// interposition or GOT patching would miss all of those.
//
// Each hooked function's entry gets a 5-byte `jmp rel32` to a 16-byte slot in a page
// mapped within reach of libc, which holds `movabs $hook, %r11; jmp *%r11`.  (Where no such
// page can be mapped, the 13-byte absolute jump is written at the entry itself.)  A hook
// replaces its function entirely: it tells the caches and performs the operation with a raw
// syscall, the range marked as changing meanwhile (ChangeScope), so the original code is
// never run and needs no relocation; its bytes are kept only to be put back by stop() and in a forked child.  For
// glibc's syscall stubs (munmap, madvise, brk, shmdt, shmat) five bytes cover exactly the
// `mov $nr, %eax` before the `syscall`, so a thread sleeping in the kernel while the patch
// is written returns to untouched code.  mmap and mremap are C functions whose first
// instruction is shorter (3 and 4 bytes in Debian 12's glibc): a thread stopped right after
// it while the patch is written would resume inside the jump (process_madvise's stub too: a
// 3-byte `mov %rcx, %r10` comes first).  Nothing in user space can
// move such a thread; the window is one instruction, at the first memhooks domain's open.
// Bytes that fit one aligned 8-byte word are written with one store; a patch across two
// words (after an endbr64, or a 13-byte jump) parks arriving threads on a 2-byte `jmp .`
// first and completes the jump with one store last (write_code).
//
// Hooked (x86-64 glibc only): munmap, mmap (MAP_FIXED over a range), mremap, madvise
// (MADV_DONTNEED, MADV_DONTNEED_LOCKED, MADV_FREE, MADV_REMOVE), brk (and so sbrk and
// malloc's trimming, which reach the break only through brk), shmdt, shmat (SHM_REMAP),
// process_madvise (where libc has it, 2.36: the span of its ranges, for any pidfd).
// Not seen: raw syscall(2) or inline syscalls in other code, ld.so's private munmap (dlclose
// of a library), io_uring and other processes.
//
// Caches are told before the memory goes away, so when the call returns no cache can hand
// out the old registration; and the range stays marked as changing until the syscall has
// returned (changing_ranges.h), so a registration another thread made of the old pages while
// the call was under way is never filed.  Notifications are skipped while nothing is
// subscribed; the marks are not.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "monitor/monitor.h"

namespace hmr::core {

class MemhooksMonitor final : public Monitor {
 public:
  static constexpr size_t kMaxPatch = 16;   // bytes of a function a patch may replace
  static constexpr size_t kInspectBytes = 24;  // bytes check_patchable reads

  static MemhooksMonitor& instance();

  const char* name() const override { return "memhooks"; }
  // Patches every hooked function or none.  HMR_EBUSY when a function already starts with
  // a jump (another monitor or a profiler patched it), HMR_EOPNOTSUPP off x86-64 glibc.
  Status start() override;
  // Puts the original code back when no range is subscribed any more.
  void stop() override;
  Status subscribe(uintptr_t start, size_t len) override;
  void unsubscribe(uintptr_t start, size_t len) override;
  // Whether a hooked call is changing part of [start, end) right now.
  bool changing(uintptr_t start, uintptr_t end) const override;

  bool installed() const { return installed_.load(std::memory_order_acquire); }

  // Whether code starting at `code` (kInspectBytes readable bytes) may be patched:
  // HMR_EBUSY, naming `function` and the bytes, when it already starts with a jump or a
  // breakpoint.
  static Status check_patchable(const void* code, const char* function = "function");

  // The patched entry of a hooked libc function (e.g. "munmap") and the bytes the patch
  // replaced; false when the monitor is not installed or the name is not hooked.
  bool original_code(const char* symbol, const uint8_t** entry, uint8_t* bytes,
                     size_t* length) const;

 private:
  MemhooksMonitor() = default;
  ~MemhooksMonitor() override = default;

  Status install();  // start_mutex_ held
  void restore();    // start_mutex_ held (or the only thread, in a forked child)
  // Why nothing is subscribed while another patcher's jump is over one of hmr's (HMR_EBUSY).
  Status overwritten_reason() const;
  void before_fork() override;
  void after_fork_in_parent() override;
  void after_fork_in_child() override;

  mutable std::mutex start_mutex_;
  std::atomic<bool> installed_{false};
  // Another patcher's jump was found over one of hmr's at the last subscription (start_mutex_):
  // the caches were told to drop everything then, once.
  bool overwritten_ = false;
};

}  // namespace hmr::core
