#include "monitor/memhooks_monitor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "monitor/changing_ranges.h"
#include "util/log.h"

#ifndef SYS_process_madvise
#define SYS_process_madvise 440  // x86-64 (memhooks is x86-64 only); kernel headers before 5.10
#endif

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

namespace hmr::core {
namespace {

// Read by the hooks on every call: plain globals, no allocation, no thread_local (a
// dlopen'ed library's first TLS access may allocate).
std::atomic<uint64_t> g_subscriptions{0};
std::atomic<MemhooksMonitor*> g_monitor{nullptr};
std::atomic<void**> g_curbrk{nullptr};  // glibc's __curbrk, kept by the brk hook
constexpr uintptr_t kPage = 4096;       // the kernel's unit for every call hooked here
constinit ChangingRanges g_changing;     // what hooked calls are changing now

uintptr_t end_of(uintptr_t start, size_t length) {
  const uintptr_t rounded = (static_cast<uintptr_t>(length) + kPage - 1) & ~(kPage - 1);
  if (rounded < length || start + rounded < start) return UINTPTR_MAX;
  return start + rounded;
}

// `length` rounded up to whole huge pages of the size MAP_HUGETLB's flags name (log2 in bits
// 26-31), or of 1 GiB, the largest x86-64 has, where they name none: too much costs misses.
size_t huge_length(size_t length, int flags) {
  constexpr int kHugeShift = 26;  // MAP_HUGE_SHIFT
  const unsigned log2 = (static_cast<unsigned>(flags) >> kHugeShift) & 0x3f;
  const uintptr_t huge = uintptr_t{1} << (log2 >= 21 && log2 < 48 ? log2 : 30);
  const uintptr_t rounded = (static_cast<uintptr_t>(length) + huge - 1) & ~(huge - 1);
  return rounded < length ? SIZE_MAX : static_cast<size_t>(rounded);
}

// Tells the caches that [start, end) is about to change (ChangeScope).  errno is the
// caller's: only the syscall that follows may set it.
void report(uintptr_t start, uintptr_t end) {
  if (end <= start || g_subscriptions.load(std::memory_order_seq_cst) == 0) return;
  MemhooksMonitor* monitor = g_monitor.load(std::memory_order_acquire);
  if (monitor == nullptr) return;
  const int saved_errno = errno;
  const Monitor::EventScope scope;  // maybe under malloc's lock: caches must not free here
  monitor->notify(start, end);
  errno = saved_errno;
}

// Where the SysV segment attached at `start` may end: the end of the last mapping at or
// above `start` of the inode mapped there.  The kernel's shmdt unmaps every mapping of the
// segment's file that lies within the segment's size from `start`, across holes and other
// mappings between them (ipc/shm.c, ksys_shmdt); hmr does not know that size, so every later
// mapping of the inode counts (a later attachment too: reporting too much costs misses only).
// When no file's mapping begins at `start` the kernel still looks further up, for a mapping of
// a segment attached at `start` whose first pages were unmapped since (ksys_shmdt matches
// (vm_start - addr) / PAGE_SIZE == vm_pgoff): everything above then (UINTPTR_MAX).  0 when
// /proc/self/maps cannot be read.  Raw syscalls and a stack buffer: nothing here may
// allocate or call a hooked function.
uintptr_t shm_attachment_end(uintptr_t start) {
  const int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/maps",
                                          O_RDONLY | O_CLOEXEC));
  if (fd < 0) return 0;
  char buffer[1024];
  uintptr_t end = start;
  unsigned long run_inode = 0;
  bool in_run = false;
  bool done = false;
  int field = 0;
  bool after_dash = false;
  uintptr_t low = 0, high = 0;
  unsigned long inode = 0;
  while (!done) {
    const long got = syscall(SYS_read, fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    for (long i = 0; i < got && !done; ++i) {
      const char c = buffer[i];
      if (c == '\n') {
        if (!in_run) {
          if (low == start && inode != 0) {
            in_run = true;
            end = high;
            run_inode = inode;
          } else if (low >= start) {
            end = UINTPTR_MAX;  // a hole or another mapping at `start`: see above
            done = true;
          }
        } else if (inode == run_inode) {
          end = high;  // the lines are in address order
        }
        field = 0;
        after_dash = false;
        low = high = 0;
        inode = 0;
        continue;
      }
      if (field >= 5) continue;
      if (c == ' ') {
        ++field;
        continue;
      }
      if (field == 0) {
        if (c == '-') {
          after_dash = true;
          continue;
        }
        const unsigned digit = c <= '9' ? static_cast<unsigned>(c - '0')
                                        : static_cast<unsigned>((c | 0x20) - 'a' + 10);
        uintptr_t& value = after_dash ? high : low;
        value = value * 16 + digit;
      } else if (field == 4) {
        inode = inode * 10 + static_cast<unsigned long>(c - '0');
      }
    }
  }
  syscall(SYS_close, fd);
  return end;
}

// One hooked call's change of [start, end) (nothing when empty): marked as changing and
// reported before the syscall, unmarked after it, so nothing registered while the call was
// under way is filed (monitor/changing_ranges.h says why).  The mark is made even while
// nothing is subscribed: a registration that subscribes meanwhile still sees it.
class ChangeScope {
 public:
  ChangeScope(uintptr_t start, uintptr_t end) : start_(start), end_(end) {
    if (end_ <= start_) return;
    ticket_ = g_changing.begin_change(start_, end_);
    report(start_, end_);
  }
  // [address, address + length) rounded to pages, when `changes`.
  ChangeScope(const void* address, size_t length, bool changes = true)
      : ChangeScope(reinterpret_cast<uintptr_t>(address),
                    changes ? end_of(reinterpret_cast<uintptr_t>(address), length) : 0) {}
  ~ChangeScope() {
    if (end_ > start_) g_changing.end_change(ticket_);
  }
  ChangeScope(const ChangeScope&) = delete;
  ChangeScope& operator=(const ChangeScope&) = delete;

 private:
  uintptr_t start_;
  uintptr_t end_;
  size_t ticket_ = 0;
};

// ---- the hooks: each replaces its libc function entirely --------------------------------

int munmap_hook(void* address, size_t length) {
  const ChangeScope change(address, length);
  return static_cast<int>(syscall(SYS_munmap, address, length));
}

void* mmap_hook(void* address, size_t length, int prot, int flags, int fd, off_t offset) {
  if ((offset & static_cast<off_t>(kPage - 1)) != 0) {  // as glibc checks before the kernel
    errno = EINVAL;
    return MAP_FAILED;
  }
  // MAP_FIXED replaces whatever was mapped there; MAP_FIXED_NOREPLACE fails instead.
  const bool replaces = (flags & MAP_FIXED) != 0 && (flags & MAP_FIXED_NOREPLACE) == 0;
  // A hugetlb mapping is as long as whole huge pages (ksys_mmap_pgoff: ALIGN(len,
  // huge_page_size)): the size the flags name, or where they name none the largest there is.
  const size_t replaced = (flags & MAP_HUGETLB) != 0 ? huge_length(length, flags) : length;
  const ChangeScope change(address, replaced, replaces);
  return reinterpret_cast<void*>(syscall(SYS_mmap, address, length, prot, flags, fd, offset));
}

void* mremap_hook(void* old_address, size_t old_length, size_t new_length, int flags, ...) {
  void* new_address = nullptr;
  if ((flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) != 0) {  // as glibc reads the variadic
    va_list arguments;
    va_start(arguments, flags);
    new_address = va_arg(arguments, void*);
    va_end(arguments);
  }
  const auto old_start = reinterpret_cast<uintptr_t>(old_address);
  uintptr_t from = 0, to = 0;  // what of the old range may go
  if ((flags & MREMAP_MAYMOVE) != 0) {
    // Whether it moves is known only afterwards: the whole old range may go.
    from = old_start;
    to = end_of(old_start, old_length);
  } else if (new_length < old_length) {
    from = end_of(old_start, new_length);
    to = end_of(old_start, old_length);
  }  // growing in place keeps every old page where it was
  const ChangeScope old_part(from, to);
  const ChangeScope new_part(new_address, new_length, (flags & MREMAP_FIXED) != 0);
  return reinterpret_cast<void*>(
      syscall(SYS_mremap, old_address, old_length, new_length, flags, new_address));
}

// MADV_GUARD_INSTALL (Linux 6.13, include/uapi/asm-generic/mman-common.h): guard markers
// replace the range's pages, which are gone; MADV_GUARD_REMOVE later leaves fresh zero pages.
// Debian 12's headers predate it.  (userfaultfd reports no event for it: docs/semantics.md.)
constexpr int kMadvGuardInstall = 102;

bool advice_drops_pages(int advice) {
  switch (advice) {
    case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED:
    case MADV_FREE:
    case MADV_REMOVE:
    case kMadvGuardInstall:
      return true;
    default:
      return false;
  }
}

int madvise_hook(void* address, size_t length, int advice) {
  const ChangeScope change(address, length, advice_drops_pages(advice));
  return static_cast<int>(syscall(SYS_madvise, address, length, advice));
}

// glibc's posix_madvise makes the madvise syscall itself, not through madvise (found by a
// review: posix_madvise(p, len, MADV_DONTNEED_LOCKED) dropped cached pages unheard).  It
// ignores POSIX_MADV_DONTNEED (4), passes any other advice on, and returns the error number.
int posix_madvise_hook(void* address, size_t length, int advice) {
  constexpr int kPosixDontneed = 4;
  if (advice == kPosixDontneed) return 0;
  const ChangeScope change(address, length, advice_drops_pages(advice));
  const long result = syscall(SYS_madvise, address, length, advice);
  return result < 0 ? errno : 0;
}

// The span from the lowest start to the highest end of `count` ranges at `ranges` (the
// caller's, unchecked), read through process_vm_readv so that a bad pointer is the kernel's
// EFAULT to report, not a fault in the hook: empty then (the kernel refuses the call too).
// Where the read is refused for another reason (a seccomp filter that denies
// process_vm_readv, a kernel without CONFIG_CROSS_MEMORY_ATTACH), the whole address space,
// as shmdt's hook does when it cannot read the maps: misses, never a stale hit.
std::pair<uintptr_t, uintptr_t> span_of(const iovec* ranges, size_t count) {
  struct KeepErrno {  // errno is the caller's: only the hooked call's own syscall sets it
    int saved = errno;
    ~KeepErrno() { errno = saved; }
  } keep_errno;
  uintptr_t low = UINTPTR_MAX, high = 0;
  iovec chunk[64];
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, sizeof chunk / sizeof chunk[0]);
    const iovec local = {chunk, n * sizeof(iovec)};
    const iovec remote = {const_cast<iovec*>(ranges + done), n * sizeof(iovec)};
    const long read = syscall(SYS_process_vm_readv, getpid(), &local, 1UL, &remote, 1UL, 0UL);
    if (read < 0 && errno != EFAULT) return {0, UINTPTR_MAX};
    if (read != static_cast<long>(n * sizeof(iovec))) return {0, 0};
    for (size_t i = 0; i < n; ++i) {
      const auto start = reinterpret_cast<uintptr_t>(chunk[i].iov_base);
      if (chunk[i].iov_len == 0) continue;
      low = std::min(low, start);
      high = std::max(high, end_of(start, chunk[i].iov_len));
    }
    done += n;
  }
  return low < high ? std::pair{low, high} : std::pair<uintptr_t, uintptr_t>{0, 0};
}

// process_madvise(2) (glibc 2.36; on Linux 6.13 and later any advice on the caller's own
// pidfd): advice that drops pages is reported over the whole span of its ranges, whatever
// process the pidfd names (telling the caller's own apart is a syscall of its own, and
// reporting what did not change costs only misses).  More ranges than the kernel takes
// (UIO_MAXIOV) fail there with EINVAL, so they are not read.
ssize_t process_madvise_hook(int pidfd, const iovec* ranges, size_t count, int advice,
                             unsigned int flags) {
  constexpr size_t kMaxRanges = 1024;  // UIO_MAXIOV
  std::pair<uintptr_t, uintptr_t> span{0, 0};
  if (advice_drops_pages(advice) && count <= kMaxRanges) span = span_of(ranges, count);
  const ChangeScope change(span.first, span.second);
  return static_cast<ssize_t>(syscall(SYS_process_madvise, pidfd, ranges, count, advice, flags));
}

int brk_hook(void* address) {
  // glibc's brk, plus the report: sbrk() and malloc's trimming lower the break only
  // through here.
  void** curbrk = g_curbrk.load(std::memory_order_relaxed);
  const auto wanted = reinterpret_cast<uintptr_t>(address);
  const uintptr_t current = reinterpret_cast<uintptr_t>(*curbrk);
  const bool shrinks = wanted != 0 && current != 0 && wanted < current;
  long now = 0;
  {
    // The kernel unmaps [PAGE_ALIGN(wanted), PAGE_ALIGN(current)): the page holding the old
    // break goes too.
    const ChangeScope change(wanted, shrinks ? end_of(current & ~(kPage - 1), current & (kPage - 1))
                                             : 0);
    now = syscall(SYS_brk, address);
  }
  *curbrk = reinterpret_cast<void*>(now);
  if (static_cast<uintptr_t>(now) < wanted) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

// Where a change that starts at `start` ends when only the kernel knows: its segment's end
// when someone is subscribed (worth reading /proc/self/maps for), else the top of the address
// space (a mark that costs nothing to make; see ChangeScope).
int shmdt_hook(const void* address) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(address);
  uintptr_t end = UINTPTR_MAX;
  if (g_subscriptions.load(std::memory_order_seq_cst) != 0) {
    end = shm_attachment_end(start);
    if (end == 0) end = UINTPTR_MAX;  // unreadable map: assume everything above
  }
  const ChangeScope change(start, end);
  return static_cast<int>(syscall(SYS_shmdt, address));
}

void* shmat_hook(int id, const void* address, int flags) {
  uintptr_t start = 0, end = 0;
  if ((flags & SHM_REMAP) != 0 && address != nullptr) {
    start = reinterpret_cast<uintptr_t>(address);
    if ((flags & SHM_RND) != 0) start &= ~(static_cast<uintptr_t>(SHMLBA) - 1);
    end = UINTPTR_MAX;
    shmid_ds segment{};
    if (g_subscriptions.load(std::memory_order_seq_cst) != 0 &&
        syscall(SYS_shmctl, id, IPC_STAT, &segment) == 0) {
      // A SHM_HUGETLB segment is mapped as whole huge pages (do_shmat maps its file's rounded
      // size, not shm_segsz), and IPC_STAT does not say whether it is one: whole 1 GiB pages,
      // the largest there is, for any segment (a SHM_REMAP attach is rare; too much costs
      // misses).
      end = end_of(start, huge_length(segment.shm_segsz, 0));
    }
  }
  const ChangeScope change(start, end);
  return reinterpret_cast<void*>(syscall(SYS_shmat, id, address, flags));
}

// ---- patching ----------------------------------------------------------------------------

struct Patch {
  const char* symbol;
  uintptr_t hook;
  bool optional = false;  // a libc without it, or where it cannot be patched, is hooked
                          // without it (process_madvise: 2.36; posix_madvise)
  uint8_t* at = nullptr;  // where the jump is written: the entry, or just after endbr64
  size_t length = 0;      // 0: not written
  uint8_t original[MemhooksMonitor::kMaxPatch] = {};
  uint8_t written[MemhooksMonitor::kMaxPatch] = {};  // hmr's jump, as long as `length`
};


Patch g_patches[] = {
    {"munmap", reinterpret_cast<uintptr_t>(&munmap_hook)},
    {"mmap", reinterpret_cast<uintptr_t>(&mmap_hook)},
    {"mremap", reinterpret_cast<uintptr_t>(&mremap_hook)},
    {"madvise", reinterpret_cast<uintptr_t>(&madvise_hook)},
    {"brk", reinterpret_cast<uintptr_t>(&brk_hook)},
    {"shmdt", reinterpret_cast<uintptr_t>(&shmdt_hook)},
    {"shmat", reinterpret_cast<uintptr_t>(&shmat_hook)},
    {"process_madvise", reinterpret_cast<uintptr_t>(&process_madvise_hook), true},
    {"posix_madvise", reinterpret_cast<uintptr_t>(&posix_madvise_hook), true},
};
constexpr size_t kPatches = sizeof g_patches / sizeof g_patches[0];

// The first of hmr's patched functions whose jump is not there any more, or nullptr.  Another
// patcher loaded later (UCX's UCM, whose libucm patches munmap and madvise when it is loaded)
// writes its own over hmr's, and hmr's hooks then never run: from that moment unmaps go
// unheard.  Read as data (libc's code is readable); called under start_mutex_, on each
// subscription and start.
const char* overwritten_symbol() {
  for (const Patch& patch : g_patches) {
    if (patch.length != 0 && std::memcmp(patch.at, patch.written, patch.length) != 0) {
      return patch.symbol;
    }
  }
  return nullptr;
}
bool hooks_intact() { return overwritten_symbol() == nullptr; }

// Whether `symbol` is patched now (an optional one may be missing from libc).
bool hooked(const char* symbol) {
  for (const Patch& patch : g_patches) {
    if (patch.length != 0 && std::strcmp(patch.symbol, symbol) == 0) return true;
  }
  return false;
}
constexpr size_t kSlot = 16;        // trampoline bytes per hook
constexpr size_t kRelativeJump = 5;  // e9 rel32
constexpr size_t kAbsoluteJump = 13;  // movabs $hook, %r11; jmp *%r11
constexpr size_t kInspect = MemhooksMonitor::kInspectBytes;

// Code bytes are touched only through these: ThreadSanitizer keeps no shadow for libc's
// text (an instrumented access there faults), and its memcpy interceptor would check them.
#define HMR_CODE_ACCESS __attribute__((no_sanitize("thread")))

HMR_CODE_ACCESS void copy_code(uint8_t* to, const uint8_t* from, size_t length) {
  auto* volatile_to = static_cast<volatile uint8_t*>(to);
  const auto* volatile_from = static_cast<const volatile uint8_t*>(from);
  for (size_t i = 0; i < length; ++i) volatile_to[i] = volatile_from[i];
}

HMR_CODE_ACCESS void store_code_word(uintptr_t word, size_t shift, const uint8_t* bytes,
                                     size_t length) {
  // Plain aligned 8-byte moves, which x86-64 performs atomically, written in assembly: a
  // sanitizer instruments even __atomic builtins, and libc's code has no shadow memory.
#if defined(__x86_64__)
  auto* target = reinterpret_cast<uint64_t*>(word);
  uint64_t value;
  asm volatile("movq %1, %0" : "=r"(value) : "m"(*target));
  for (size_t i = 0; i < length; ++i) {
    const unsigned bit = static_cast<unsigned>((shift + i) * 8);
    value = (value & ~(uint64_t{0xff} << bit)) | (uint64_t{bytes[i]} << bit);
  }
  asm volatile("movq %1, %0\n\tmfence" : "=m"(*target) : "r"(value) : "memory");
#else
  (void)word, (void)shift, (void)bytes, (void)length;  // start() refuses off x86-64
#endif
}

// Page of trampolines near libc; kept for the life of the process (a thread may still be
// on its way through one after stop()).
uint8_t* g_trampolines = nullptr;

void encode_absolute_jump(uint8_t* out, uintptr_t target) {
  out[0] = 0x49;
  out[1] = 0xbb;
  std::memcpy(out + 2, &target, sizeof target);
  out[10] = 0x41;
  out[11] = 0xff;
  out[12] = 0xe3;
}

bool reaches(const uint8_t* from_end, const uint8_t* target) {
  const auto distance = static_cast<int64_t>(reinterpret_cast<uintptr_t>(target) -
                                             reinterpret_cast<uintptr_t>(from_end));
  return distance >= INT32_MIN && distance <= INT32_MAX;
}

__attribute__((no_sanitize("thread"))) bool has_endbr64(const uint8_t* code) {
  return code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa;
}

// A page every entry in [low, high] reaches with a rel32 jump, or nullptr.
uint8_t* map_trampoline_page(uintptr_t low, uintptr_t high) {
  constexpr uintptr_t kStep = 1u << 20;
  constexpr uintptr_t kSpan = 1u << 30;  // well inside the ±2 GiB a rel32 reaches
  for (uintptr_t distance = kStep; distance <= kSpan; distance += kStep) {
    const uintptr_t candidates[2] = {(low & ~(kStep - 1)) - distance,
                                     (high & ~(kStep - 1)) + distance};
    for (uintptr_t candidate : candidates) {
      if (candidate < kStep) continue;
      void* page = mmap(reinterpret_cast<void*>(candidate), kPage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (page == MAP_FAILED) continue;
      auto* bytes = static_cast<uint8_t*>(page);
      if (reaches(reinterpret_cast<uint8_t*>(low), bytes) &&
          reaches(reinterpret_cast<uint8_t*>(high), bytes + kPage)) {
        return bytes;
      }
      munmap(page, kPage);  // a kernel that took the address as a mere hint
    }
  }
  return nullptr;
}

// Writes code bytes; up to 8 bytes inside one aligned word go in one store, so a thread
// fetching the entry meanwhile sees either the old or the new instruction.
Status write_code(uint8_t* at, const uint8_t* bytes, size_t length, const char* symbol) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(at) & ~(kPage - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(at) + length - 1) & ~(kPage - 1);
  const size_t span = last - first + kPage;
  if (mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    const int err = errno;
    return make_error(err == EACCES ? HMR_EACCES : HMR_EPERM,
                      "memhooks: cannot make the code of %s writable (mprotect %#lx+%zu "
                      "read-write-execute: %s); a security policy may forbid patching code",
                      symbol, static_cast<unsigned long>(first), span, std::strerror(err));
  }
  const uintptr_t word = reinterpret_cast<uintptr_t>(at) & ~uintptr_t{7};
  const size_t shift = reinterpret_cast<uintptr_t>(at) - word;
  if (shift + length <= 8) {
    store_code_word(word, shift, bytes, length);
  } else if (shift + 2 <= 8) {
    // Across two words (an endbr64 before the jump, or the 13-byte jump): a thread must never
    // fetch half of it.  A 2-byte `jmp .` parks whoever arrives, the bytes behind it are
    // written while nobody runs them, and the first word's store completes the jump.
    static constexpr uint8_t kPark[2] = {0xeb, 0xfe};
    store_code_word(word, shift, kPark, sizeof kPark);
    copy_code(at + sizeof kPark, bytes + sizeof kPark, length - sizeof kPark);
    store_code_word(word, shift, bytes, 8 - shift);
  } else {
    copy_code(at, bytes, length);  // (an entry at the last byte of a word: not seen in glibc)
  }
  if (mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_EXEC) != 0) {
    const int err = errno;
    return make_error(HMR_EPERM, "memhooks: cannot make the code of %s read-only again: %s",
                      symbol, std::strerror(err));
  }
  return ok_status();
}

}  // namespace

MemhooksMonitor& MemhooksMonitor::instance() {
  // Never destroyed: hooks may run until the process is gone.
  static MemhooksMonitor* monitor = new MemhooksMonitor();
  return *monitor;
}

Status MemhooksMonitor::check_patchable(const void* code, const char* function) {
#if defined(__x86_64__)
  uint8_t bytes[kInspect];
  copy_code(bytes, static_cast<const uint8_t*>(code), kInspect);
  const uint8_t* entry = has_endbr64(bytes) ? bytes + 4 : bytes;
  const char* found = nullptr;
  if (entry[0] == 0xe9) {
    found = "jmp rel32";
  } else if (entry[0] == 0xeb) {
    found = "jmp rel8";
  } else if (entry[0] == 0xff && entry[1] == 0x25) {
    found = "jmp *rip-relative";
  } else if (entry[0] == 0xcc) {
    found = "int3 (a breakpoint)";
  } else if (entry[0] == 0x68 && entry[5] == 0xc3) {
    found = "push imm32; ret";
  } else if ((entry[0] == 0x48 || entry[0] == 0x49) && entry[1] >= 0xb8 && entry[1] <= 0xbf) {
    const uint8_t* jump = entry + 10;
    if (jump[0] == 0x41) ++jump;
    if (jump[0] == 0xff && (jump[1] & 0xf8) == 0xe0) found = "movabs $imm64, %reg; jmp *%reg";
  }
  if (found == nullptr) return ok_status();
  char shown[kInspect * 3 + 1] = {};
  for (size_t i = 0; i < 16; ++i) {
    std::snprintf(shown + i * 3, sizeof shown - i * 3, "%02x ", bytes[i]);
  }
  shown[16 * 3 - 1] = '\0';
  return make_error(HMR_EBUSY,
                    "memhooks: %s is already patched: it starts with %s (%s); another memory "
                    "hook (UCX's UCM, a profiler, a debugger) owns it, so use the "
                    "userfaultfd monitor instead",
                    function, found, shown);
#else
  (void)code;
  return make_error(HMR_EOPNOTSUPP, "memhooks: patching %s is implemented for x86-64 only",
                    function);
#endif
}

#if defined(__SANITIZE_THREAD__)
#define HMR_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HMR_UNDER_TSAN 1
#endif
#endif

Status MemhooksMonitor::start() {
#if defined(HMR_UNDER_TSAN)
  // TSan's runtime calls libc's mmap/munmap from inside its own interceptors and keeps no
  // shadow for libc's code: rewriting that code under it crashes the runtime.
  return make_error(HMR_EOPNOTSUPP,
                    "memhooks: not available under ThreadSanitizer; use the userfaultfd monitor");
#endif
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (installed_.load(std::memory_order_relaxed)) {
    // (A default monitor then falls back to userfaultfd: see subscribe().)
    return hooks_intact() ? ok_status() : overwritten_reason();
  }
  // Across fork() (Monitor's handlers, which a failed pthread_atfork makes add_sink refuse):
  // the child gets libc's code back, below.
  return install();
}

Status MemhooksMonitor::install() {
#if !defined(__x86_64__) || !defined(__GLIBC__)
  return make_error(HMR_EOPNOTSUPP,
                    "memhooks: patching libc is implemented for x86-64 glibc only; use the "
                    "userfaultfd monitor");
#else
  // libc's own definitions, not an interposer's (a sanitizer's munmap interceptor passes
  // the call on to libc's, where the hook then sees it).
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr) {
    return make_error(HMR_EOPNOTSUPP, "memhooks: libc.so.6 is not loaded (%s); glibc is needed",
                      dlerror());
  }
  uint8_t* entries[kPatches] = {};
  size_t sizes[kPatches] = {};
  Status found;
  for (size_t i = 0; i < kPatches && found.ok(); ++i) {
    void* function = dlsym(libc, g_patches[i].symbol);
    if (function == nullptr && g_patches[i].optional) continue;  // (entries[i] stays null)
    if (function == nullptr) {
      found = make_error(HMR_EOPNOTSUPP, "memhooks: libc exports no %s", g_patches[i].symbol);
      break;
    }
    Dl_info info{};
    void* symbol = nullptr;
    if (dladdr1(function, &info, &symbol, RTLD_DL_SYMENT) != 0 && symbol != nullptr) {
      sizes[i] = static_cast<const ElfW(Sym)*>(symbol)->st_size;
    }
    Status patchable = check_patchable(function, g_patches[i].symbol);
    if (!patchable.ok() && g_patches[i].optional) {
      // (An optional function that cannot be patched is left as libc has it: the rest still
      // serve, as for a libc that lacks it.)
      log_message(LogLevel::info, "%s; left unhooked", patchable.reason().c_str());
      continue;
    }
    entries[i] = static_cast<uint8_t*>(function);
    found = std::move(patchable);
  }
  void* curbrk = found.ok() ? dlsym(libc, "__curbrk") : nullptr;
  dlclose(libc);
  HMR_RETURN_IF_ERROR(found);
  if (curbrk == nullptr) return make_error(HMR_EOPNOTSUPP, "memhooks: libc exports no __curbrk");

  if (g_trampolines == nullptr) {
    uintptr_t low = UINTPTR_MAX, high = 0;
    for (uint8_t* entry : entries) {
      if (entry == nullptr) continue;
      low = std::min(low, reinterpret_cast<uintptr_t>(entry));
      high = std::max(high, reinterpret_cast<uintptr_t>(entry));
    }
    uint8_t* page = map_trampoline_page(low, high);
    if (page != nullptr) {
      std::memset(page, 0xcc, kPage);  // still an ordinary data page
      for (size_t i = 0; i < kPatches; ++i) encode_absolute_jump(page + i * kSlot, g_patches[i].hook);
      if (mprotect(page, kPage, PROT_READ | PROT_EXEC) == 0) {
        g_trampolines = page;
      } else {
        munmap(page, kPage);
      }
    }
  }

  uint8_t code[kPatches][kMaxPatch] = {};
  size_t lengths[kPatches] = {};
  uint8_t* targets[kPatches] = {};
  for (size_t i = 0; i < kPatches; ++i) {
    if (entries[i] == nullptr) continue;  // an optional function this libc lacks
    const size_t skip = has_endbr64(entries[i]) ? 4 : 0;
    uint8_t* at = entries[i] + skip;
    const uint8_t* slot = g_trampolines != nullptr ? g_trampolines + i * kSlot : nullptr;
    if (slot != nullptr && reaches(at + kRelativeJump, slot)) {
      const auto relative = static_cast<int32_t>(reinterpret_cast<uintptr_t>(slot) -
                                                 reinterpret_cast<uintptr_t>(at + kRelativeJump));
      code[i][0] = 0xe9;
      std::memcpy(&code[i][1], &relative, sizeof relative);
      lengths[i] = kRelativeJump;
    } else {
      encode_absolute_jump(code[i], g_patches[i].hook);
      lengths[i] = kAbsoluteJump;
    }
    if (sizes[i] < skip + lengths[i] && g_patches[i].optional) {
      log_message(LogLevel::info, "memhooks: libc's %s is too short for a %zu-byte jump; left "
                  "unhooked", g_patches[i].symbol, lengths[i]);
      continue;  // (targets[i] stays null: not patched)
    }
    if (sizes[i] < skip + lengths[i]) {
      return make_error(HMR_EOPNOTSUPP,
                        "memhooks: libc's %s is %zu bytes long (or of unknown size), too short "
                        "for a %zu-byte jump",
                        g_patches[i].symbol, sizes[i], lengths[i]);
    }
    targets[i] = at;
  }

  // Published before the first patch: a hooked call may run the moment it is written.
  g_curbrk.store(static_cast<void**>(curbrk), std::memory_order_relaxed);
  g_monitor.store(this, std::memory_order_release);
  for (size_t i = 0; i < kPatches; ++i) {
    Patch& patch = g_patches[i];
    if (targets[i] == nullptr) continue;
    patch.at = targets[i];
    copy_code(patch.original, targets[i], lengths[i]);
    Status written = write_code(targets[i], code[i], lengths[i], patch.symbol);
    if (!written.ok()) {
      restore();
      return written;
    }
    std::memcpy(patch.written, code[i], lengths[i]);
    patch.length = lengths[i];
  }
  installed_.store(true, std::memory_order_release);
  log_message(LogLevel::debug, "memhooks: libc's munmap, mmap, mremap, madvise, brk, shmdt, "
              "shmat%s are hooked (%s jumps)",
              hooked("process_madvise") ? " and process_madvise" : " (no process_madvise)",
              g_trampolines != nullptr ? "5-byte" : "13-byte");
  return ok_status();
#endif
}

void MemhooksMonitor::restore() {
  for (Patch& patch : g_patches) {
    if (patch.length == 0) continue;
    if (std::memcmp(patch.at, patch.written, patch.length) != 0) {
      patch.length = 0;  // another patcher's jump is there now: theirs to keep (and undo)
      continue;
    }
    Status written = write_code(patch.at, patch.original, patch.length, patch.symbol);
    if (!written.ok()) {
      log_message(LogLevel::error, "%s", written.reason().c_str());
      continue;  // still hooked: the hook stays correct
    }
    patch.length = 0;
  }
  installed_.store(false, std::memory_order_release);
}

void MemhooksMonitor::stop() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (!installed_.load(std::memory_order_relaxed)) return;
  const uint64_t subscribed = g_subscriptions.load(std::memory_order_seq_cst);
  if (subscribed != 0) {
    log_message(LogLevel::info, "memhooks: stays installed, %llu ranges still subscribed",
                static_cast<unsigned long long>(subscribed));
    return;
  }
  restore();
}

Status MemhooksMonitor::subscribe(uintptr_t start, size_t len) {
  (void)start;
  (void)len;
  bool newly_overwritten = false;
  Status refused;
  {
    // Under the lock, so stop() cannot take the hooks away between the check and the count.
    std::lock_guard<std::mutex> lock(start_mutex_);
    if (!installed_.load(std::memory_order_relaxed)) {
      return make_error(HMR_EINVAL, "memhooks monitor is not started");
    }
    if (hooks_intact()) {
      overwritten_ = false;
      g_subscriptions.fetch_add(1, std::memory_order_seq_cst);
      return ok_status();
    }
    newly_overwritten = !overwritten_;
    overwritten_ = true;
    refused = overwritten_reason();
  }
  // What the caches hold may have been unmapped unheard since the jump was overwritten: all of
  // it goes (once; as the hooks report, the deregistrations are deferred), and from now on
  // nothing is filed (registrations are handed out uncached) while hmr's jumps are not there.
  if (newly_overwritten) {
    log_message(LogLevel::warn, "%s: every cached registration is dropped, and memory is "
                "registered without the cache from now on", refused.reason().c_str());
    const EventScope scope;
    notify(0, UINTPTR_MAX);
  }
  return refused;
}

Status MemhooksMonitor::overwritten_reason() const {
  return make_error(HMR_EBUSY, "memhooks: libc's %s was patched again after hmr hooked it "
                    "(UCX's UCM loaded after hmr does this), so hmr no longer hears of unmaps; "
                    "load such libraries before hmr, or use the userfaultfd monitor "
                    "(cache_monitor=\"userfaultfd\")", overwritten_symbol());
}

void MemhooksMonitor::unsubscribe(uintptr_t start, size_t len) {
  (void)start;
  (void)len;
  uint64_t count = g_subscriptions.load(std::memory_order_relaxed);
  while (count != 0 &&
         !g_subscriptions.compare_exchange_weak(count, count - 1, std::memory_order_seq_cst)) {
  }
}

bool MemhooksMonitor::changing(uintptr_t start, uintptr_t end) const {
  return g_changing.overlaps(start, end);
}

bool MemhooksMonitor::original_code(const char* symbol, const uint8_t** entry, uint8_t* bytes,
                                    size_t* length) const {
  std::lock_guard<std::mutex> lock(start_mutex_);
  for (const Patch& patch : g_patches) {
    if (patch.length == 0 || std::strcmp(patch.symbol, symbol) != 0) continue;
    *entry = patch.at;
    std::memcpy(bytes, patch.original, patch.length);
    *length = patch.length;
    return true;
  }
  return false;
}

// fork() copies the patched code into the child; the child must be left as libc made it
// (its caches, if any, then stop getting hooks and no longer cache new registrations).
// The lock is held across fork so the child never sees a half-written patch table.
void MemhooksMonitor::before_fork() { start_mutex_.lock(); }

void MemhooksMonitor::after_fork_in_parent() { start_mutex_.unlock(); }

void MemhooksMonitor::after_fork_in_child() {
  if (installed_.load(std::memory_order_relaxed)) restore();
  // The parent's caches were told they lost their watch (Monitor's fork handler) and never
  // unsubscribe here; a cache the child opens installs the hooks again.
  g_subscriptions.store(0, std::memory_order_relaxed);
  g_changing.forget_all_in_forked_child();
  start_mutex_.unlock();
}

}  // namespace hmr::core
