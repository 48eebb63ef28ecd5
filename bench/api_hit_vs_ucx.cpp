// What a caller pays for a registration through hmr's public C ABI, beside UCX 1.13's
// ucs_rcache (issue 9, item 3).  hmr is reached only through <hmr/hmr.h> and libhmr.so, as an
// application links it: a domain on the software NIC ("sim") with its registration cache on.
// UCX's rcache stands in front of a no-op registration (mem_reg stores a counter as the key),
// with UCM_EVENT_VM_UNMAPPED events on.
//
// UCX is never linked.  UCX's UCM patches libc's munmap & co. once libucm is loaded and its
// hooks are asked for, and after that hmr's memhooks monitor cannot install (hmr's "default"
// monitor then falls back to userfaultfd).  So every measurement runs in a child process forked
// from a parent that never loads UCX and never opens a domain:
//   - "ucx" child: dlopen()s libucs.so.0 (which brings libucm.so.0), forces UCM's hooks in, and
//     measures the C-ABI hit interleaved with UCX's hit in the same process (hmr's monitor there
//     is what "default" gives after UCM: userfaultfd), the 2-thread scaling of both, and UCX's
//     own miss+insert, munmap-to-invalidated and munmap cost;
//   - "memhooks", "userfaultfd" children: never load UCX; hmr's miss+insert,
//     munmap-to-invalidated and the application's munmap under that monitor;
//   - "none" child: the application's munmap with no monitor at all;
//   - two memory children (hmr, UCX) for the bytes per cached region at 1M regions.
//
// Modes: default (about a minute), --quick (about 15 s, no 1M-region sizes), --flush-check (also
// how much heap flushing hmr's cache frees: the sim NIC's records), --profile-hits=N (only N
// C-ABI hits at 100k cached regions in this process, no UCX, for perf; see
// bench/profile_api_hits.sh).
// The output ends with one "RESULT metric=..." line per metric, with the target.
#include <dlfcn.h>
#include <fcntl.h>
#include <hmr/hmr.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "huge_aligned_mapping.h"
#include "paired_scaling.h"
// Only UCX's types and constants are used at compile time: its functions are looked up with
// dlsym in the child that measures UCX.
#include "ucx_noop_rcache.h"

namespace {

constexpr size_t kRegion = 4096;                  // bytes per registered region
constexpr size_t kStride = 8192;                  // regions 8 KiB apart: none touch
constexpr size_t kOrderLength = size_t{1} << 20;  // random indexes per thread (a power of two)
constexpr size_t kCountMargin = 1024;             // cache_max_count = regions + this
constexpr size_t kThreadRegions = 100000;
constexpr size_t kMissRegions = 100000;
constexpr size_t kProfileRegions = 100000;
constexpr size_t kBystanderRegions = 1000;        // cached elsewhere while munmap is timed
constexpr uint64_t kAccess = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
const size_t kHitRegions[] = {1, 1000, 100000, 1000000};  // --quick: the first three

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, const char* detail = "") {
  std::fprintf(stderr, "hmr_api_hit_vs_ucx: %s %s\n", what, detail);
  std::fflush(nullptr);
  _exit(2);
}

template <typename T>
inline void keep(const T& value) {
  asm volatile("" : : "g"(value) : "memory");
}

double ns_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::nano>(to - from).count();
}

using hmr_bench::median_of;

struct Settings {
  bool quick = false;
  size_t hit_ops = size_t{1} << 18;  // per timed run
  int hit_rounds = 9;                // timed runs of each side, alternating
  int pairs = 15;                    // 1-thread / 2-thread pairs
  int window_ms = 30;                // length of one scaling run
  int miss_rounds = 5;  // each: UCX, hmr under memhooks, hmr under userfaultfd, one child each
  int munmap_iterations = 2000;
  int munmap_reps = 5;
  size_t largest_hit_regions = 1000000;
  size_t memory_regions = 1000000;
  bool flush_check = false;  // also flush hmr's cache in the memory child (seconds at 1M)
};

void print_info(const char* text) {
  std::fputs(text, stdout);
  std::fflush(stdout);
}

// ---- memory ---------------------------------------------------------------------------

// Regions kStride apart in address space that costs nothing (huge_aligned_mapping.h).
class Mapping : public hmr::bench::HugeAlignedMapping {
 public:
  using HugeAlignedMapping::HugeAlignedMapping;
  uintptr_t region(size_t index) const { return base() + index * kStride; }
};

// A fresh 4 KiB mapping, untouched unless `touch`.  (Untouched by default: on the guest this
// was written on, freeing a touched page costs ~45 us in munmap, which would bury the monitors'
// own cost; the "none" child prints that figure.)
void* fresh_page(void* at = nullptr, bool touch = false) {
  const int fixed = at != nullptr ? MAP_FIXED_NOREPLACE : 0;
  void* page = mmap(at, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed,
                    -1, 0);
  if (page == MAP_FAILED) die("mmap of a fresh page:", std::strerror(errno));
  if (at != nullptr && page != at) die("mmap did not give back the address just unmapped");
  if (touch) *static_cast<volatile char*>(page) = 1;
  return page;
}

double heap_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

double rss_bytes() {
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return NAN;
  unsigned long size = 0, resident = 0;
  const int read = std::fscanf(statm, "%lu %lu", &size, &resident);
  std::fclose(statm);
  return read == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE))
                   : NAN;
}

// ---- hmr through the C ABI ------------------------------------------------------------

class HmrDomain {
 public:
  // monitor: "default", "memhooks", "userfaultfd" or "disabled".
  HmrDomain(const char* monitor, size_t max_count) {
    hmr_domain_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.nic = "sim";
    // hmr holds at most mr_cnt registrations at the NIC, idle cached ones included (the sim
    // NIC's default is 65536); a million cached regions need a NIC that holds as many, as
    // mlx5's max_mr (2^24) does.
    attr.nic_options = "mr_cnt=4194304";
    attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR | HMR_MR_LOCAL;  // as a verbs transport
    attr.cache_max_count = max_count;
    attr.cache_max_size = size_t{1} << 46;  // counted regions are the only limit
    attr.cache_monitor = monitor;
    if (hmr_domain_open(&attr, &domain_) != 0) {
      char what[96];
      std::snprintf(what, sizeof what, "hmr_domain_open (monitor %s):", monitor);
      die(what, hmr_last_error());
    }
    if ((attr.mr_mode & HMR_MR_PROV_KEY) == 0) die("the sim domain does not use provider keys");
    monitor_ = attr.cache_monitor != nullptr ? attr.cache_monitor : "?";
  }
  ~HmrDomain() {
    if (hmr_domain_close(domain_) != 0) die("hmr_domain_close:", hmr_last_error());
  }
  HmrDomain(const HmrDomain&) = delete;
  HmrDomain& operator=(const HmrDomain&) = delete;

  hmr_domain* get() const { return domain_; }
  const std::string& monitor() const { return monitor_; }
  hmr_domain_stats stats() const {
    hmr_domain_stats stats;
    std::memset(&stats, 0, sizeof stats);
    stats.size = sizeof stats;
    if (hmr_domain_query_stats(domain_, &stats) != 0) die("hmr_domain_query_stats:", hmr_last_error());
    return stats;
  }
  void flush() {
    if (hmr_domain_cache_flush(domain_) != 0) die("hmr_domain_cache_flush:", hmr_last_error());
  }

  // What a transport does with a registration it needs for one transfer: register, read the
  // remote key and the local descriptor, close.
  uint64_t use(uintptr_t address) const {
    hmr_mr* mr = nullptr;
    if (__builtin_expect(hmr_mr_reg(domain_, reinterpret_cast<const void*>(address), kRegion,
                                    kAccess, 0, 0, 0, &mr, nullptr) != 0,
                         0)) {
      die("hmr_mr_reg:", hmr_last_error());
    }
    const uint64_t key = hmr_mr_key(mr);
    void* desc = hmr_mr_desc(mr);
    if (__builtin_expect(key == HMR_KEY_NOTAVAIL || desc == nullptr, 0)) {
      die("an MR without key or descriptor");
    }
    if (__builtin_expect(hmr_mr_close(mr) != 0, 0)) die("hmr_mr_close:", hmr_last_error());
    return key + reinterpret_cast<uintptr_t>(desc);
  }
  // New NIC registrations so far (a miss, or a registration handed out uncached), and the time
  // the domain says they spent in the NIC.
  uint64_t registrations() const { return stats().nic_registrations; }
  uint64_t nic_ns() const { return stats().registration_ns; }
  // Both ways (registering and deregistering), from one query of the statistics.
  uint64_t nic_both_ways_ns() const {
    const hmr_domain_stats now = stats();
    return now.registration_ns + now.deregistration_ns;
  }

 private:
  hmr_domain* domain_ = nullptr;
  std::string monitor_;
};

// ---- UCX, looked up at run time ----------------------------------------------------------

template <typename Function>
Function lookup(void* library, const char* name) {
  void* address = dlsym(library, name);
  if (address == nullptr) die("dlsym:", name);
  Function function;
  static_assert(sizeof function == sizeof address);
  std::memcpy(&function, &address, sizeof function);
  return function;
}

struct UcxLibrary {
  decltype(&ucs_rcache_create) create = nullptr;
  decltype(&ucs_rcache_destroy) destroy = nullptr;
  decltype(&ucs_rcache_get) get = nullptr;
  decltype(&ucs_rcache_region_put) put = nullptr;
  decltype(&ucs_status_string) status_string = nullptr;

  // libucs.so.0 names libucm.so.0 as a dependency, so both load here.
  void load() {
    void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (ucs == nullptr) die("dlopen libucs.so.0:", dlerror());
    create = lookup<decltype(create)>(ucs, "ucs_rcache_create");
    destroy = lookup<decltype(destroy)>(ucs, "ucs_rcache_destroy");
    get = lookup<decltype(get)>(ucs, "ucs_rcache_get");
    put = lookup<decltype(put)>(ucs, "ucs_rcache_region_put");
    status_string = lookup<decltype(status_string)>(ucs, "ucs_status_string");
  }
};
UcxLibrary ucx;

using hmr_bench::UcxRegion;

class UcxCache {
 public:
  UcxCache() {
    const ucs_rcache_params_t params = hmr_bench::noop_rcache_params(&registrations_, kRegion);
    const ucs_status_t status = ucx.create(&params, "hmr-api-bench", nullptr, &rcache_);
    if (status != UCS_OK) die("ucs_rcache_create:", ucx.status_string(status));
  }
  ~UcxCache() { ucx.destroy(rcache_); }
  UcxCache(const UcxCache&) = delete;
  UcxCache& operator=(const UcxCache&) = delete;

  // The same as HmrDomain::use: get, read the key the registration stored, put.
  uint64_t use(uintptr_t address) const {
    ucs_rcache_region_t* region = nullptr;
    if (__builtin_expect(ucx.get(rcache_, reinterpret_cast<void*>(address), kRegion,
                                 PROT_READ | PROT_WRITE, nullptr, &region) != UCS_OK,
                         0)) {
      die("ucs_rcache_get failed");
    }
    const uint64_t key = reinterpret_cast<UcxRegion*>(region)->key;
    ucx.put(rcache_, region);
    return key;
  }
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }
  static uint64_t nic_ns() { return 0; }  // a no-op registration
  static uint64_t nic_both_ways_ns() { return 0; }  // and a no-op deregistration

 private:
  std::atomic<uint64_t> registrations_{0};
  ucs_rcache_t* rcache_ = nullptr;
};

// ---- populated caches ---------------------------------------------------------------------

struct Order {
  std::vector<uint32_t> index[2];  // one random walk per thread

  explicit Order(size_t regions) {
    for (unsigned t = 0; t < 2; ++t) {
      std::mt19937_64 random(0x5eed + t);
      std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(regions - 1));
      index[t].resize(kOrderLength);
      for (uint32_t& i : index[t]) i = pick(random);
    }
  }
};

struct HmrWorld {
  Mapping mapping;
  HmrDomain domain;

  HmrWorld(const char* monitor, size_t regions)
      : mapping(regions * kStride), domain(monitor, regions + kCountMargin) {
    for (size_t i = 0; i < regions; ++i) keep(domain.use(mapping.region(i)));
    const hmr_domain_stats stats = domain.stats();
    if (stats.cache_regions != regions || stats.cache_misses != regions) {
      char what[160];
      std::snprintf(what, sizeof what,
                    "populating hmr: %llu regions cached, %llu misses, %llu uncached; expected %zu",
                    static_cast<unsigned long long>(stats.cache_regions),
                    static_cast<unsigned long long>(stats.cache_misses),
                    static_cast<unsigned long long>(stats.cache_uncached), regions);
      die(what);
    }
  }
};

struct UcxWorld {
  Mapping mapping;
  UcxCache cache;

  explicit UcxWorld(size_t regions) : mapping(regions * kStride) {
    for (size_t i = 0; i < regions; ++i) keep(cache.use(mapping.region(i)));
    if (cache.registrations() != regions) die("populating UCX: not one registration per region");
  }
};

// ops uses of the regions named by order[first .. first + ops) (wrapping), ns per use.
template <typename Cache>
double timed_hits(const Cache& cache, const Mapping& mapping, const uint32_t* order, size_t first,
                  size_t ops) {
  uint64_t sum = 0;
  const auto started = Clock::now();
  for (size_t i = first; i < first + ops; ++i) {
    sum += cache.use(mapping.region(order[i & (kOrderLength - 1)]));
  }
  const auto finished = Clock::now();
  keep(sum);
  return ns_between(started, finished) / static_cast<double>(ops);
}

// hmr's hit, checked: the domain's hit counter must grow by exactly the number of uses.
double hmr_hits(const HmrWorld& world, const uint32_t* order, size_t first, size_t ops) {
  const uint64_t hits_before = world.domain.stats().cache_hits;
  const double ns = timed_hits(world.domain, world.mapping, order, first, ops);
  const uint64_t hits = world.domain.stats().cache_hits - hits_before;
  if (hits != ops) {
    char what[128];
    std::snprintf(what, sizeof what, "%llu of %zu C-ABI registrations were cache hits",
                  static_cast<unsigned long long>(hits), ops);
    die(what);
  }
  return ns;
}

double ucx_hits(const UcxWorld& world, const uint32_t* order, size_t first, size_t ops) {
  const uint64_t registrations = world.cache.registrations();
  const double ns = timed_hits(world.cache, world.mapping, order, first, ops);
  if (world.cache.registrations() != registrations) die("a UCX hit registered anew");
  return ns;
}

// ---- results from the children ---------------------------------------------------------------

// A child writes "n <key> <number>" and "s <key> <text>" lines to the parent's pipe.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}
  void number(const std::string& key, double value) const {
    dprintf(fd_, "n %s %.17g\n", key.c_str(), value);
  }
  void text(const std::string& key, const std::string& value) const {
    dprintf(fd_, "s %s %s\n", key.c_str(), value.c_str());
  }

 private:
  int fd_;
};

struct Results {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> texts;

  double number(const std::string& key) const {
    const auto found = numbers.find(key);
    return found == numbers.end() ? NAN : found->second;
  }
  std::string text(const std::string& key) const {
    const auto found = texts.find(key);
    return found == texts.end() ? std::string("?") : found->second;
  }
};

// CPU seconds the whole machine spent busy so far.
double machine_busy_seconds() {
  FILE* stat = std::fopen("/proc/stat", "r");
  if (stat == nullptr) return NAN;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  const int fields = std::fscanf(stat, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice,
                                 &system, &idle, &iowait, &irq, &softirq);
  std::fclose(stat);
  if (fields != 7) return NAN;
  return static_cast<double>(user + nice + system + irq + softirq) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

double children_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Runs body(sink) in a child forked from this single-threaded parent and merges what it
// reports into `results`.  Also reports how busy the rest of the machine was meanwhile.
void in_child(const char* name, Results& results, const std::function<void(const Sink&)>& body) {
  int fds[2];
  if (pipe(fds) != 0) die("pipe", std::strerror(errno));
  std::fflush(nullptr);
  const double busy_before = machine_busy_seconds();
  const double children_before = children_cpu_seconds();
  const auto started = Clock::now();
  const pid_t child = fork();
  if (child < 0) die("fork", std::strerror(errno));
  if (child == 0) {
    close(fds[0]);
    body(Sink(fds[1]));
    std::fflush(nullptr);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = read(fds[0], buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const double wall = ns_between(started, Clock::now()) / 1e9;
  const double others = (machine_busy_seconds() - busy_before) -
                        (children_cpu_seconds() - children_before);
  std::printf("info: [%s] took %.1f s; other processes kept %.2f CPUs busy meanwhile%s\n", name,
              wall, std::max(0.0, others / wall),
              others / wall > 0.2 ? " (figures may be inflated: rerun when the machine is idle)"
                                  : "");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("info: [%s] FAILED (status %d): its metrics are missing below\n", name, status);
  }
  std::fflush(stdout);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t key_end = line.find(' ', 2);
    if (line.size() < 4 || key_end == std::string::npos) continue;
    const std::string key = line.substr(2, key_end - 2);
    const std::string value = line.substr(key_end + 1);
    if (line[0] == 'n') results.numbers[key] = std::strtod(value.c_str(), nullptr);
    if (line[0] == 's') results.texts[key] = value;
  }
}

// ---- measurements ----------------------------------------------------------------------------

// How fast this CPU runs two kinds of work right now, in ns per step: `alu`, independent
// additions (throughput-bound, as hmr's hit is: some 500 instructions, no locked one) and
// `locked`, one locked add after another (latency-bound, as UCX's hit is around its rwlock).
// On shared virtual machines the first swings by up to 2x from one second to the next, when
// the host runs something on the sibling hyperthread, while the second moves by a third; a
// ratio taken while `alu` is slow is then not the ratio taken while it is fast.  Printed with
// every hit figure so that a run says which state it was taken in (docs/performance.md).
struct MachineState {
  double alu_ns;
  double locked_ns;
};

MachineState probe_machine() {
  constexpr size_t kAluSteps = 2000000, kLockedSteps = 250000;  // about 2 ms each
  auto started = Clock::now();
  uint64_t a = 1, b = 2, c = 3, d = 4;
  for (size_t i = 0; i < kAluSteps; ++i) {
    a += i;
    b ^= a;
    c += b >> 3;
    d += c ^ i;
    keep(d);
  }
  const double alu = ns_between(started, Clock::now()) / kAluSteps;
  std::atomic<uint64_t> counter{0};
  started = Clock::now();
  for (size_t i = 0; i < kLockedSteps; ++i) counter.fetch_add(1, std::memory_order_relaxed);
  const double locked = ns_between(started, Clock::now()) / kLockedSteps;
  keep(counter.load());
  return {alu, locked};
}

// C-ABI hit against UCX's hit, both populated side by side in this process, short runs of each
// alternating; medians.  The machine's state is probed between rounds.
void interleaved_hits(const Settings& settings, const Sink& sink) {
  for (const size_t regions : kHitRegions) {
    if (regions > settings.largest_hit_regions) continue;
    const auto started = Clock::now();
    const Order order(regions);
    auto hmr_owner = std::make_unique<HmrWorld>("default", regions);
    auto ucx_owner = std::make_unique<UcxWorld>(regions);
    const HmrWorld& hmr_world = *hmr_owner;
    const UcxWorld& ucx_world = *ucx_owner;
    const uint32_t* walk = order.index[0].data();
    (void)hmr_hits(hmr_world, walk, 0, settings.hit_ops);  // warm both
    (void)ucx_hits(ucx_world, walk, 0, settings.hit_ops);
    std::vector<double> hmr_runs, ucx_runs, alu_runs, locked_runs;
    for (int round = 0; round < settings.hit_rounds; ++round) {
      const MachineState state = probe_machine();
      alu_runs.push_back(state.alu_ns);
      locked_runs.push_back(state.locked_ns);
      const size_t first = static_cast<size_t>(round) * settings.hit_ops;
      if (round % 2 == 0) {
        hmr_runs.push_back(hmr_hits(hmr_world, walk, first, settings.hit_ops));
        ucx_runs.push_back(ucx_hits(ucx_world, walk, first, settings.hit_ops));
      } else {
        ucx_runs.push_back(ucx_hits(ucx_world, walk, first, settings.hit_ops));
        hmr_runs.push_back(hmr_hits(hmr_world, walk, first, settings.hit_ops));
      }
    }
    const std::string at = std::to_string(regions);
    sink.number("hit.hmr." + at, median_of(hmr_runs));
    sink.number("hit.ucx." + at, median_of(ucx_runs));
    sink.number("hit.alu." + at, median_of(alu_runs));
    sink.number("hit.locked." + at, median_of(locked_runs));
    sink.text("hit.monitor", hmr_world.domain.monitor());
    char line[384];
    std::snprintf(line, sizeof line,
                  "info: C-ABI hit at %zu regions (hmr monitor %s): hmr %.1f ns (runs %.1f-%.1f), "
                  "ucx %.1f ns (runs %.1f-%.1f); machine: alu %.2f ns (%.2f-%.2f), locked add "
                  "%.2f ns; %.1f s with populating\n",
                  regions, hmr_world.domain.monitor().c_str(), median_of(hmr_runs),
                  *std::min_element(hmr_runs.begin(), hmr_runs.end()),
                  *std::max_element(hmr_runs.begin(), hmr_runs.end()), median_of(ucx_runs),
                  *std::min_element(ucx_runs.begin(), ucx_runs.end()),
                  *std::max_element(ucx_runs.begin(), ucx_runs.end()), median_of(alu_runs),
                  *std::min_element(alu_runs.begin(), alu_runs.end()),
                  *std::max_element(alu_runs.begin(), alu_runs.end()), median_of(locked_runs),
                  ns_between(started, Clock::now()) / 1e9);
    print_info(line);
    if (regions == settings.largest_hit_regions) {
      // The last measurement of this child, which exits next: tearing down a million
      // registrations would take seconds (the sim NIC's deregistration), so it is skipped.
      (void)hmr_owner.release();
      (void)ucx_owner.release();
    }
  }
}

using hmr_bench::Scaling;

Scaling paired_scaling(const Settings& settings,
                       const std::function<void(int, size_t, size_t)>& work) {
  return hmr_bench::paired_scaling(std::chrono::milliseconds(settings.window_ms), settings.pairs,
                                   work);
}

void thread_scaling(const Settings& settings, const Sink& sink) {
  const Order order(kThreadRegions);
  auto report = [&](const char* who, const Scaling& scaling) {
    const std::string prefix = std::string("scaling.") + who + ".";
    sink.number(prefix + "ratio", scaling.ratio);
    sink.number(prefix + "mops1", scaling.mops_1);
    sink.number(prefix + "mops2", scaling.mops_2);
    char line[192];
    std::snprintf(line, sizeof line,
                  "info: %s C-ABI hit at %zu regions, median of %d pairs: 1 thread %.2f Mops/s, "
                  "2 threads %.2f Mops/s, ratio %.3f\n",
                  who, kThreadRegions, settings.pairs, scaling.mops_1, scaling.mops_2,
                  scaling.ratio);
    print_info(line);
  };
  // The machine's own ceiling: ALU work only, no shared memory.
  const Scaling alu = paired_scaling(settings, [](int, size_t, size_t ops) {
    uint64_t x = 1;
    for (size_t i = 0; i < ops * 16; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    keep(x);
  });
  sink.number("scaling.alu.ratio", alu.ratio);
  {
    const HmrWorld world("default", kThreadRegions);
    const uint64_t hits_before = world.domain.stats().cache_hits;
    const Scaling scaling = paired_scaling(settings, [&](int thread, size_t first, size_t ops) {
      const uint32_t* walk = order.index[thread].data();
      uint64_t sum = 0;
      for (size_t i = first; i < first + ops; ++i) {
        sum += world.domain.use(world.mapping.region(walk[i & (kOrderLength - 1)]));
      }
      keep(sum);
    });
    if (world.domain.stats().cache_hits - hits_before != scaling.ops) {
      die("2-thread runs: not every C-ABI registration was a cache hit");
    }
    report("hmr", scaling);
  }
  {
    const UcxWorld world(kThreadRegions);
    const Scaling scaling = paired_scaling(settings, [&](int thread, size_t first, size_t ops) {
      const uint32_t* walk = order.index[thread].data();
      uint64_t sum = 0;
      for (size_t i = first; i < first + ops; ++i) {
        sum += world.cache.use(world.mapping.region(walk[i & (kOrderLength - 1)]));
      }
      keep(sum);
    });
    if (world.cache.registrations() != kThreadRegions) die("2-thread runs: a UCX hit registered");
    report("ucx", scaling);
  }
  char line[128];
  std::snprintf(line, sizeof line, "info: machine ceiling (ALU only) 2-thread/1-thread %.3f\n",
                alu.ratio);
  print_info(line);
}

// ns per first registration of a new region, as the cache grows from empty to `regions`:
// register, read key and descriptor, close.  For hmr also the same less the time the domain
// says it spent in the NIC (the sim NIC's registration, which UCX's no-op does not have).
// One round each, in a child of its own: the parent alternates hmr's and UCX's rounds
// (miss_rounds()), so that both sides of a ratio are taken at nearly the same moment.
void hmr_miss_insert(const char* monitor, int round, const Sink& sink) {
  const Mapping mapping(kMissRegions * kStride);
  const HmrDomain domain(monitor, kMissRegions + kCountMargin);
  const hmr_domain_stats before = domain.stats();
  uint64_t sum = 0;
  const auto started = Clock::now();
  for (size_t i = 0; i < kMissRegions; ++i) sum += domain.use(mapping.region(i));
  const double ns = ns_between(started, Clock::now()) / static_cast<double>(kMissRegions);
  keep(sum);
  const hmr_domain_stats after = domain.stats();
  if (after.cache_misses - before.cache_misses != kMissRegions ||
      after.cache_hits != before.cache_hits || after.cache_regions != kMissRegions) {
    die("miss+insert: not every first registration was a miss that stayed cached");
  }
  const std::string prefix = std::string("miss.") + monitor + ".";
  const std::string at = "." + std::to_string(round);
  sink.number(prefix + "total" + at, ns);
  sink.number(prefix + "above_nic" + at,
              ns - static_cast<double>(after.registration_ns - before.registration_ns) /
                       static_cast<double>(kMissRegions));
  sink.text(prefix + "used", domain.monitor());
}

void ucx_miss_insert(int round, const Sink& sink) {
  ucx.load();
  const Mapping mapping(kMissRegions * kStride);
  const UcxCache cache;
  uint64_t sum = 0;
  const auto started = Clock::now();
  for (size_t i = 0; i < kMissRegions; ++i) sum += cache.use(mapping.region(i));
  const double ns = ns_between(started, Clock::now()) / static_cast<double>(kMissRegions);
  keep(sum);
  if (cache.registrations() != kMissRegions) die("UCX miss+insert: a first get hit");
  sink.number("miss.ucx.total." + std::to_string(round), ns);
}

// munmap() of a registered, cached 4 KiB page, then the next registration of that address,
// which must be a miss (a new registration).  The page is mapped again at the same address
// between the two (untimed), as an application reusing the address would.  Also the same less
// the time the NIC spent on it, as the domain reports it: the new registration and the old
// one's deregistration (0 for UCX, whose registration callbacks do nothing).
struct Invalidated {
  double ns = NAN;
  double above_nic_ns = NAN;
};

template <typename Cache>
Invalidated munmap_to_invalidated(const Settings& settings, const Cache& cache) {
  std::vector<double> reps, reps_above_nic;
  std::vector<double> each(static_cast<size_t>(settings.munmap_iterations));
  std::vector<double> each_above_nic(each.size());
  for (int rep = 0; rep < settings.munmap_reps; ++rep) {
    for (int i = 0; i < settings.munmap_iterations; ++i) {
      void* page = fresh_page();
      const auto address = reinterpret_cast<uintptr_t>(page);
      keep(cache.use(address));
      const uint64_t registered = cache.registrations();
      const uint64_t nic_ns = cache.nic_both_ways_ns();

      const auto unmapping = Clock::now();
      munmap(page, kRegion);
      const auto unmapped = Clock::now();
      void* again = fresh_page(page);
      const auto registering = Clock::now();
      keep(cache.use(address));
      const auto registered_again = Clock::now();

      if (cache.registrations() != registered + 1) {
        die("munmap-to-invalidated: the registration after munmap was not a new one (stale hit)");
      }
      const double ns = ns_between(unmapping, unmapped) + ns_between(registering, registered_again);
      each[static_cast<size_t>(i)] = ns;
      // The NIC's time both ways: the old registration is deregistered on the way (UCX's
      // deregistration, like its registration, is a no-op).
      const uint64_t nic_after = cache.nic_both_ways_ns();
      each_above_nic[static_cast<size_t>(i)] = ns - static_cast<double>(nic_after - nic_ns);
      munmap(again, kRegion);
    }
    reps.push_back(median_of(each));
    reps_above_nic.push_back(median_of(each_above_nic));
  }
  return Invalidated{median_of(reps), median_of(reps_above_nic)};
}

// What the application's own munmap of a fresh (touched) 4 KiB mapping costs: not registered,
// and registered and cached just before (the monitor must act on it).  `use` registers.
template <typename Use>
void app_munmap(const Settings& settings, const char* monitor, const Sink& sink, Use&& use,
                bool touch = false) {
  std::vector<double> registered, plain;
  std::vector<double> each(static_cast<size_t>(settings.munmap_iterations));
  for (int rep = 0; rep < settings.munmap_reps; ++rep) {
    for (const bool with_registration : {false, true}) {
      for (int i = 0; i < settings.munmap_iterations; ++i) {
        void* page = fresh_page(nullptr, touch);
        if (with_registration) use(reinterpret_cast<uintptr_t>(page));
        const auto started = Clock::now();
        munmap(page, kRegion);
        each[static_cast<size_t>(i)] = ns_between(started, Clock::now());
      }
      (with_registration ? registered : plain).push_back(median_of(each));
    }
  }
  const std::string prefix =
      std::string("app_munmap.") + monitor + (touch ? ".touched." : ".");
  sink.number(prefix + "plain", median_of(plain));
  sink.number(prefix + "registered", median_of(registered));
}

// A child that never loads UCX: hmr's figures under one monitor ("memhooks", "userfaultfd").
void hmr_monitor_child(const Settings& settings, const char* monitor, const Sink& sink) {
  {
    const HmrDomain domain(monitor, kCountMargin);
    const Invalidated invalidated = munmap_to_invalidated(settings, domain);
    sink.number(std::string("invalidated.") + monitor, invalidated.above_nic_ns);
    sink.number(std::string("invalidated_with_nic.") + monitor, invalidated.ns);
  }
  {
    // Other regions stay cached while the munmaps are timed, as in an application.
    const HmrWorld bystanders(monitor, kBystanderRegions);
    app_munmap(settings, monitor, sink,
               [&](uintptr_t address) { keep(bystanders.domain.use(address)); });
  }
  // For reference: the C-ABI hit alone (no UCX in the process), under this monitor.
  for (const size_t regions : {size_t{1000}, size_t{100000}}) {
    const Order order(regions);
    const HmrWorld world(monitor, regions);
    (void)hmr_hits(world, order.index[0].data(), 0, settings.hit_ops);
    std::vector<double> runs;
    for (int round = 0; round < settings.hit_rounds; ++round) {
      runs.push_back(hmr_hits(world, order.index[0].data(),
                              static_cast<size_t>(round) * settings.hit_ops, settings.hit_ops));
    }
    sink.number(std::string("alone_hit.") + monitor + "." + std::to_string(regions),
                median_of(runs));
  }
}

void none_child(const Settings& settings, const Sink& sink) {
  // A domain with caching off: "registered" then means registered and deregistered at close.
  const HmrDomain domain("disabled", 0);
  app_munmap(settings, "none", sink, [&](uintptr_t address) { keep(domain.use(address)); });
  app_munmap(settings, "none", sink, [&](uintptr_t address) { keep(domain.use(address)); },
             /*touch=*/true);
}

// The child with UCX in it.
void ucx_child(const Settings& settings, const Sink& sink) {
  ucx.load();
  // Ask for UCM's hooks before hmr opens any domain, so hmr sees libc as patched, as it will in
  // any process where UCX is in use.
  const UcxCache bootstrap;
  thread_scaling(settings, sink);
  {
    const UcxCache cache;
    sink.number("invalidated.ucx", munmap_to_invalidated(settings, cache).ns);
  }
  {
    const UcxWorld bystanders(kBystanderRegions);
    app_munmap(settings, "ucm", sink,
               [&](uintptr_t address) { keep(bystanders.cache.use(address)); });
  }
  interleaved_hits(settings, sink);  // last: it leaves its largest caches to the exit
}

void memory_child(bool with_ucx, size_t regions, bool flush, const Sink& sink) {
  if (with_ucx) ucx.load();
  // hmr's memory interfaces load the device runtimes present (libcuda on a GPU machine, a few
  // MB of its own) at the first call that needs them; an application that uses them has them
  // loaded anyway, so they are loaded before the baseline, not counted per region.
  hmr_hmem_iface detected = HMR_HMEM_SYSTEM;
  hmr_mem_kind kind = HMR_MEM_HOST;
  const int local = 0;
  if (!with_ucx && hmr_detect_memory_type(&local, sizeof local, &detected, &kind) != 0) {
    die("hmr_detect_memory_type:", hmr_last_error());
  }
  const Mapping mapping(regions * kStride);
  const double heap_before = heap_bytes();
  const double rss_before = rss_bytes();
  const auto per_region = [regions](double bytes) {
    return bytes / static_cast<double>(regions);
  };
  if (with_ucx) {
    auto* cache = new UcxCache();  // never destroyed: the child exits
    for (size_t i = 0; i < regions; ++i) keep(cache->use(mapping.region(i)));
    sink.number("memory.ucx.heap", per_region(heap_bytes() - heap_before));
    sink.number("memory.ucx.rss", per_region(rss_bytes() - rss_before));
    return;
  }
  auto* domain = new HmrDomain("default", regions + kCountMargin);  // never closed
  for (size_t i = 0; i < regions; ++i) keep(domain->use(mapping.region(i)));
  if (domain->stats().cache_regions != regions) die("memory: not every region cached");
  const double heap_full = heap_bytes();
  const double rss_full = rss_bytes();
  sink.number("memory.hmr.heap", per_region(heap_full - heap_before));
  sink.number("memory.hmr.rss", per_region(rss_full - rss_before));
  if (flush) {
    // Flushing deregisters every cached registration on the sim NIC, which frees the sim NIC's
    // records (malloc'ed); hmr's cache entries go back to its slabs, which stay mapped.  What
    // heap stays is the sim NIC's hash tables' bucket arrays, which never shrink.
    domain->flush();
    sink.number("memory.hmr.nic_heap", per_region(heap_full - heap_bytes()));
  }
  sink.text("memory.hmr.monitor", domain->monitor());
}

// ---- --profile-hits=N --------------------------------------------------------------------

// perf record --control=fifo:CTL,ACK -D -1 starts with events off; with HMR_BENCH_PERF_CTL and
// HMR_BENCH_PERF_ACK naming the two fifos, only the hits are recorded.
void perf_control(const char* command) {
  const char* control = std::getenv("HMR_BENCH_PERF_CTL");
  const char* ack = std::getenv("HMR_BENCH_PERF_ACK");
  if (control == nullptr || ack == nullptr) return;
  const int out = open(control, O_WRONLY | O_CLOEXEC);
  if (out < 0) die("opening HMR_BENCH_PERF_CTL:", std::strerror(errno));
  if (write(out, command, std::strlen(command)) < 0) die("perf control:", std::strerror(errno));
  close(out);
  const int in = open(ack, O_RDONLY | O_CLOEXEC);
  if (in < 0) die("opening HMR_BENCH_PERF_ACK:", std::strerror(errno));
  char answer[16];
  if (read(in, answer, sizeof answer) < 0) die("perf ack:", std::strerror(errno));
  close(in);
}

int profile_hits(unsigned long long hits, size_t regions, const char* monitor) {
  const Order order(regions);
  const HmrWorld world(monitor, regions);
  std::printf("info: %zu regions cached, hmr monitor %s; running %llu C-ABI hits\n", regions,
              world.domain.monitor().c_str(), hits);
  std::fflush(stdout);
  const uint64_t hits_before = world.domain.stats().cache_hits;
  perf_control("enable\n");
  const double ns = timed_hits(world.domain, world.mapping, order.index[0].data(), 0,
                               static_cast<size_t>(hits));
  perf_control("disable\n");
  if (world.domain.stats().cache_hits - hits_before != hits) die("profile: not every use hit");
  std::printf("info: %.1f ns per C-ABI hit (hmr_mr_reg + hmr_mr_key + hmr_mr_desc + hmr_mr_close)\n",
              ns);
  return 0;
}

// --profile-misses=N: N first registrations (miss + insert) under the chosen monitor, for perf.
int profile_misses(size_t misses, const char* monitor) {
  const Mapping mapping(misses * kStride);
  const HmrDomain domain(monitor, misses + kCountMargin);
  std::printf("info: hmr monitor %s; running %zu C-ABI misses (register, key, desc, close)\n",
              domain.monitor().c_str(), misses);
  std::fflush(stdout);
  const hmr_domain_stats before = domain.stats();
  uint64_t sum = 0;
  perf_control("enable\n");
  const auto started = Clock::now();
  for (size_t i = 0; i < misses; ++i) sum += domain.use(mapping.region(i));
  const double ns = ns_between(started, Clock::now()) / static_cast<double>(misses);
  perf_control("disable\n");
  keep(sum);
  const hmr_domain_stats after = domain.stats();
  if (after.cache_misses - before.cache_misses != misses) die("profile: not every use missed");
  const double nic = static_cast<double>(after.registration_ns - before.registration_ns) /
                     static_cast<double>(misses);
  std::printf("info: %.1f ns per C-ABI miss+insert, %.1f ns of it in the NIC as the domain "
              "reports it\n", ns, nic);
  return 0;
}

// ---- output ------------------------------------------------------------------------------

// miss+insert: rounds of three children back to back (UCX; hmr under memhooks; hmr under
// userfaultfd), so that each hmr figure has a UCX figure taken moments before it.  Leaves in
// `results` the median of each side and, per monitor, the median of the rounds' own ratios
// (this machine's speed drifts within seconds; a ratio of medians taken apart would carry it).
void miss_rounds(const Settings& settings, Results& results) {
  for (int round = 0; round < settings.miss_rounds; ++round) {
    in_child("miss+insert ucx", results,
             [&](const Sink& sink) { ucx_miss_insert(round, sink); });
    for (const char* monitor : {"memhooks", "userfaultfd"}) {
      const std::string name = std::string("miss+insert hmr ") + monitor;
      in_child(name.c_str(), results,
               [&](const Sink& sink) { hmr_miss_insert(monitor, round, sink); });
    }
  }
  const auto series = [&](const std::string& key) {
    std::vector<double> values;
    for (int round = 0; round < settings.miss_rounds; ++round) {
      values.push_back(results.number(key + "." + std::to_string(round)));
    }
    return values;
  };
  const std::vector<double> ucx_rounds = series("miss.ucx.total");
  results.numbers["miss.ucx.total"] = median_of(ucx_rounds);
  for (const char* monitor : {"memhooks", "userfaultfd"}) {
    const std::string prefix = std::string("miss.") + monitor + ".";
    const std::vector<double> above = series(prefix + "above_nic");
    std::vector<double> ratios;
    for (size_t i = 0; i < above.size(); ++i) ratios.push_back(above[i] / ucx_rounds[i]);
    results.numbers[prefix + "above_nic"] = median_of(above);
    results.numbers[prefix + "total"] = median_of(series(prefix + "total"));
    results.numbers[prefix + "ratio"] = median_of(ratios);
    std::string line = "info: miss+insert " + std::string(monitor) + ", hmr above the NIC / UCX by round:";
    for (size_t i = 0; i < above.size(); ++i) {
      char one[64];
      std::snprintf(one, sizeof one, " %.0f/%.0f", above[i], ucx_rounds[i]);
      line += one;
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string fixed(double value, int decimals) {
  if (std::isnan(value)) return "nan";
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

const char* verdict(bool known, bool met) {
  if (!known) return "unknown";
  return met ? "yes" : "no";
}

void load_line(const char* when) {
  double load[3] = {NAN, NAN, NAN};
  FILE* file = std::fopen("/proc/loadavg", "r");
  if (file != nullptr) {
    if (std::fscanf(file, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = NAN;
    std::fclose(file);
  }
  std::printf("info: load average %s: %.2f %.2f %.2f (%ld CPUs)\n", when, load[0], load[1],
              load[2], sysconf(_SC_NPROCESSORS_ONLN));
}

void usage() {
  std::printf(
      "usage: hmr_api_hit_vs_ucx [--quick] [--flush-check] [--profile-hits=N]\n"
      "  (no option)        every metric, about a minute\n"
      "  --quick            fewer and shorter runs, no 1M-region sizes, about 15 s\n"
      "  --flush-check      also show how much heap flushing hmr's cache frees at 1M regions\n"
      "                     (the sim NIC's records; adds seconds)\n"
      "  --profile-hits=N   only N C-ABI hits at %zu cached regions (no UCX), for perf\n"
      "  --profile-regions=R  with --profile-hits: R cached regions instead\n"
      "  --profile-monitor=M  with --profile-hits/--profile-misses: hmr monitor M (memhooks,\n"
      "                     userfaultfd, ...)\n"
      "  --profile-misses=N only N C-ABI misses (first registrations, no UCX), for perf\n",
      kProfileRegions);
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  unsigned long long profile = 0;
  size_t profile_regions = kProfileRegions;
  std::string profile_monitor = "default";
  size_t profile_miss_count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--quick") {
      settings.quick = true;
      settings.hit_ops = size_t{1} << 16;
      settings.hit_rounds = 5;
      settings.pairs = 7;
      settings.window_ms = 20;
      settings.miss_rounds = 2;
      settings.munmap_iterations = 300;
      settings.munmap_reps = 3;
      settings.largest_hit_regions = 100000;
      settings.memory_regions = 100000;
    } else if (argument.rfind("--profile-regions=", 0) == 0) {
      profile_regions = std::strtoull(argument.c_str() + 18, nullptr, 10);
      if (profile_regions == 0 || profile_regions > (size_t{1} << 24)) {
        usage();
        return 1;
      }
    } else if (argument.rfind("--profile-misses=", 0) == 0) {
      profile_miss_count = std::strtoull(argument.c_str() + 17, nullptr, 10);
      if (profile_miss_count == 0 || profile_miss_count > (size_t{1} << 24)) {
        usage();
        return 1;
      }
    } else if (argument.rfind("--profile-monitor=", 0) == 0) {
      profile_monitor = argument.substr(18);
    } else if (argument == "--flush-check") {
      settings.flush_check = true;
    } else if (argument.rfind("--profile-hits=", 0) == 0) {
      profile = std::strtoull(argument.c_str() + 15, nullptr, 10);
      if (profile == 0) {
        usage();
        return 1;
      }
    } else {
      usage();
      return argument == "--help" || argument == "-h" ? 0 : 1;
    }
  }
  if (profile_miss_count != 0) return profile_misses(profile_miss_count, profile_monitor.c_str());
  if (profile != 0) return profile_hits(profile, profile_regions, profile_monitor.c_str());

  std::printf("info: hmr through its C ABI (libhmr %u.%u.%u, sim NIC, cache on) against UCX's "
              "ucs_rcache (no-op registration, UCM_EVENT_VM_UNMAPPED); %s mode\n",
              hmr_version() >> 16, (hmr_version() >> 8) & 0xff, hmr_version() & 0xff,
              settings.quick ? "quick" : "default");
  std::printf("info: UCX's UCM patches libc's munmap once loaded, and hmr's memhooks monitor cannot "
              "install after it: memhooks figures come from child processes that never load UCX; "
              "the side-by-side hits run in the UCX child, where hmr's default monitor is what "
              "it falls back to there\n");
  load_line("at start");
  const auto started = Clock::now();

  Results results;
  // Memory first, each in a child forked before any thread exists.
  in_child("memory hmr", results, [&](const Sink& sink) {
    memory_child(false, settings.memory_regions, settings.flush_check, sink);
  });
  in_child("memory ucx", results, [&](const Sink& sink) {
    memory_child(true, settings.memory_regions, false, sink);
  });
  in_child("hmr memhooks, no UCX", results,
           [&](const Sink& sink) { hmr_monitor_child(settings, "memhooks", sink); });
  in_child("hmr userfaultfd, no UCX", results,
           [&](const Sink& sink) { hmr_monitor_child(settings, "userfaultfd", sink); });
  in_child("no monitor", results, [&](const Sink& sink) { none_child(settings, sink); });
  miss_rounds(settings, results);
  in_child("ucx + hmr side by side", results,
           [&](const Sink& sink) { ucx_child(settings, sink); });

  std::printf("info: whole run %.1f s\n", ns_between(started, Clock::now()) / 1e9);
  load_line("at end");
  const Results& r = results;
  std::printf("info: hmr C-ABI hit alone (no UCX loaded): memhooks %.1f ns at 1k, %.1f ns at "
              "100k regions; userfaultfd %.1f / %.1f ns\n",
              r.number("alone_hit.memhooks.1000"), r.number("alone_hit.memhooks.100000"),
              r.number("alone_hit.userfaultfd.1000"), r.number("alone_hit.userfaultfd.100000"));
  std::printf("info: miss+insert including the sim NIC's registration: memhooks %.1f ns, "
              "userfaultfd %.1f ns (RESULT hmr= is this less the NIC time the domain reports)\n",
              r.number("miss.memhooks.total"), r.number("miss.userfaultfd.total"));
  std::printf("info: bytes per region through the C ABI at %zu regions: hmr heap %.1f, RSS %.1f, "
              "heap freed by flushing the cache (--flush-check) %.1f; ucx heap %.1f, "
              "RSS %.1f\n",
              settings.memory_regions, r.number("memory.hmr.heap"), r.number("memory.hmr.rss"),
              r.number("memory.hmr.nic_heap"), r.number("memory.ucx.heap"),
              r.number("memory.ucx.rss"));
  std::printf("info: munmap of a fresh 4 KiB mapping written once (a page to free), no monitor: "
              "%.1f ns (the RESULT lines use untouched mappings)\n",
              r.number("app_munmap.none.touched.plain"));
  std::printf("\n");

  for (const size_t regions : kHitRegions) {
    const std::string at = std::to_string(regions);
    const double hmr = r.number("hit.hmr." + at), ucx_ns = r.number("hit.ucx." + at);
    const double ratio = hmr / ucx_ns;
    const double target = regions <= 1000 ? 0.8 : 0.6;
    std::printf("RESULT metric=api_hit_ns regions=%zu hmr=%s ucx=%s ratio=%s target=%.1f met=%s "
                "hmr_monitor=%s machine_alu_ns=%s machine_locked_ns=%s\n",
                regions, fixed(hmr, 1).c_str(), fixed(ucx_ns, 1).c_str(),
                fixed(ratio, 3).c_str(), target, verdict(!std::isnan(ratio), ratio <= target),
                r.text("hit.monitor").c_str(), fixed(r.number("hit.alu." + at), 2).c_str(),
                fixed(r.number("hit.locked." + at), 2).c_str());
  }
  {
    const double hmr = r.number("scaling.hmr.ratio"), ucx_ratio = r.number("scaling.ucx.ratio");
    std::printf("RESULT metric=api_hit_2thread_scaling regions=%zu hmr=%s ucx=%s ratio=%s "
                "target=1.8 met=%s hmr_mops_1=%s hmr_mops_2=%s ucx_mops_1=%s ucx_mops_2=%s "
                "machine_alu=%s\n",
                kThreadRegions, fixed(hmr, 3).c_str(), fixed(ucx_ratio, 3).c_str(),
                fixed(hmr / ucx_ratio, 3).c_str(), verdict(!std::isnan(hmr), hmr >= 1.8),
                fixed(r.number("scaling.hmr.mops1"), 2).c_str(),
                fixed(r.number("scaling.hmr.mops2"), 2).c_str(),
                fixed(r.number("scaling.ucx.mops1"), 2).c_str(),
                fixed(r.number("scaling.ucx.mops2"), 2).c_str(),
                fixed(r.number("scaling.alu.ratio"), 3).c_str());
  }
  const double ucx_miss = r.number("miss.ucx.total");
  for (const char* monitor : {"memhooks", "userfaultfd"}) {
    const std::string prefix = std::string("miss.") + monitor + ".";
    const double above = r.number(prefix + "above_nic");
    const double total = r.number(prefix + "total");
    const bool memhooks = std::strcmp(monitor, "memhooks") == 0;
    // The ratio is the median of the rounds' own ratios (miss_rounds()).
    const double ratio = r.number(prefix + "ratio");
    const bool met = memhooks ? ratio <= 2 : above <= 800;
    std::printf("RESULT metric=miss_insert_ns monitor=%s regions=%zu hmr=%s ucx=%s ratio=%s "
                "target=%s met=%s hmr_with_nic=%s rounds=%d\n",
                monitor, kMissRegions, fixed(above, 1).c_str(), fixed(ucx_miss, 1).c_str(),
                fixed(ratio, 3).c_str(), memhooks ? "2x_ucx" : "800ns",
                verdict(!std::isnan(above) && (!memhooks || !std::isnan(ratio)), met),
                fixed(total, 1).c_str(), settings.miss_rounds);
  }
  const double ucx_invalidated = r.number("invalidated.ucx");
  for (const char* monitor : {"memhooks", "userfaultfd"}) {
    const double hmr = r.number(std::string("invalidated.") + monitor);
    const bool memhooks = std::strcmp(monitor, "memhooks") == 0;
    std::printf("RESULT metric=munmap_invalidated_ns monitor=%s hmr=%s ucx=%s ratio=%s target=%s "
                "met=%s hmr_with_nic=%s\n",
                monitor, fixed(hmr, 1).c_str(), fixed(ucx_invalidated, 1).c_str(),
                fixed(hmr / ucx_invalidated, 3).c_str(), memhooks ? "2x_ucx" : "none",
                memhooks ? verdict(!std::isnan(hmr / ucx_invalidated), hmr <= 2 * ucx_invalidated)
                         : "n/a",
                fixed(r.number(std::string("invalidated_with_nic.") + monitor), 1).c_str());
  }
  {
    // hmr's cache keeps its entries and index in mapped slabs; on the heap are the sim NIC's
    // records (and hash tables), which UCX's no-op registration does not have.  So hmr's own
    // bytes are RSS less heap; UCX's are its RSS (heap regions plus mmap'ed page-table pools).
    const double hmr_rss = r.number("memory.hmr.rss"), hmr_heap = r.number("memory.hmr.heap");
    const double hmr = hmr_rss - hmr_heap;
    const double ucx_bytes = r.number("memory.ucx.rss");
    std::printf("RESULT metric=bytes_per_region regions=%zu hmr=%s ucx=%s ratio=%s target=128 "
                "met=%s compared=rss_less_heap:rss hmr_rss_total=%s hmr_heap_total=%s "
                "hmr_heap_freed_by_flush=%s ucx_heap=%s hmr_monitor=%s\n",
                settings.memory_regions, fixed(hmr, 1).c_str(), fixed(ucx_bytes, 1).c_str(),
                fixed(hmr / ucx_bytes, 3).c_str(), verdict(!std::isnan(hmr), hmr <= 128),
                fixed(hmr_rss, 1).c_str(), fixed(hmr_heap, 1).c_str(),
                fixed(r.number("memory.hmr.nic_heap"), 1).c_str(),
                fixed(r.number("memory.ucx.heap"), 1).c_str(),
                r.text("memory.hmr.monitor").c_str());
  }
  for (const char* monitor : {"none", "memhooks", "ucm", "userfaultfd"}) {
    const std::string prefix = std::string("app_munmap.") + monitor + ".";
    std::printf("RESULT metric=app_munmap_ns monitor=%s ns=%s registered_ns=%s\n", monitor,
                fixed(r.number(prefix + "plain"), 1).c_str(),
                fixed(r.number(prefix + "registered"), 1).c_str());
  }
  return 0;
}
