#include "tests/hmem/synapseai_fake_library.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/hmem/fake_library.h"

namespace hmr::testing {
namespace {

FakeSynapse load_synapse(const char* path) {
  const FakeLibrary library("fake SynapseAI library", path);
  FakeSynapse fake;
  fake.reset = library.function<fake_synapse_reset_fn>("fake_synapse_reset");
  fake.set_failure = library.function<fake_synapse_set_failure_fn>("fake_synapse_set_failure");
  fake.set_failure_once =
      library.function<fake_synapse_set_failure_once_fn>("fake_synapse_set_failure_once");
  fake.call_count = library.function<fake_synapse_call_count_fn>("fake_synapse_call_count");
  fake.alloc = library.function<fake_synapse_alloc_fn>("fake_synapse_alloc");
  fake.free = library.function<fake_synapse_free_fn>("fake_synapse_free");
  fake.last_lookup = library.function<fake_synapse_last_lookup_fn>("fake_synapse_last_lookup");
  fake.acquire = library.function<fake_synapse_acquire_fn>("fake_synapse_acquire");
  fake.acquire_mapped =
      library.function<fake_synapse_acquire_mapped_fn>("fake_synapse_acquire_mapped");
  fake.hccl_fd = library.function<fake_synapse_hccl_fd_fn>("fake_synapse_hccl_fd");
  fake.pool_start = library.function<fake_synapse_pool_start_fn>("fake_synapse_pool_start");
  return fake;
}

FakeHlthunk load_hlthunk(const char* path) {
  const FakeLibrary library("fake hl-thunk library", path);
  FakeHlthunk fake;
  fake.reset = library.function<fake_hlthunk_reset_fn>("fake_hlthunk_reset");
  fake.set_failure = library.function<fake_hlthunk_set_failure_fn>("fake_hlthunk_set_failure");
  fake.set_failure_once =
      library.function<fake_hlthunk_set_failure_once_fn>("fake_hlthunk_set_failure_once");
  fake.call_count = library.function<fake_hlthunk_call_count_fn>("fake_hlthunk_call_count");
  fake.open_devices = library.function<fake_hlthunk_open_devices_fn>("fake_hlthunk_open_devices");
  fake.live_handles = library.function<fake_hlthunk_live_handles_fn>("fake_hlthunk_live_handles");
  fake.live_mappings =
      library.function<fake_hlthunk_live_mappings_fn>("fake_hlthunk_live_mappings");
  fake.last_export = library.function<fake_hlthunk_last_export_fn>("fake_hlthunk_last_export");
  fake.set_busy = library.function<fake_hlthunk_set_busy_fn>("fake_hlthunk_set_busy");
  fake.hold_bus_id_reads =
      library.function<fake_hlthunk_hold_bus_id_reads_fn>("fake_hlthunk_hold_bus_id_reads");
  fake.bus_id_reads_waiting =
      library.function<fake_hlthunk_bus_id_reads_waiting_fn>("fake_hlthunk_bus_id_reads_waiting");
  fake.open = library.function<decltype(fake.open)>("hlthunk_open");
  fake.memory_alloc = library.function<decltype(fake.memory_alloc)>("hlthunk_device_memory_alloc");
  fake.memory_map = library.function<decltype(fake.memory_map)>("hlthunk_device_memory_map");
  return fake;
}

FakeScal load_scal(const char* path) {
  const FakeLibrary library("fake SCAL library", path);
  FakeScal fake;
  fake.reset = library.function<fake_scal_reset_fn>("fake_scal_reset");
  fake.set_failure = library.function<fake_scal_set_failure_fn>("fake_scal_set_failure");
  fake.set_failure_once =
      library.function<fake_scal_set_failure_once_fn>("fake_scal_set_failure_once");
  fake.call_count = library.function<fake_scal_call_count_fn>("fake_scal_call_count");
  fake.attach = library.function<fake_scal_attach_fn>("fake_scal_attach");
  return fake;
}

}  // namespace

const char* fake_synapse_path() { return HMR_FAKE_SYNAPSE_PATH; }
const char* fake_hlthunk_path() { return HMR_FAKE_HLTHUNK_PATH; }
const char* fake_hlthunk_noexport_path() { return HMR_FAKE_HLTHUNK_NOEXPORT_PATH; }
const char* fake_scal_path() { return HMR_FAKE_SCAL_PATH; }

const FakeSynapse& fake_synapse() {
  static const FakeSynapse fake = load_synapse(fake_synapse_path());
  return fake;
}

const FakeHlthunk& fake_hlthunk(const char* path) {
  static const FakeHlthunk with_export = load_hlthunk(fake_hlthunk_path());
  static const FakeHlthunk without_export = load_hlthunk(fake_hlthunk_noexport_path());
  if (std::strcmp(path, fake_hlthunk_path()) == 0) return with_export;
  if (std::strcmp(path, fake_hlthunk_noexport_path()) == 0) return without_export;
  std::fprintf(stderr, "no fake hl-thunk at %s\n", path);
  std::abort();
}

const FakeScal& fake_scal() {
  static const FakeScal fake = load_scal(fake_scal_path());
  return fake;
}

}  // namespace hmr::testing
