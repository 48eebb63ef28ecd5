// How fast hmr says "host memory" when no device runtime is loaded (issue 4: well under 50 ns).
// Classification runs before every registration's cache lookup, so it is on the hit path.
//
// Suites (Google Benchmark, 5 repetitions each):
//   classify/system_only   hmem::Registry with FI_HMEM=system, random 4 KiB ranges of a 64 MiB
//                          host buffer
//   classify/default       the same with every iface enabled, as without FI_HMEM; on a machine
//                          without device runtimes none loads (the counter says how many did)
//   detect_memory_type     the public hmr_detect_memory_type on the process's registry
//   numa_node              where a host page sits (get_mempolicy), the on-demand part of
//                          hmr_mem_query that classification never pays
// The output ends with "RESULT metric=classify_host_ns value=<median ns> ...".
#include <benchmark/benchmark.h>
#include <hmr/hmr.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hmem/hmem_registry.h"
#include "hmem/system_iface.h"

namespace {

constexpr size_t kBuffer = 64u << 20;
constexpr size_t kRange = 4096;
constexpr size_t kOffsets = 4096;

struct World {
  std::vector<char> buffer = std::vector<char>(kBuffer, 1);
  std::vector<size_t> offsets;
  std::unique_ptr<hmr::hmem::Registry> system_only;
  std::unique_ptr<hmr::hmem::Registry> every_iface;
  int loaded_device_ifaces = 0;

  World() {
    std::mt19937_64 random(42);
    for (size_t i = 0; i < kOffsets; ++i) offsets.push_back(random() % (kBuffer - kRange));
    system_only = std::make_unique<hmr::hmem::Registry>(*hmr::hmem::parse_iface_list("system"));
    every_iface = std::make_unique<hmr::hmem::Registry>(hmr::hmem::all_ifaces());
    (void)system_only->load();
    (void)every_iface->load();
    for (const hmr::hmem::IfaceReport& report : every_iface->describe()) {
      if (report.iface != HMR_HMEM_SYSTEM && report.loaded) ++loaded_device_ifaces;
    }
  }
};

World& world() {
  static World* instance = new World();
  return *instance;
}

void classify(benchmark::State& state, hmr::hmem::Registry& registry) {
  World& w = world();
  size_t i = 0;
  for (auto _ : state) {
    auto info = registry.classify(w.buffer.data() + w.offsets[i++ % kOffsets], kRange);
    benchmark::DoNotOptimize(info);
  }
  state.counters["device_ifaces_loaded"] = w.loaded_device_ifaces;
}

void BM_classify_system_only(benchmark::State& state) { classify(state, *world().system_only); }
void BM_classify_default(benchmark::State& state) { classify(state, *world().every_iface); }

void BM_detect_memory_type(benchmark::State& state) {
  World& w = world();
  size_t i = 0;
  hmr_hmem_iface iface;
  hmr_mem_kind kind;
  for (auto _ : state) {
    const int rc =
        hmr_detect_memory_type(w.buffer.data() + w.offsets[i++ % kOffsets], kRange, &iface, &kind);
    benchmark::DoNotOptimize(rc);
  }
}

void BM_numa_node(benchmark::State& state) {
  World& w = world();
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(hmr::hmem::numa_node(w.buffer.data() + w.offsets[i++ % kOffsets]));
  }
}

BENCHMARK(BM_classify_system_only)->Name("classify/system_only")->Repetitions(5);
BENCHMARK(BM_classify_default)->Name("classify/default")->Repetitions(5);
BENCHMARK(BM_detect_memory_type)->Name("detect_memory_type")->Repetitions(5);
BENCHMARK(BM_numa_node)->Name("numa_node")->Repetitions(5);

// Keeps each run's ns per iteration, to report medians.
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.iterations == 0) continue;
      samples_[run.run_name.function_name].push_back(run.GetAdjustedRealTime());
    }
  }
  double median(const std::string& name) const {
    auto found = samples_.find(name);
    if (found == samples_.end() || found->second.empty()) return -1;
    std::vector<double> values = found->second;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  }

 private:
  std::map<std::string, std::vector<double>> samples_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  (void)world();
  MedianReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  std::printf("\nRESULT metric=classify_host_ns value=%.2f default_ns=%.2f "
              "detect_memory_type_ns=%.2f numa_node_ns=%.1f device_ifaces_loaded=%d target_ns=50\n",
              reporter.median("classify/system_only"), reporter.median("classify/default"),
              reporter.median("detect_memory_type"), reporter.median("numa_node"),
              world().loaded_device_ifaces);
  return 0;
}
