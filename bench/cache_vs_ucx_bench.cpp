// hmr's core::RegistrationCache against UCX's ucs_rcache (issue 3): the same workload, in the
// same process, one after the other.  Both stand in front of a no-op "NIC" that only hands
// out a counter-based key, and both have live invalidation: hmr with the process-wide
// UffdMonitor attached, UCX with UCM_EVENT_VM_UNMAPPED (its munmap hooks).
//
// Suites (Google Benchmark, median of 5 repetitions with a fixed iteration count):
//   hit/<cache>/<regions>        get+put of a cached 4 KiB region, random order
//   hit_mt/<cache>/100000        the same on 1 and 2 threads (total throughput)
//   miss/<cache>/100000          get of a region never seen (the cache grows), then put
//   munmap/<cache>               munmap() of a registered page, then get() of it (a miss)
//   hit_mt/baseline/100000/{0,1} the machine's own ceiling for 2 threads (no cache)
// and, before them, bytes per cached region at 1M regions, each cache in a child process of
// its own (mallinfo2 in-use + mmapped bytes; RSS as a cross-check).  After them, the 2-thread
// summary metrics come from paired runs (1 thread, then 2, alternating, median of the pairs'
// ratios), and so do the hit costs (hmr and UCX populated side by side, short runs of each
// alternating): on a small shared machine separate series drift apart by more than the effect.
//
// An info line also gives the paired hit cost at 100k regions when the caller reads the
// registration's key between get and put (hmr's hit itself never reads the entry holding it).
//
// The output ends with one "RESULT metric=... hmr=... ucx=... ratio=hmr/ucx" line per metric.
#include <benchmark/benchmark.h>
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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/registration_cache.h"
#include "monitor/uffd_monitor.h"
#include "huge_aligned_mapping.h"
#include "paired_scaling.h"
#include "ucx_noop_rcache.h"

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLimitMargin = 1024;          // hmr's max_count = regions + this
constexpr size_t kOrderLength = size_t{1} << 20;  // random indexes per thread (a power of two)
constexpr int kRepetitions = 5;
constexpr int64_t kHitIterations = int64_t{1} << 20;
constexpr int64_t kMissRegions = 100000;
constexpr int64_t kMunmapIterations = 2000;
constexpr size_t kMemoryRegions = 1000000;
constexpr int64_t kThreadRegions = 100000;
const int64_t kHitRegions[] = {1, 1000, 100000, 1000000};

[[noreturn]] void die(const char* what, const char* detail = "") {
  std::fprintf(stderr, "hmr_cache_vs_ucx: %s %s\n", what, detail);
  std::exit(2);
}

using Mapping = hmr::bench::HugeAlignedMapping;

// ---- hmr ------------------------------------------------------------------------------

class NoopBackend final : public hmr::core::CacheBackend {
 public:
  hmr::Result<hmr::nic::Registration> register_range(uintptr_t, uint64_t,
                                                     const hmr::core::CacheKey&) override {
    const uint64_t key = registrations_.fetch_add(1, std::memory_order_relaxed) + 1;
    hmr::nic::Registration registration;
    registration.handle = reinterpret_cast<void*>(static_cast<uintptr_t>(key));
    registration.key = hmr::KeyBytes::from_u64(key, sizeof key);
    return registration;
  }
  void deregister(hmr::nic::Registration&, uintptr_t, uint64_t) noexcept override {}
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> registrations_{0};
};

class HmrCache {
 public:
  using Handle = hmr::core::CacheHandle;
  static constexpr const char* kName = "hmr";

  explicit HmrCache(size_t max_count)
      : cache_(backend_, hmr::core::CacheLimits{max_count, 0},
               &hmr::core::UffdMonitor::instance()) {
    const hmr::Status attached = cache_.attach();
    if (!attached.ok()) die("attaching the userfaultfd monitor:", attached.reason().c_str());
    key_.access = HMR_READ | HMR_WRITE | HMR_REMOTE_READ | HMR_REMOTE_WRITE;
  }

  Handle get(uintptr_t address, size_t length) {
    hmr::Result<Handle> handle = cache_.get(address, length, key_);
    return handle.ok() ? *handle : Handle{};
  }
  void put(const Handle& handle) { cache_.put(handle); }
  // What a user of the registration reads next (the entry, not the index slot).
  static uint64_t key_of(const Handle& handle) { return handle.registration().key.low_u64(); }
  uint64_t registrations() const { return backend_.registrations(); }

 private:
  NoopBackend backend_;  // outlives cache_
  hmr::core::RegistrationCache cache_;
  hmr::core::CacheKey key_;
};

// ---- UCX ------------------------------------------------------------------------------

using hmr_bench::UcxRegion;

class UcxCache {
 public:
  using Handle = ucs_rcache_region_t*;
  static constexpr const char* kName = "ucx";

  explicit UcxCache(size_t) {
    const ucs_rcache_params_t params = hmr_bench::noop_rcache_params(&registrations_, kPage);
    const ucs_status_t status = ucs_rcache_create(&params, "hmr-bench", nullptr, &rcache_);
    if (status != UCS_OK) die("ucs_rcache_create:", ucs_status_string(status));
  }
  ~UcxCache() { ucs_rcache_destroy(rcache_); }
  UcxCache(const UcxCache&) = delete;
  UcxCache& operator=(const UcxCache&) = delete;

  Handle get(uintptr_t address, size_t length) {
    ucs_rcache_region_t* region = nullptr;
    if (ucs_rcache_get(rcache_, reinterpret_cast<void*>(address), length, PROT_READ | PROT_WRITE,
                       nullptr, &region) != UCS_OK) {
      return nullptr;
    }
    return region;
  }
  void put(Handle handle) { ucs_rcache_region_put(rcache_, handle); }
  static uint64_t key_of(Handle handle) { return reinterpret_cast<UcxRegion*>(handle)->key; }
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> registrations_{0};
  ucs_rcache_t* rcache_ = nullptr;
};

// ---- a populated cache, kept across the calls of one benchmark (and its threads) ------

class World {
 public:
  virtual ~World() = default;
};

template <typename Cache>
class HitWorld final : public World {
 public:
  explicit HitWorld(size_t regions) : mapping_(regions * kPage), cache_(regions + kLimitMargin) {
    for (size_t i = 0; i < regions; ++i) {
      typename Cache::Handle handle = cache_.get(mapping_.base() + i * kPage, kPage);
      if (!handle) die("populating", Cache::kName);
      cache_.put(handle);
    }
    for (unsigned t = 0; t < 2; ++t) {
      std::mt19937_64 random(0x5eed + t);
      std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(regions - 1));
      order_[t].resize(kOrderLength);
      for (uint32_t& index : order_[t]) index = pick(random);
    }
  }

  Cache& cache() { return cache_; }
  uintptr_t base() const { return mapping_.base(); }
  const uint32_t* order(int thread) const { return order_[thread % 2].data(); }

 private:
  Mapping mapping_;  // outlives cache_
  Cache cache_;
  std::vector<uint32_t> order_[2];
};

std::mutex world_mutex;
std::unique_ptr<World> world;
std::string world_name;

void drop_world() {
  std::lock_guard<std::mutex> lock(world_mutex);
  world.reset();
  world_name.clear();
}

template <typename Cache>
HitWorld<Cache>& hit_world(size_t regions) {
  const std::string name = std::string(Cache::kName) + "/" + std::to_string(regions);
  std::lock_guard<std::mutex> lock(world_mutex);
  if (world_name != name) {
    world.reset();  // one populated cache at a time
    world = std::make_unique<HitWorld<Cache>>(regions);
    world_name = name;
  }
  return static_cast<HitWorld<Cache>&>(*world);
}

// ---- suites ---------------------------------------------------------------------------

template <typename Cache>
void hit_benchmark(benchmark::State& state) {
  HitWorld<Cache>& populated = hit_world<Cache>(static_cast<size_t>(state.range(0)));
  Cache& cache = populated.cache();
  const uintptr_t base = populated.base();
  const uint32_t* order = populated.order(state.thread_index());
  size_t next = 0;
  for (auto _ : state) {
    const uintptr_t address = base + uintptr_t{order[next++ & (kOrderLength - 1)]} * kPage;
    typename Cache::Handle handle = cache.get(address, kPage);
    if (!handle) {
      state.SkipWithError("a cached region missed");
      break;
    }
    benchmark::DoNotOptimize(handle);
    cache.put(handle);
  }
  state.SetItemsProcessed(state.iterations());
}

// The machine's own ceiling for the 2-thread metric: the same random walk over a shared table
// of 128-byte lines, as many as the cache has entries.  Read-only, or (write) doing what every
// cache hit does to its entry: a locked increment and decrement of a count in its line.
class BaselineTable {
 public:
  static BaselineTable& instance() {
    static BaselineTable table(static_cast<size_t>(kThreadRegions));
    return table;
  }

  uint64_t walk(int thread, size_t first, size_t ops, bool write) {
    const uint32_t* order = order_[thread % 2].data();
    uint64_t sum = 0;
    for (size_t i = first; i < first + ops; ++i) {
      Line& line = lines_[order[i & (kOrderLength - 1)]];
      if (write) {
        line.count.fetch_add(1, std::memory_order_acquire);
        sum += line.words[0];
        line.count.fetch_sub(1, std::memory_order_release);
      } else {
        sum += line.words[0];
      }
      benchmark::DoNotOptimize(sum);
    }
    return sum;
  }

 private:
  struct alignas(64) Line {
    std::atomic<uint64_t> count{0};
    uint64_t words[15] = {};
  };

  explicit BaselineTable(size_t lines) : lines_(std::make_unique<Line[]>(lines)) {
    for (size_t i = 0; i < lines; ++i) lines_[i].words[0] = i;
    for (unsigned t = 0; t < 2; ++t) {
      std::mt19937_64 random(0x5eed + t);
      std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(lines - 1));
      order_[t].resize(kOrderLength);
      for (uint32_t& index : order_[t]) index = pick(random);
    }
  }

  std::unique_ptr<Line[]> lines_;
  std::vector<uint32_t> order_[2];
};

void baseline_benchmark(benchmark::State& state) {
  BaselineTable& table = BaselineTable::instance();
  const bool write = state.range(1) != 0;
  size_t next = 0;
  for (auto _ : state) {
    // A batch per iteration keeps the benchmark loop's own overhead out of the ratio.
    benchmark::DoNotOptimize(table.walk(state.thread_index(), next, 64, write));
    next += 64;
  }
  state.SetItemsProcessed(state.iterations() * 64);
}

template <typename Cache>
void miss_benchmark(benchmark::State& state) {
  drop_world();
  const size_t regions = static_cast<size_t>(state.range(0));
  Mapping mapping(regions * kPage);
  auto cache = std::make_unique<Cache>(regions + kLimitMargin);
  uintptr_t address = mapping.base();
  for (auto _ : state) {  // exactly `regions` iterations
    typename Cache::Handle handle = cache->get(address, kPage);
    if (!handle) {
      state.SkipWithError("registration failed");
      break;
    }
    cache->put(handle);
    address += kPage;
  }
  state.SetItemsProcessed(state.iterations());
  cache.reset();  // untimed
}

template <typename Cache>
void munmap_benchmark(benchmark::State& state) {
  drop_world();
  auto cache = std::make_unique<Cache>(kLimitMargin);
  for (auto _ : state) {
    void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (page == MAP_FAILED) die("mmap", std::strerror(errno));
    const uintptr_t address = reinterpret_cast<uintptr_t>(page);
    typename Cache::Handle handle = cache->get(address, kPage);
    if (!handle) {
      state.SkipWithError("registration failed");
      break;
    }
    cache->put(handle);
    const uint64_t registered = cache->registrations();

    const auto started = std::chrono::steady_clock::now();
    munmap(page, kPage);
    typename Cache::Handle again = cache->get(address, kPage);
    const auto finished = std::chrono::steady_clock::now();

    if (!again) {
      state.SkipWithError("get after munmap failed");
      break;
    }
    cache->put(again);
    if (cache->registrations() == registered) {
      state.SkipWithError("get after munmap hit the stale entry");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(finished - started).count());
  }
  state.SetItemsProcessed(state.iterations());
  cache.reset();
}

template <typename Cache>
void register_for(int64_t regions, bool threads) {
  const std::string name = std::string("hit/") + Cache::kName;
  benchmark::RegisterBenchmark(name.c_str(), hit_benchmark<Cache>)
      ->Arg(regions)
      ->Iterations(kHitIterations)
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->Unit(benchmark::kNanosecond);
  if (!threads) return;
  const std::string mt_name = std::string("hit_mt/") + Cache::kName;
  benchmark::RegisterBenchmark(mt_name.c_str(), hit_benchmark<Cache>)
      ->Arg(regions)
      ->Iterations(kHitIterations)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime()
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->Unit(benchmark::kNanosecond);
}

template <typename Cache>
void register_miss() {
  benchmark::RegisterBenchmark((std::string("miss/") + Cache::kName).c_str(),
                               miss_benchmark<Cache>)
      ->Arg(kMissRegions)
      ->Iterations(kMissRegions)
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->Unit(benchmark::kNanosecond);
}

template <typename Cache>
void register_munmap() {
  benchmark::RegisterBenchmark((std::string("munmap/") + Cache::kName).c_str(),
                               munmap_benchmark<Cache>)
      ->Iterations(kMunmapIterations)
      ->UseManualTime()
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->Unit(benchmark::kNanosecond);
}

void register_all() {
  // hmr and UCX interleaved per size, so both see the machine in the same state.
  for (int64_t regions : kHitRegions) {
    register_for<HmrCache>(regions, regions == kThreadRegions);
    register_for<UcxCache>(regions, regions == kThreadRegions);
  }
  benchmark::RegisterBenchmark("hit_mt/baseline", baseline_benchmark)
      ->Args({kThreadRegions, 0})
      ->Args({kThreadRegions, 1})
      ->Iterations(kHitIterations / 64)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime()
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->Unit(benchmark::kNanosecond);
  register_miss<HmrCache>();
  register_miss<UcxCache>();
  register_munmap<HmrCache>();
  register_munmap<UcxCache>();
}

// Keeps the median of every benchmark, by "function/args@threads".
class SummaryReporter final : public benchmark::ConsoleReporter {
 public:
  SummaryReporter()
      : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) {
        failed_ = true;
        continue;
      }
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[key(run.run_name.function_name, run.run_name.args, run.threads)] =
            run.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  std::optional<double> median(const std::string& function, int64_t arg, int64_t threads) const {
    return median(function, arg < 0 ? std::string() : std::to_string(arg), threads);
  }
  std::optional<double> median(const std::string& function, const std::string& args,
                               int64_t threads) const {
    const auto it = medians_.find(key(function, args, threads));
    if (it == medians_.end()) return std::nullopt;
    return it->second;
  }
  bool failed() const { return failed_; }

 private:
  static std::string key(const std::string& function, const std::string& args, int64_t threads) {
    return function + "/" + args + "@" + std::to_string(threads);
  }
  std::map<std::string, double> medians_;
  bool failed_ = false;
};

// ---- memory per region ----------------------------------------------------------------

struct MemorySample {
  double heap_bytes_per_region = 0;  // mallinfo2: in-use arena bytes + mmapped chunks
  double rss_bytes_per_region = 0;
  bool ok = false;
};

double heap_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

double rss_bytes() {
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int read = std::fscanf(statm, "%lu %lu", &size, &resident);
  std::fclose(statm);
  return read == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE))
                   : 0;
}

template <typename Cache>
MemorySample measure_memory(size_t regions) {
  Mapping mapping(regions * kPage);
  const double heap_before = heap_bytes();
  const double rss_before = rss_bytes();
  auto* cache = new Cache(regions + kLimitMargin);
  for (size_t i = 0; i < regions; ++i) {
    typename Cache::Handle handle = cache->get(mapping.base() + i * kPage, kPage);
    if (!handle) die("populating", Cache::kName);
    cache->put(handle);
  }
  MemorySample sample;
  sample.heap_bytes_per_region = (heap_bytes() - heap_before) / static_cast<double>(regions);
  sample.rss_bytes_per_region = (rss_bytes() - rss_before) / static_cast<double>(regions);
  sample.ok = true;
  return sample;  // the child exits without tearing down
}

// Each cache in a fresh child, so neither sees the other's freed heap or hooks.
template <typename Cache>
MemorySample memory_in_child(size_t regions) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) die("pipe", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) die("fork", std::strerror(errno));
  if (child == 0) {
    close(pipe_fds[0]);
    const MemorySample sample = measure_memory<Cache>(regions);
    const ssize_t written = write(pipe_fds[1], &sample, sizeof sample);
    _exit(written == static_cast<ssize_t>(sizeof sample) ? 0 : 1);
  }
  close(pipe_fds[1]);
  MemorySample sample;
  if (read(pipe_fds[0], &sample, sizeof sample) != static_cast<ssize_t>(sizeof sample)) {
    sample = MemorySample{};
  }
  close(pipe_fds[0]);
  int wait_status = 0;
  waitpid(child, &wait_status, 0);
  return sample;
}

// ---- 1 thread against 2, paired ------------------------------------------------------
//
// Other processes on a small shared machine move single runs by tens of percent, so the
// thread-scaling summary does not compare two separate series: it alternates short 1-thread
// and 2-thread runs of a fixed window and takes the median of the pairs' ratios.

using hmr_bench::median_of;
using hmr_bench::Scaling;

// work(thread, first, ops) does `ops` operations starting at position `first` of its walk:
// 15 pairs of 30 ms windows (bench/paired_scaling.h).
template <typename Work>
Scaling paired_scaling(Work&& work) {
  return hmr_bench::paired_scaling(std::chrono::milliseconds(30), 15, work);
}

template <typename Cache>
Scaling hit_scaling() {
  HitWorld<Cache>& populated = hit_world<Cache>(static_cast<size_t>(kThreadRegions));
  Scaling scaling = paired_scaling([&populated](int thread, size_t first, size_t ops) {
    Cache& cache = populated.cache();
    const uintptr_t base = populated.base();
    const uint32_t* order = populated.order(thread);
    for (size_t i = first; i < first + ops; ++i) {
      const uintptr_t address = base + uintptr_t{order[i & (kOrderLength - 1)]} * kPage;
      typename Cache::Handle handle = cache.get(address, kPage);
      if (!handle) die("a cached region missed:", Cache::kName);
      benchmark::DoNotOptimize(handle);
      cache.put(handle);
    }
  });
  drop_world();
  return scaling;
}

Scaling compute_scaling() {
  return paired_scaling([](int, size_t, size_t ops) {
    uint64_t x = 1;
    for (size_t i = 0; i < ops * 16; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    benchmark::DoNotOptimize(x);
  });
}

// CPU time the rest of the machine used while `measure` ran, in cores.
template <typename Measure>
double others_busy_cores(Measure&& measure) {
  auto machine_busy_seconds = [] {
    FILE* stat = std::fopen("/proc/stat", "r");
    if (stat == nullptr) return 0.0;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                       steal = 0;
    const int fields = std::fscanf(stat, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user,
                                   &nice, &system, &idle, &iowait, &irq, &softirq, &steal);
    std::fclose(stat);
    if (fields != 8) return 0.0;
    return static_cast<double>(user + nice + system + irq + softirq) /
           static_cast<double>(sysconf(_SC_CLK_TCK));
  };
  auto own_seconds = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  };
  const double machine_before = machine_busy_seconds(), own_before = own_seconds();
  const auto started = std::chrono::steady_clock::now();
  measure();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double others = (machine_busy_seconds() - machine_before) - (own_seconds() - own_before);
  return others > 0 && wall > 0 ? others / wall : 0.0;
}

Scaling baseline_scaling(bool write) {
  return paired_scaling([write](int thread, size_t first, size_t ops) {
    benchmark::DoNotOptimize(BaselineTable::instance().walk(thread, first, ops, write));
  });
}

// ---- hmr against UCX, paired ----------------------------------------------------------
//
// The same idea for the hit cost: both caches populated side by side, short runs of each
// alternating, medians of each.  The Google Benchmark series above run one cache after the
// other, and this machine's speed changes between them (a busy sibling of a virtual CPU).

// `read_key`: between get and put, also read the registration's key, as a transport using it
// would (hmr's hit itself never reads the entry that holds it; UCX's region is the entry).
template <typename Cache>
double hit_ns(HitWorld<Cache>& populated, size_t first, size_t ops, bool read_key) {
  Cache& cache = populated.cache();
  const uintptr_t base = populated.base();
  const uint32_t* order = populated.order(0);
  uint64_t keys = 0;
  const auto started = std::chrono::steady_clock::now();
  for (size_t i = first; i < first + ops; ++i) {
    const uintptr_t address = base + uintptr_t{order[i & (kOrderLength - 1)]} * kPage;
    typename Cache::Handle handle = cache.get(address, kPage);
    if (!handle) die("a cached region missed:", Cache::kName);
    benchmark::DoNotOptimize(handle);
    if (read_key) keys += Cache::key_of(handle);
    cache.put(handle);
  }
  benchmark::DoNotOptimize(keys);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started)
             .count() /
         static_cast<double>(ops);
}

struct HitPair {
  double hmr_ns = 0;
  double ucx_ns = 0;
};

HitPair paired_hits(size_t regions, bool read_key = false) {
  constexpr size_t kOps = size_t{1} << 18;
  constexpr int kRounds = 9;
  drop_world();
  HitWorld<HmrCache> hmr_world(regions);
  HitWorld<UcxCache> ucx_world(regions);
  (void)hit_ns(hmr_world, 0, kOps, read_key);  // warm both
  (void)hit_ns(ucx_world, 0, kOps, read_key);
  std::vector<double> hmr_runs, ucx_runs;
  for (int round = 0; round < kRounds; ++round) {
    const size_t first = static_cast<size_t>(round) * kOps;
    if (round % 2 == 0) {
      hmr_runs.push_back(hit_ns(hmr_world, first, kOps, read_key));
      ucx_runs.push_back(hit_ns(ucx_world, first, kOps, read_key));
    } else {
      ucx_runs.push_back(hit_ns(ucx_world, first, kOps, read_key));
      hmr_runs.push_back(hit_ns(hmr_world, first, kOps, read_key));
    }
  }
  return HitPair{median_of(hmr_runs), median_of(ucx_runs)};
}

// ---- summary --------------------------------------------------------------------------

void result_line(const char* metric, int64_t regions, std::optional<double> hmr_value,
                 std::optional<double> ucx_value, int decimals) {
  char hmr_text[32] = "nan", ucx_text[32] = "nan", ratio_text[32] = "nan";
  if (hmr_value) std::snprintf(hmr_text, sizeof hmr_text, "%.*f", decimals, *hmr_value);
  if (ucx_value) std::snprintf(ucx_text, sizeof ucx_text, "%.*f", decimals, *ucx_value);
  if (hmr_value && ucx_value && *ucx_value != 0) {
    std::snprintf(ratio_text, sizeof ratio_text, "%.3f", *hmr_value / *ucx_value);
  }
  std::printf("RESULT metric=%s regions=%lld hmr=%s ucx=%s ratio=%s\n", metric,
              static_cast<long long>(regions), hmr_text, ucx_text, ratio_text);
}

std::optional<double> mops(std::optional<double> ns_per_op) {
  if (!ns_per_op || *ns_per_op <= 0) return std::nullopt;
  return 1e3 / *ns_per_op;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  // Before any benchmark thread exists: fork() copies only this one.
  const MemorySample hmr_memory = memory_in_child<HmrCache>(kMemoryRegions);
  const MemorySample ucx_memory = memory_in_child<UcxCache>(kMemoryRegions);

  register_all();
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  drop_world();
  benchmark::Shutdown();

  auto hmr_median = [&](const char* suite, int64_t arg, int64_t threads = 1) {
    return reporter.median(std::string(suite) + "/hmr", arg, threads);
  };
  auto ucx_median = [&](const char* suite, int64_t arg, int64_t threads = 1) {
    return reporter.median(std::string(suite) + "/ucx", arg, threads);
  };
  auto memory = [](const MemorySample& sample, bool rss) -> std::optional<double> {
    if (!sample.ok) return std::nullopt;
    return rss ? sample.rss_bytes_per_region : sample.heap_bytes_per_region;
  };

  std::printf("\n");
  std::printf("info: bytes_per_region by RSS delta (cross-check): hmr=%.1f ucx=%.1f\n",
              memory(hmr_memory, true).value_or(0), memory(ucx_memory, true).value_or(0));
  std::printf("info: GB hit_mt medians, Mops/s at %lld regions, 1 / 2 threads: hmr=%.2f / %.2f "
              "ucx=%.2f / %.2f\n",
              static_cast<long long>(kThreadRegions),
              mops(hmr_median("hit_mt", kThreadRegions, 1)).value_or(0),
              mops(hmr_median("hit_mt", kThreadRegions, 2)).value_or(0),
              mops(ucx_median("hit_mt", kThreadRegions, 1)).value_or(0),
              mops(ucx_median("hit_mt", kThreadRegions, 2)).value_or(0));
  std::printf("info: paired 1-vs-2-thread runs (median of 15 pairs), Mops/s 1 / 2 threads, ratio:\n");
  Scaling compute, read_only, counted, hmr_scaling, ucx_scaling;
  const double others = others_busy_cores([&] {
    compute = compute_scaling();
    read_only = baseline_scaling(false);
    counted = baseline_scaling(true);
    hmr_scaling = hit_scaling<HmrCache>();
    ucx_scaling = hit_scaling<UcxCache>();
  });
  auto show = [](const char* what, const Scaling& scaling) {
    std::printf("info:   %-44s %8.2f / %8.2f  %.3f\n", what, scaling.mops_1, scaling.mops_2,
                scaling.ratio);
  };
  show("machine: ALU only (no memory)", compute);
  show("machine: shared lines, read-only", read_only);
  show("machine: shared lines, refcount inc/dec", counted);
  show("hmr hit (get+put)", hmr_scaling);
  show("ucx hit (get+put)", ucx_scaling);
  std::printf("info: other processes kept %.2f of %ld CPUs busy during the paired runs%s\n", others,
              sysconf(_SC_NPROCESSORS_ONLN),
              others > 0.2 ? " (thread scaling is understated: rerun on an idle machine)" : "");
  std::fflush(stdout);

  std::vector<HitPair> hits;
  for (int64_t regions : kHitRegions) {
    hits.push_back(paired_hits(static_cast<size_t>(regions)));
    std::printf("info: hit ns at %lld regions, Google Benchmark series: hmr=%.1f ucx=%.1f; "
                "paired runs (used below): hmr=%.1f ucx=%.1f\n",
                static_cast<long long>(regions), hmr_median("hit", regions).value_or(0),
                ucx_median("hit", regions).value_or(0), hits.back().hmr_ns, hits.back().ucx_ns);
  }
  const HitPair with_key = paired_hits(static_cast<size_t>(kThreadRegions), /*read_key=*/true);
  std::printf("info: hit ns at %lld regions when the caller also reads the registration's key "
              "(paired runs): hmr=%.1f ucx=%.1f ratio=%.3f\n",
              static_cast<long long>(kThreadRegions), with_key.hmr_ns, with_key.ucx_ns,
              with_key.hmr_ns / with_key.ucx_ns);
  std::fflush(stdout);

  for (size_t i = 0; i < hits.size(); ++i) {
    result_line("hit_ns", kHitRegions[i], hits[i].hmr_ns, hits[i].ucx_ns, 1);
  }
  result_line("hit_mops_2threads", kThreadRegions, hmr_scaling.mops_2, ucx_scaling.mops_2, 2);
  result_line("thread_scaling", kThreadRegions, hmr_scaling.ratio, ucx_scaling.ratio, 3);
  result_line("miss_insert_ns", kMissRegions, hmr_median("miss", kMissRegions),
              ucx_median("miss", kMissRegions), 1);
  result_line("munmap_invalidate_ns", 1, hmr_median("munmap", -1), ucx_median("munmap", -1),
              1);
  result_line("bytes_per_region", static_cast<int64_t>(kMemoryRegions), memory(hmr_memory, false),
              memory(ucx_memory, false), 1);
  return reporter.failed() ? 1 : 0;
}
