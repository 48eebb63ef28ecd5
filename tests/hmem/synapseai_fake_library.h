// The fake SynapseAI stack as tests see it: libSynapse.so at HMR_FAKE_SYNAPSE_PATH and
// libhl-thunk.so at HMR_FAKE_HLTHUNK_PATH (with the mapped-memory dma-buf export) and
// HMR_FAKE_HLTHUNK_NOEXPORT_PATH (without it), and libscal.so at HMR_FAKE_SCAL_PATH, built from
// tests/fakes/fake_synapse.c, fake_hlthunk.c and fake_scal.c, each opened once and kept open so its state outlives every SynapseaiIface.
#pragma once

#include <cstdint>

#include "tests/fakes/fake_hlthunk_control.h"
#include "tests/fakes/fake_scal_control.h"
#include "tests/fakes/fake_synapse_control.h"

namespace hmr::testing {

struct FakeSynapse {
  fake_synapse_reset_fn reset = nullptr;
  fake_synapse_set_failure_fn set_failure = nullptr;
  fake_synapse_set_failure_once_fn set_failure_once = nullptr;
  fake_synapse_call_count_fn call_count = nullptr;
  fake_synapse_alloc_fn alloc = nullptr;
  fake_synapse_free_fn free = nullptr;
  fake_synapse_last_lookup_fn last_lookup = nullptr;
  fake_synapse_acquire_fn acquire = nullptr;
  fake_synapse_acquire_mapped_fn acquire_mapped = nullptr;
  fake_synapse_hccl_fd_fn hccl_fd = nullptr;
  fake_synapse_pool_start_fn pool_start = nullptr;
};

struct FakeHlthunk {
  fake_hlthunk_reset_fn reset = nullptr;
  fake_hlthunk_set_failure_fn set_failure = nullptr;
  fake_hlthunk_set_failure_once_fn set_failure_once = nullptr;
  fake_hlthunk_call_count_fn call_count = nullptr;
  fake_hlthunk_open_devices_fn open_devices = nullptr;
  fake_hlthunk_live_handles_fn live_handles = nullptr;
  fake_hlthunk_live_mappings_fn live_mappings = nullptr;
  fake_hlthunk_last_export_fn last_export = nullptr;
  fake_hlthunk_set_busy_fn set_busy = nullptr;
  fake_hlthunk_hold_bus_id_reads_fn hold_bus_id_reads = nullptr;
  fake_hlthunk_bus_id_reads_waiting_fn bus_id_reads_waiting = nullptr;
  // hl-thunk's own calls, for a test that holds a device as SynapseAI does (hlthunk.h).
  int (*open)(int device_name, const char* busid) = nullptr;
  uint64_t (*memory_alloc)(int fd, uint64_t size, uint64_t page_size, bool contiguous,
                           bool shared) = nullptr;
  uint64_t (*memory_map)(int fd, uint64_t handle, uint64_t hint_addr) = nullptr;
};

struct FakeScal {
  fake_scal_reset_fn reset = nullptr;
  fake_scal_set_failure_fn set_failure = nullptr;
  fake_scal_set_failure_once_fn set_failure_once = nullptr;
  fake_scal_call_count_fn call_count = nullptr;
  fake_scal_attach_fn attach = nullptr;
};

const char* fake_synapse_path();
const char* fake_hlthunk_path();           // a Gaudi2-era hl-thunk, with the mapped export
const char* fake_hlthunk_noexport_path();  // an older one, without it
const char* fake_scal_path();

// Abort the test binary if a fake cannot be loaded: every SynapseAI test depends on them.
const FakeSynapse& fake_synapse();
const FakeHlthunk& fake_hlthunk(const char* path);
const FakeScal& fake_scal();

}  // namespace hmr::testing
