// The fake libibverbs as tests see it: the library at HMR_FAKE_IBVERBS_PATH (a real
// libibverbs.so.1 built from tests/fakes/fake_ibverbs.c), opened once and kept open so its state
// outlives every adapter, with its test controls and the verbs a test needs to make objects of
// its own (a PD to hand hmr as nic_handle).  The legacy build (only IBVERBS_1.1) is a second,
// independent library at HMR_FAKE_IBVERBS_LEGACY_PATH.
#pragma once

#include "nic/verbs/verbs_abi.h"
#include "tests/fakes/fake_ibverbs_control.h"

namespace hmr::testing {

struct FakeIbverbs {
  const char* path = nullptr;
  fake_ibverbs_reset_fn reset = nullptr;
  fake_ibverbs_set_device_list_fn set_device_list = nullptr;
  fake_ibverbs_get_device_fn get_device = nullptr;
  fake_ibverbs_set_device_fn set_device = nullptr;
  fake_ibverbs_set_failure_fn set_failure = nullptr;
  fake_ibverbs_set_rereg_result_fn set_rereg_result = nullptr;
  fake_ibverbs_set_fork_kernel_fn set_fork_kernel = nullptr;
  fake_ibverbs_call_count_fn call_count = nullptr;
  fake_ibverbs_live_fn live = nullptr;
  fake_ibverbs_registrations_fn registrations = nullptr;
  fake_ibverbs_last_rereg_fn last_rereg = nullptr;
  fake_ibverbs_last_window_op_fn last_window_op = nullptr;
  fake_ibverbs_last_advice_fn last_advice = nullptr;
  fake_ibverbs_last_umr_fn last_umr = nullptr;
  fake_ibverbs_create_qp_fn create_qp = nullptr;
  fake_ibverbs_destroy_qp_fn destroy_qp = nullptr;

  // The application's view (IBVERBS_1.1, as a program linked against rdma-core gets).
  verbs::ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(verbs::ibv_device**) = nullptr;
  verbs::ibv_context* (*open_device)(verbs::ibv_device*) = nullptr;
  int (*close_device)(verbs::ibv_context*) = nullptr;
  verbs::ibv_pd* (*alloc_pd)(verbs::ibv_context*) = nullptr;
  int (*dealloc_pd)(verbs::ibv_pd*) = nullptr;
  verbs::ibv_mr* (*reg_mr)(verbs::ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(verbs::ibv_mr*) = nullptr;

  // Sets a field of one device's configuration (the others keep theirs).
  template <typename Change>
  void configure(int device, Change change) const {
    fake_ibverbs_device_config config{};
    get_device(device, &config);
    change(config);
    set_device(device, &config);
  }
};

// Abort the test binary if the fake cannot be loaded: every verbs test depends on it.
const FakeIbverbs& fake_ibverbs();
const FakeIbverbs& legacy_fake_ibverbs();

// A context and PD the test opens itself on fake device `index`, as an application would,
// released at scope exit.
class AppPd {
 public:
  explicit AppPd(const FakeIbverbs& fake, int index = 0);
  AppPd(const AppPd&) = delete;
  AppPd& operator=(const AppPd&) = delete;
  ~AppPd();
  verbs::ibv_pd* pd() const { return pd_; }
  verbs::ibv_context* context() const { return context_; }

 private:
  const FakeIbverbs& fake_;
  verbs::ibv_context* context_ = nullptr;
  verbs::ibv_pd* pd_ = nullptr;
};

// Entries in /proc/self/fd.
int open_fd_count();

}  // namespace hmr::testing
