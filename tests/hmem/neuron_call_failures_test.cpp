// The Neuron runtime calls the iface makes that no other test makes fail: nrt_get_version (the
// start does not depend on it), nrt_tensor_write and nrt_memcpy_to_device (copies, from several
// threads at once), nrt_get_dmabuf_fd (the v1 export).  Each failure is an error naming the
// call with the runtime's status, moves no byte and leaks no fd, and the same call works once
// the runtime does.  (nrt_tensor_free returns void: the runtime has no way to say it failed.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "neuron/neuron_iface.h"
#include "tests/hmem/fd_checks.h"
#include "tests/hmem/neuron_fake_library.h"
#include "tests/threads_started_together.h"

namespace hmr::neuron {
namespace {

using hmem::DeviceId;
using hmem::DmabufExport;
using hmem::MemoryKind;
using hmr::testing::fake_nrt;
using hmr::testing::fake_nrt_path;
using hmr::testing::fake_nrt_v1_path;
using hmr::testing::open_fd_count;

constexpr size_t kPage = kNeuronGranule;
constexpr int kThreads = hmr_test::kThreadsStartedTogether;

bool names(const Status& status, const char* call) {
  return status.reason().find(call) != std::string::npos;
}

char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

using hmr_test::on_threads;

class NeuronCallFailures : public ::testing::Test {
 protected:
  void SetUp() override { use(fake_nrt_path()); }
  void TearDown() override { unsetenv("HMR_NEURON_LIBRARY"); }

  void use(const char* path) {
    path_ = path;
    setenv("HMR_NEURON_LIBRARY", path, 1);
    fake().reset();
    ASSERT_EQ(fake().application_init(1 /* NO_FW */, "", ""), 0);  // the application's
  }
  const testing::FakeNrt& fake() const { return fake_nrt(path_); }
  void* alloc(NeuronIface& iface, int vnc, size_t len) {
    Result<void*> ptr = iface.mem_alloc(DeviceId{static_cast<uint64_t>(vnc)}, len,
                                        MemoryKind::device_only);
    EXPECT_TRUE(ptr.ok()) << ptr.status().reason();
    return ptr.ok() ? *ptr : nullptr;
  }

  const char* path_ = nullptr;
};

// The version is only reported: a runtime that will not give it still starts, with no version.
TEST_F(NeuronCallFailures, AnUnreadableVersionStillStarts) {
  fake().set_failure("nrt_get_version", NRT_FAILURE);
  NeuronIface iface;
  const Status started = iface.init();
  fake().set_failure("nrt_get_version", 0);
  ASSERT_TRUE(started.ok()) << started.reason();
  EXPECT_EQ(iface.runtime_version(), "");
  Result<int> count = iface.device_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, FAKE_NRT_VNC_COUNT);
  NeuronIface again;
  ASSERT_TRUE(again.init().ok());
  EXPECT_EQ(again.runtime_version(), "2.21.7");
}

// Copies into tensors hmr allocated (nrt_tensor_write) and into memory the application
// allocated (nrt_memcpy_to_device), refused on every thread at once: each names its call and
// the runtime's status, no byte moves; then each copy goes through.
TEST_F(NeuronCallFailures, RefusedCopiesToTheDeviceMoveNothingAndRecover) {
  NeuronIface iface;
  ASSERT_TRUE(iface.init().ok());
  std::vector<void*> own(kThreads);
  std::vector<void*> app(kThreads);
  std::vector<void*> app_tensors(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    own[static_cast<size_t>(i)] = alloc(iface, i % 2, 2 * kPage);
    app[static_cast<size_t>(i)] =
        testing::app_tensor_allocate(fake(), i % 2, 2 * kPage, &app_tensors[static_cast<size_t>(i)]);
    ASSERT_NE(own[static_cast<size_t>(i)], nullptr);
    ASSERT_NE(app[static_cast<size_t>(i)], nullptr);
  }
  const std::vector<unsigned char> zeros(kPage, 0);
  for (void* base : own) ASSERT_TRUE(iface.copy_to_device(base, zeros.data(), kPage).ok());

  fake().set_failure("nrt_tensor_write", NRT_TIMEOUT);
  fake().set_failure("nrt_memcpy_to_device", NRT_RESOURCE);
  std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    const std::vector<unsigned char> bytes(kPage, static_cast<unsigned char>(0x40 + i));
    const Status to_own = iface.copy_to_device(own[static_cast<size_t>(i)], bytes.data(), kPage);
    std::string why;
    if (to_own.code() != HMR_ETIMEDOUT || !names(to_own, "nrt_tensor_write") ||
        !names(to_own, "NRT_TIMEOUT")) {
      why = "tensor write: " + to_own.reason();
    }
    const Status to_app = iface.copy_to_device(app[static_cast<size_t>(i)], bytes.data(), kPage);
    if (to_app.code() != HMR_ENOMEM || !names(to_app, "nrt_memcpy_to_device")) {
      why += " memcpy: " + to_app.reason();
    }
    return why;
  });
  fake().set_failure("nrt_tensor_write", 0);
  fake().set_failure("nrt_memcpy_to_device", 0);
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  for (void* base : own) {
    std::vector<unsigned char> seen(kPage, 0xff);
    ASSERT_TRUE(iface.copy_from_device(seen.data(), base, kPage).ok());
    EXPECT_EQ(seen, zeros) << "a refused write moved bytes";
  }

  failures = on_threads([&](int i) -> std::string {
    const std::vector<unsigned char> bytes(kPage, static_cast<unsigned char>(0x40 + i));
    Status copied = iface.copy_to_device(own[static_cast<size_t>(i)], bytes.data(), kPage);
    if (copied.ok()) copied = iface.copy_to_device(app[static_cast<size_t>(i)], bytes.data(), kPage);
    if (!copied.ok()) return copied.reason();
    std::vector<unsigned char> seen(kPage);
    if (!iface.copy_from_device(seen.data(), own[static_cast<size_t>(i)], kPage).ok() ||
        seen != bytes) {
      return "the bytes did not arrive";
    }
    return {};
  });
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  for (void* tensor : app_tensors) testing::app_tensor_free(fake(), tensor);
  for (void* base : own) EXPECT_TRUE(iface.mem_free(base).ok());
}

// The v1 export (a runtime without nrt_get_dmabuf_fd_v2) refused, for a tensor hmr allocated
// and for declared memory at its allocation's start: the error names nrt_get_dmabuf_fd, no fd
// is left open, and the export works once the runtime does.
TEST_F(NeuronCallFailures, ARefusedV1ExportLeaksNoFdAndRecovers) {
  use(fake_nrt_v1_path());
  NeuronIface iface;
  ASSERT_TRUE(iface.init().ok());
  void* own = alloc(iface, 0, 4 * kPage);
  void* app_tensor = nullptr;
  void* app = testing::app_tensor_allocate(fake(), 1, 4 * kPage, &app_tensor);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(app, nullptr);
  const int fds_before = open_fd_count();
  for (void* base : {own, app}) {
    fake().set_failure("nrt_get_dmabuf_fd", NRT_RESOURCE);
    Result<DmabufExport> refused = iface.export_dmabuf({at(base, kPage), kPage});
    fake().set_failure("nrt_get_dmabuf_fd", 0);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), HMR_ENOMEM);
    EXPECT_TRUE(names(refused.status(), "nrt_get_dmabuf_fd(")) << refused.status().reason();
    EXPECT_EQ(open_fd_count(), fds_before);
  }
  {
    Result<DmabufExport> exported = iface.export_dmabuf({at(own, kPage), kPage});
    ASSERT_TRUE(exported.ok()) << exported.status().reason();
    EXPECT_EQ(exported->offset, kPage);
    Result<DmabufExport> declared = iface.export_dmabuf({app, kPage});
    ASSERT_TRUE(declared.ok()) << declared.status().reason();
  }
  EXPECT_EQ(open_fd_count(), fds_before);
  testing::app_tensor_free(fake(), app_tensor);
  EXPECT_TRUE(iface.mem_free(own).ok());
}

}  // namespace
}  // namespace hmr::neuron
