#include "tests/nic/fake_ibverbs_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace hmr::testing {
namespace {

template <typename Fn>
void must_find(void* handle, const char* path, const char* name, const char* version, Fn& out) {
  void* address = version != nullptr ? dlvsym(handle, name, version) : dlsym(handle, name);
  if (address == nullptr) {
    std::fprintf(stderr, "fake libibverbs %s lacks %s\n", path, name);
    std::abort();
  }
  out = reinterpret_cast<Fn>(address);
}

FakeIbverbs load(const char* path) {
  // The same path the adapter opens through HMR_IBVERBS_LIBRARY, so dlopen returns the same
  // object and both see one state.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load the fake libibverbs: %s\n", dlerror());
    std::abort();
  }
  FakeIbverbs fake;
  fake.path = path;
  must_find(handle, path, "fake_ibverbs_reset", nullptr, fake.reset);
  must_find(handle, path, "fake_ibverbs_set_device_list", nullptr, fake.set_device_list);
  must_find(handle, path, "fake_ibverbs_get_device", nullptr, fake.get_device);
  must_find(handle, path, "fake_ibverbs_set_device", nullptr, fake.set_device);
  must_find(handle, path, "fake_ibverbs_set_failure", nullptr, fake.set_failure);
  must_find(handle, path, "fake_ibverbs_set_rereg_result", nullptr, fake.set_rereg_result);
  must_find(handle, path, "fake_ibverbs_set_fork_kernel", nullptr, fake.set_fork_kernel);
  must_find(handle, path, "fake_ibverbs_call_count", nullptr, fake.call_count);
  must_find(handle, path, "fake_ibverbs_live", nullptr, fake.live);
  must_find(handle, path, "fake_ibverbs_registrations", nullptr, fake.registrations);
  must_find(handle, path, "fake_ibverbs_last_rereg", nullptr, fake.last_rereg);
  must_find(handle, path, "fake_ibverbs_last_window_op", nullptr, fake.last_window_op);
  must_find(handle, path, "fake_ibverbs_last_advice", nullptr, fake.last_advice);
  must_find(handle, path, "fake_ibverbs_last_umr", nullptr, fake.last_umr);
  must_find(handle, path, "fake_ibverbs_create_qp", nullptr, fake.create_qp);
  must_find(handle, path, "fake_ibverbs_destroy_qp", nullptr, fake.destroy_qp);
  must_find(handle, path, "ibv_get_device_list", "IBVERBS_1.1", fake.get_device_list);
  must_find(handle, path, "ibv_free_device_list", "IBVERBS_1.1", fake.free_device_list);
  must_find(handle, path, "ibv_open_device", "IBVERBS_1.1", fake.open_device);
  must_find(handle, path, "ibv_close_device", "IBVERBS_1.1", fake.close_device);
  must_find(handle, path, "ibv_alloc_pd", "IBVERBS_1.1", fake.alloc_pd);
  must_find(handle, path, "ibv_dealloc_pd", "IBVERBS_1.1", fake.dealloc_pd);
  must_find(handle, path, "ibv_reg_mr", "IBVERBS_1.1", fake.reg_mr);
  must_find(handle, path, "ibv_dereg_mr", "IBVERBS_1.1", fake.dereg_mr);
  return fake;  // the handle stays open for the life of the process, on purpose
}

}  // namespace

const FakeIbverbs& fake_ibverbs() {
  static const FakeIbverbs fake = load(HMR_FAKE_IBVERBS_PATH);
  return fake;
}

const FakeIbverbs& legacy_fake_ibverbs() {
  static const FakeIbverbs fake = load(HMR_FAKE_IBVERBS_LEGACY_PATH);
  return fake;
}

AppPd::AppPd(const FakeIbverbs& fake, int index) : fake_(fake) {
  int count = 0;
  verbs::ibv_device** list = fake_.get_device_list(&count);
  if (list == nullptr || count <= index) {
    std::fprintf(stderr, "AppPd: the fake lists %d devices, not device %d\n", count, index);
    std::abort();
  }
  context_ = fake_.open_device(list[index]);
  fake_.free_device_list(list);
  pd_ = context_ != nullptr ? fake_.alloc_pd(context_) : nullptr;
  if (pd_ == nullptr) {
    std::fprintf(stderr, "AppPd: cannot open fake device %d\n", index);
    std::abort();
  }
}

AppPd::~AppPd() {
  // (A refusal means something was left on the application's PD: hmr's, since the tests
  // destroy their own first.  The fixture's "destroyed_by_close" check then fails too.)
  if (fake_.dealloc_pd(pd_) != 0) ADD_FAILURE() << "AppPd: ibv_dealloc_pd failed: objects left on it";
  if (fake_.close_device(context_) != 0) ADD_FAILURE() << "AppPd: ibv_close_device failed";
}

int open_fd_count() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

}  // namespace hmr::testing
