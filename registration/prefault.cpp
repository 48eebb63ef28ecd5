#include "registration/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <vector>

#include "util/log.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace hmr::core {
namespace {

constexpr size_t kMinChunk = 8ULL << 20;   // below this, the split costs more than it saves
constexpr size_t kChunksPerThread = 4;     // some slack so uneven chunks even out

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

int populate(void* addr, size_t len, int advice) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (madvise(addr, len, advice) == 0) return 0;
    if (errno != EINTR && errno != EAGAIN) return errno;
  }
  return errno;
}

// Whether this kernel knows MADV_POPULATE_WRITE (Linux >= 5.14), asked once on a page of our
// own, so a later EINVAL on the caller's range means "this mapping cannot be populated".
bool kernel_populates() {
  static const bool supported = [] {
    void* page = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (page == MAP_FAILED) return false;
    const bool known = populate(page, page_size(), MADV_POPULATE_WRITE) == 0;
    munmap(page, page_size());
    if (!known) log_message(LogLevel::info, "MADV_POPULATE_WRITE unsupported: pre-faulting by touch");
    return known;
  }();
  return supported;
}

struct Protection {
  bool readable = true;
  bool writable = true;
};

// The protection common to every mapping covering [start, end), from /proc/self/maps; a hole
// makes the range neither readable nor writable.  Only the touch fallback needs this: a write
// or read the CPU may not do would be a crash, where madvise merely fails.
Protection range_protection(uintptr_t start, uintptr_t end) {
  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::unique_ptr<std::FILE, FileCloser> maps(std::fopen("/proc/self/maps", "re"));
  if (!maps) return {false, false};
  Protection protection;
  uintptr_t covered = start;
  char line[512];
  while (covered < end && std::fgets(line, sizeof line, maps.get()) != nullptr) {
    uintptr_t low = 0;
    uintptr_t high = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &low, &high, perms) != 3) continue;
    if (high <= covered) continue;
    if (low > covered) return {false, false};  // a hole
    protection.readable = protection.readable && perms[0] == 'r';
    protection.writable = protection.writable && perms[1] == 'w';
    covered = high;
  }
  if (covered < end) return {false, false};
  return protection;
}

// The fallback: one write fault per page that never changes a byte (an atomic add of 0 is
// safe against other threads writing the same word), or a read where writing is not allowed.
void touch_pages(uintptr_t start, uintptr_t end, const Protection& protection) {
  for (uintptr_t page = start; page < end; page += page_size()) {
    if (protection.writable) {
      std::atomic_ref<unsigned char>(*reinterpret_cast<unsigned char*>(page))
          .fetch_add(0, std::memory_order_relaxed);
    } else {
      (void)*reinterpret_cast<volatile const unsigned char*>(page);
    }
  }
}

// Populates one chunk with madvise; returns whether its pages are now present.
bool populate_chunk(uintptr_t start, size_t len, bool for_write) {
  void* addr = reinterpret_cast<void*>(start);
  if (!for_write) return populate(addr, len, MADV_POPULATE_READ) == 0;
  const int error = populate(addr, len, MADV_POPULATE_WRITE);
  if (error == 0) return true;
  // EFAULT/EPERM: pages that may not be written (a read-only mapping): populate for reading.
  // EINVAL (an I/O or PFN mapping), ENOMEM (a hole), EHWPOISON: leave it to the NIC.
  if (error == EFAULT || error == EPERM) return populate(addr, len, MADV_POPULATE_READ) == 0;
  return false;
}

}  // namespace

bool nic_may_write(uint64_t access) {
  return (access & (HMR_READ | HMR_RECV | HMR_REMOTE_WRITE)) != 0;
}

bool wants_prefault(const nic::RegistrationRequest& request, uint64_t min_bytes,
                    bool pins_host_memory, bool on_demand_paging) {
  if (!pins_host_memory || on_demand_paging) return false;
  if (request.dmabuf != nullptr || request.segments.empty()) return false;
  // Device memory, even memory the CPU can reach (host-alloc, managed), belongs to its
  // runtime: migrating or faulting it in from here is not hmr's call.
  if (request.iface != HMR_HMEM_SYSTEM) return false;
  if (request.flags & HMR_HMEM_DEVICE_ONLY) return false;
  uint64_t total = 0;
  for (const iovec& segment : request.segments) total += segment.iov_len;
  return total >= min_bytes && total != 0;
}

PrefaultOutcome prefault_range(void* addr, size_t len, ThreadPool& pool, bool for_write,
                               PrefaultMethod method) {
  PrefaultOutcome outcome;
  if (addr == nullptr || len == 0) return outcome;
  const size_t page = page_size();
  const uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t last_byte = reinterpret_cast<uintptr_t>(addr) + len - 1;
  if (last_byte < first) return outcome;  // wraps around the address space
  const uintptr_t end = (last_byte | (page - 1)) + 1;
  const size_t span = end - first;

  const bool use_madvise = method == PrefaultMethod::automatic && kernel_populates();
  Protection protection;
  if (!use_madvise) {
    protection = range_protection(first, end);
    protection.writable = protection.writable && for_write;
    if (!protection.readable) {
      outcome.skipped_bytes = span;
      return outcome;
    }
  }

  const size_t threads = pool.workers() + 1;
  size_t chunk = std::max(kMinChunk, span / (threads * kChunksPerThread));
  chunk = (chunk + page - 1) & ~(page - 1);
  std::atomic<uint64_t> populated{0};
  std::vector<ThreadPool::Task> tasks;
  tasks.reserve(span / chunk + 1);
  for (uintptr_t start = first; start < end; start += chunk) {
    const size_t piece = std::min<size_t>(chunk, end - start);
    tasks.emplace_back([=, &populated]() -> Status {
      if (use_madvise) {
        if (populate_chunk(start, piece, for_write)) {
          populated.fetch_add(piece, std::memory_order_relaxed);
        }
      } else {
        touch_pages(start, start + piece, protection);
        populated.fetch_add(piece, std::memory_order_relaxed);
      }
      return ok_status();  // a chunk left alone is not a failure: the NIC has the last word
    });
  }
  (void)pool.run_batch(tasks);  // the tasks never fail
  outcome.populated_bytes = populated.load();
  outcome.skipped_bytes = span - outcome.populated_bytes;
  return outcome;
}

void prefault_for_registration(const nic::RegistrationRequest& request,
                               const PrefaultSettings& settings, bool pins_host_memory,
                               bool on_demand_paging) {
  if (!wants_prefault(request, settings.min_bytes, pins_host_memory, on_demand_paging)) return;
  ThreadPool& pool = ThreadPool::registration_pool(settings.threads);
  const bool for_write = nic_may_write(request.access);
  for (const iovec& segment : request.segments) {
    const PrefaultOutcome outcome =
        prefault_range(segment.iov_base, segment.iov_len, pool, for_write);
    if (outcome.skipped_bytes != 0 && log_enabled(LogLevel::debug)) {
      log_message(LogLevel::debug, "pre-fault of %p +%zu left %" PRIu64 " bytes to the NIC",
                  segment.iov_base, segment.iov_len, outcome.skipped_bytes);
    }
  }
}

}  // namespace hmr::core
