// The CUDA driver calls behind a host-shadow registration's pinning made to fail, from several
// threads at once: cuMemHostRegister (best effort: the shadow works unpinned, only copies are
// slower), cuMemHostUnregister (the close still completes, and the shadow's pages stay mapped
// while the driver still holds them registered), and the context calls both run in.  Each
// check is what hmr must do when the call fails: the right answer or a clear error naming the
// call, nothing left at the NIC, nothing pinned that is not owned, and the next registration
// works once the driver does.
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/hmem_api/failing_calls.h"

namespace hmr_hmem_test {
namespace {

using hmr_test::DomainPtr;
using hmr_test::MrPtr;

constexpr size_t kBytes = 65536;
// cuMemHostRegister documents CUDA_ERROR_OUT_OF_MEMORY (no pinnable memory left) and
// CUDA_ERROR_NOT_PERMITTED; cuMemHostUnregister documents CUDA_ERROR_INVALID_CONTEXT and
// CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED; cuCtxSetCurrent CUDA_ERROR_INVALID_CONTEXT
// (cuda.h, CUDA 13.0).
constexpr int kCudaErrorOutOfMemory = 2;
constexpr int kCudaErrorInvalidContext = 201;
constexpr int kCudaErrorIllegalAddress = 700;

// Device memory on device 0 filled with a byte of its own, and a shadow MR of it per thread.
struct ShadowFixture {
  CountingNic nic;
  hmr_nic_callbacks callbacks = nic.callbacks(HMR_NIC_CB_PINS_HOST_MEMORY);
  DomainPtr domain = open_callback_domain(callbacks, HMR_DOMAIN_ALLOW_HMEM_COPY);
  std::vector<std::unique_ptr<FakeAllocation>> memory;

  ShadowFixture() {
    for (int i = 0; i < kFailureThreads; ++i) {
      memory.push_back(std::make_unique<FakeAllocation>(0, kBytes));
      const std::vector<uint8_t> bytes(kBytes, fill(i));
      EXPECT_EQ(fake_cuda().poke(memory.back()->address(), bytes.data(), kBytes), 0);
    }
  }
  static uint8_t fill(int i) { return static_cast<uint8_t>(0xa0 + i); }
  void* device(int i) const { return memory[static_cast<size_t>(i)]->get(); }

  // Drops what the cache keeps, so the NIC and the driver hold only what open MRs hold.
  void flush() { EXPECT_EQ(hmr_domain_cache_flush(domain.get()), 0) << hmr_last_error(); }
};

// Registers thread i's memory: empty, or what went wrong.  *shadow gets the shadow's address.
std::string register_shadow(ShadowFixture& fixture, int i, hmr_mr** mr, uint8_t** shadow) {
  if (register_attr(fixture.domain.get(), fixture.device(i), kBytes, HMR_HMEM_SYSTEM, 0, 0, mr) !=
      0) {
    return std::string("registration failed: ") + hmr_last_error();
  }
  const hmr_mr_info info = mr_info(*mr);
  if (info.path != HMR_MR_PATH_HOST_SHADOW) return "not a host shadow";
  *shadow = static_cast<uint8_t*>(info.shadow);
  if ((*shadow)[0] != ShadowFixture::fill(i) || (*shadow)[kBytes - 1] != ShadowFixture::fill(i)) {
    return "the shadow does not hold the device's bytes";
  }
  return {};
}

// With the driver working: a shadow per thread registers and is pinned, and closing them
// unpins every one and gives the NIC back its registrations.
void expect_shadows_pin_and_unpin(ShadowFixture& fixture, std::vector<MrPtr>& mrs) {
  const int pinned_before = fake_cuda().host_registration_count();
  const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    hmr_mr* mr = nullptr;
    uint8_t* shadow = nullptr;
    std::string why = register_shadow(fixture, i, &mr, &shadow);
    mrs[static_cast<size_t>(i)].reset(mr);
    return why;
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before + kFailureThreads);
  for (MrPtr& held : mrs) held.reset();
  fixture.flush();
  EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before);
  EXPECT_EQ(fixture.nic.held.load(), 0);
}

// cuMemHostRegister refusing (no pinnable memory left) does not fail a shadow registration:
// pinning only speeds the copies.  The shadows hold the device's bytes and sync; nothing is
// pinned; and with the driver working again the next shadows are pinned, and unpinned when
// they go.
TEST(CudaPinningFailures, ShadowsRegisterUnpinnedWhenCuMemHostRegisterFails) {
  ShadowFixture fixture;
  ASSERT_TRUE(fixture.domain);
  const int pinned_before = fake_cuda().host_registration_count();
  std::vector<MrPtr> mrs(kFailureThreads);
  {
    FailingCall failing("cuMemHostRegister_v2", kCudaErrorOutOfMemory);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      hmr_mr* mr = nullptr;
      uint8_t* shadow = nullptr;
      std::string why = register_shadow(fixture, i, &mr, &shadow);
      mrs[static_cast<size_t>(i)].reset(mr);
      if (why.empty() && hmr_mr_sync(mr, 0, 0, HMR_SYNC_TO_DEVICE) != 0) why = hmr_last_error();
      return why;
    });
    for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
    EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before) << "pinned after a refusal";
  }
  for (MrPtr& held : mrs) held.reset();
  fixture.flush();
  EXPECT_EQ(fixture.nic.held.load(), 0);

  // The driver pins again: so do the next shadows, and their close unpins them.
  ASSERT_EQ(fake_cuda().host_registration_count(), pinned_before);
  expect_shadows_pin_and_unpin(fixture, mrs);
}

// A shadow pinned and then not filled (the copy from the device fails): the registration fails
// naming the copy, and the shadow it threw away is unpinned, not left registered with CUDA.
TEST(CudaPinningFailures, AShadowThatCannotBeFilledIsUnpinned) {
  ShadowFixture fixture;
  ASSERT_TRUE(fixture.domain);
  const int pinned_before = fake_cuda().host_registration_count();
  {
    FailingCall failing("cuMemcpyDtoH_v2", kCudaErrorIllegalAddress);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      hmr_mr* mr = nullptr;
      std::string why = reason_unless(register_attr(fixture.domain.get(), fixture.device(i),
                                                    kBytes, HMR_HMEM_SYSTEM, 0, 0, &mr),
                                      HMR_EIO, "cuMemcpyDtoH");
      if (mr != nullptr) why += " (and *mr was written)";
      return why;
    });
    for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  }
  EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before) << "a shadow left pinned";
  EXPECT_EQ(fixture.nic.held.load(), 0);
  EXPECT_EQ(stats_of(fixture.domain.get()).mr_open, 0u);
}

// The context calls the pinning and the fill run in: cuCtxSetCurrent refusing fails the
// registration (the fill cannot run) with a reason naming it; nothing is pinned or held, the
// calling threads are left with no context current, and once the driver works the same
// memory registers.
TEST(CudaPinningFailures, ContextFailuresFailTheShadowCleanly) {
  ShadowFixture fixture;
  ASSERT_TRUE(fixture.domain);
  const int pinned_before = fake_cuda().host_registration_count();
  {
    FailingCall failing("cuCtxSetCurrent", kCudaErrorInvalidContext);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      hmr_mr* mr = nullptr;
      std::string why = reason_unless(register_attr(fixture.domain.get(), fixture.device(i),
                                                    kBytes, HMR_HMEM_SYSTEM, 0, 0, &mr),
                                      HMR_EIO, "cuCtxSetCurrent");
      if (mr != nullptr) why += " (and *mr was written)";
      if (fake_cuda().current_context_device() != -1) why += " (a context left current)";
      return why;
    });
    for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  }
  EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before);
  EXPECT_EQ(fixture.nic.held.load(), 0);

  std::vector<MrPtr> mrs(kFailureThreads);
  const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
    hmr_mr* mr = nullptr;
    uint8_t* shadow = nullptr;
    std::string why = register_shadow(fixture, i, &mr, &shadow);
    mrs[static_cast<size_t>(i)].reset(mr);
    if (fake_cuda().current_context_device() != -1) why += " (a context left current)";
    return why;
  });
  for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
  for (MrPtr& held : mrs) held.reset();
  fixture.flush();
  EXPECT_EQ(fake_cuda().host_registration_count(), pinned_before);
  EXPECT_EQ(fixture.nic.held.load(), 0);
}

// cuMemHostUnregister refusing when shadows go: every close and the flush still complete and
// the NIC lets go.  The driver still holds those pages registered, so hmr must not unmap them:
// an application's next mapping at that address would inherit the registration (the driver
// would call the application's fresh host memory CUDA memory, and serve copies from the old
// pages).  Without the fix the shadow was unmapped and a new mapping there read as CUDA memory.
TEST(CudaPinningFailures, AShadowTheDriverWillNotUnpinStaysMapped) {
  ShadowFixture fixture;
  ASSERT_TRUE(fixture.domain);
  const int pinned_before = fake_cuda().host_registration_count();
  std::vector<MrPtr> mrs(kFailureThreads);
  std::vector<uint8_t*> shadows(kFailureThreads, nullptr);
  for (int i = 0; i < kFailureThreads; ++i) {
    hmr_mr* mr = nullptr;
    ASSERT_EQ(register_shadow(fixture, i, &mr, &shadows[static_cast<size_t>(i)]), "");
    mrs[static_cast<size_t>(i)].reset(mr);
  }
  ASSERT_EQ(fake_cuda().host_registration_count(), pinned_before + kFailureThreads);
  {
    FailingCall failing("cuMemHostUnregister", kCudaErrorInvalidContext);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      if (hmr_mr_close(mrs[static_cast<size_t>(i)].release()) != 0) return hmr_last_error();
      return {};
    });
    for (int i = 0; i < kFailureThreads; ++i) EXPECT_EQ(failures[static_cast<size_t>(i)], "") << i;
    fixture.flush();
  }
  EXPECT_EQ(fixture.nic.held.load(), 0) << "a failed unpin kept the NIC registration";
  // What the driver still holds registered is still mapped: nothing else can be put there.
  for (uint8_t* shadow : shadows) {
    void* placed = mmap(shadow, 4096, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (placed != MAP_FAILED) {
      hmr_hmem_iface iface = HMR_HMEM_SYSTEM;
      hmr_mem_kind kind = HMR_MEM_HOST;
      ASSERT_EQ(hmr_detect_memory_type(placed, 4096, &iface, &kind), 0) << hmr_last_error();
      munmap(placed, 4096);
      ADD_FAILURE() << "the shadow at " << static_cast<void*>(shadow)
                    << " was unmapped while CUDA still holds it registered; a new mapping "
                       "there reads as memory of iface "
                    << iface;
    }
  }

  // The driver works again: new shadows register, pin and unpin as before.
  expect_shadows_pin_and_unpin(fixture, mrs);
}

}  // namespace
}  // namespace hmr_hmem_test
