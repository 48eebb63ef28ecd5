// The CUDA iface's memory operations (copies, allocation, host registration) and the contexts
// they run in, against the fake driver.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/hmem/fake_cuda_library.h"

namespace hmr::cuda {
namespace {

using hmem::DeviceId;
using hmem::Iface;
using hmem::MemoryKind;
using hmem::PointerInfo;
using hmr::testing::as_pointer;
using hmr::testing::fake_cuda;
using hmr::testing::fake_cuda_driver;

constexpr int kIllegalAddress = 700;

std::vector<unsigned char> pattern(size_t size, unsigned char seed) {
  std::vector<unsigned char> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
  return bytes;
}

unsigned long long address_of(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); }

using CudaMemoryTest = hmr::testing::FakeCudaTest;

TEST_F(CudaMemoryTest, CopiesReallyMoveBytes) {
  init();
  const unsigned long long device = alloc(1, 1 << 20);
  void* target = const_cast<void*>(as_pointer(device + 10));
  const std::vector<unsigned char> sent = pattern(5000, 1);
  ASSERT_TRUE(iface_.copy_to_device(target, sent.data(), sent.size()).ok());
  std::vector<unsigned char> stored(sent.size());
  ASSERT_EQ(fake_cuda().peek(device + 10, stored.data(), stored.size()), 0);
  EXPECT_EQ(stored, sent);  // checked without trusting the copy back

  const std::vector<unsigned char> planted = pattern(5000, 99);
  ASSERT_EQ(fake_cuda().poke(device + 10, planted.data(), planted.size()), 0);
  std::vector<unsigned char> received(planted.size(), 0);
  ASSERT_TRUE(iface_.copy_from_device(received.data(), target, received.size()).ok());
  EXPECT_EQ(received, planted);
}

TEST_F(CudaMemoryTest, CopiesRunInTheDevicesPrimaryContextAndRestoreTheCallers) {
  init();
  void* memory = nullptr;
  {
    Result<void*> allocated = iface_.mem_alloc(DeviceId{1}, 4096, MemoryKind::device_only);
    ASSERT_TRUE(allocated.ok()) << allocated.status().reason();
    memory = *allocated;
  }
  EXPECT_EQ(fake_cuda().primary_retains(1), 1);
  EXPECT_EQ(fake_cuda().current_context_device(), -1);  // nothing left current

  // The application has its own context current: it is current again afterwards.
  const CudaSymbols& driver = fake_cuda_driver();
  CUcontext own = nullptr;
  ASSERT_EQ(driver.cuDevicePrimaryCtxRetain(&own, 0), CUDA_SUCCESS);
  ASSERT_EQ(driver.cuCtxSetCurrent(own), CUDA_SUCCESS);
  const std::vector<unsigned char> bytes = pattern(64, 5);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(iface_.copy_to_device(memory, bytes.data(), bytes.size()).ok());
  }
  EXPECT_EQ(fake_cuda().current_context_device(), 0);
  EXPECT_EQ(fake_cuda().primary_retains(1), 1);  // retained once, not per call

  // Also after a failed copy.
  fake_cuda().set_failure("cuMemcpyHtoD_v2", kIllegalAddress);
  Status failed = iface_.copy_to_device(memory, bytes.data(), bytes.size());
  EXPECT_EQ(failed.code(), HMR_EIO);
  EXPECT_NE(failed.reason().find("cuMemcpyHtoD"), std::string::npos) << failed.reason();
  EXPECT_NE(failed.reason().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos);
  EXPECT_EQ(fake_cuda().current_context_device(), 0);
  fake_cuda().set_failure("cuMemcpyHtoD_v2", 0);

  ASSERT_EQ(driver.cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(driver.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_TRUE(iface_.mem_free(memory).ok());
}

TEST_F(CudaMemoryTest, BadCopiesFailWithAReasonAndCallNothing) {
  init();
  const unsigned long long device = alloc(0, 8192);
  void* target = const_cast<void*>(as_pointer(device));
  std::vector<unsigned char> host(16384);

  Status host_target = iface_.copy_to_device(host.data(), host.data() + 8192, 64);
  EXPECT_EQ(host_target.code(), HMR_EINVAL);
  EXPECT_NE(host_target.reason().find("not CUDA memory"), std::string::npos)
      << host_target.reason();
  EXPECT_EQ(iface_.copy_from_device(host.data(), host.data() + 8192, 64).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_to_device(target, host.data(), 8193).code(), HMR_EINVAL);  // past the end
  EXPECT_EQ(iface_.copy_to_device(nullptr, host.data(), 1).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_to_device(target, nullptr, 1).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_from_device(nullptr, target, 1).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.copy_from_device(host.data(), nullptr, 1).code(), HMR_EINVAL);
  EXPECT_TRUE(iface_.copy_to_device(target, host.data(), 0).ok());  // as memcpy
  EXPECT_EQ(fake_cuda().call_count("cuMemcpyHtoD_v2"), 0);
  EXPECT_EQ(fake_cuda().call_count("cuMemcpyDtoH_v2"), 0);
  EXPECT_EQ(fake_cuda().call_count("cuDevicePrimaryCtxRetain"), 0);
}

TEST_F(CudaMemoryTest, AllocatedMemoryIsDetectedAsTheKindAskedFor) {
  init();
  EXPECT_EQ(iface_.free_tracking(), Iface::FreeTracking::alloc_id);
  struct Case {
    MemoryKind kind;
    int device;
  };
  for (const Case c : {Case{MemoryKind::device_only, 1}, Case{MemoryKind::host_alloc, 0},
                       Case{MemoryKind::managed, 1}}) {
    SCOPED_TRACE(hmem::memory_kind_name(c.kind));
    const size_t size = (3 << 20) + 5;
    Result<void*> allocated = iface_.mem_alloc(DeviceId{static_cast<uint64_t>(c.device)}, size,
                                               c.kind);
    ASSERT_TRUE(allocated.ok()) << allocated.status().reason();
    Result<PointerInfo> info = iface_.query(*allocated, size);
    ASSERT_TRUE(info.ok()) << info.status().reason();
    EXPECT_EQ(info->kind, c.kind);
    EXPECT_EQ(info->device, DeviceId{static_cast<uint64_t>(c.device)});
    EXPECT_EQ(info->base, address_of(*allocated));
    EXPECT_EQ(info->alloc_len, size);
    if (c.kind != MemoryKind::device_only) {
      std::memset(*allocated, 0x5a, size);  // host-alloc and managed memory: the CPU may touch it
    }
    ASSERT_TRUE(iface_.mem_free(*allocated).ok());
    EXPECT_EQ(iface_.query(*allocated, 1).status().code(), HMR_ENOENT);
  }
}

TEST_F(CudaMemoryTest, FreeAndReallocationAtTheSameAddressChangesTheAllocId) {
  init();
  Result<void*> first = iface_.mem_alloc(DeviceId{0}, 1 << 20, MemoryKind::device_only);
  ASSERT_TRUE(first.ok());
  const uint64_t before = iface_.query(*first, 64)->alloc_id;
  ASSERT_TRUE(iface_.mem_free(*first).ok());
  Result<void*> second = iface_.mem_alloc(DeviceId{0}, 1 << 20, MemoryKind::device_only);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(*second, *first);  // the fake hands the freed address out again
  EXPECT_NE(iface_.query(*second, 64)->alloc_id, before);
  EXPECT_TRUE(iface_.mem_free(*second).ok());
}

TEST_F(CudaMemoryTest, BadAllocationsAndFreesFailWithAReason) {
  init();
  EXPECT_EQ(iface_.mem_alloc(DeviceId{2}, 4096, MemoryKind::device_only).status().code(),
            HMR_EINVAL);
  EXPECT_EQ(iface_.mem_alloc(DeviceId{0}, 0, MemoryKind::device_only).status().code(), HMR_EINVAL);
  Result<void*> host = iface_.mem_alloc(DeviceId{0}, 4096, MemoryKind::host);
  EXPECT_EQ(host.status().code(), HMR_EINVAL);
  EXPECT_NE(host.status().reason().find("host"), std::string::npos);
  EXPECT_EQ(fake_cuda().call_count("cuMemAlloc_v2"), 0);

  fake_cuda().set_failure("cuMemAllocManaged", 2);  // CUDA_ERROR_OUT_OF_MEMORY
  Result<void*> failed = iface_.mem_alloc(DeviceId{0}, 4096, MemoryKind::managed);
  EXPECT_EQ(failed.status().code(), HMR_ENOMEM);
  EXPECT_NE(failed.status().reason().find("cuMemAllocManaged"), std::string::npos);

  Result<void*> memory = iface_.mem_alloc(DeviceId{0}, 8192, MemoryKind::device_only);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(iface_.mem_free(static_cast<char*>(*memory) + 4096).code(), HMR_EINVAL);  // not base
  EXPECT_EQ(iface_.mem_free(nullptr).code(), HMR_EINVAL);
  int local = 0;
  EXPECT_EQ(iface_.mem_free(&local).code(), HMR_EINVAL);
  ASSERT_TRUE(iface_.mem_free(*memory).ok());
  EXPECT_EQ(iface_.mem_free(*memory).code(), HMR_EINVAL);  // already freed
}

TEST_F(CudaMemoryTest, TheIfaceKeepsItsContextRetainedUntilItIsDestroyed) {
  unsigned long long address = 0;
  {
    CudaIface local;
    ASSERT_TRUE(local.init().ok());
    Result<void*> memory = local.mem_alloc(DeviceId{0}, 4096, MemoryKind::device_only);
    ASSERT_TRUE(memory.ok());
    address = address_of(*memory);
    EXPECT_EQ(fake_cuda().primary_retains(0), 1);
    EXPECT_TRUE(local.query(*memory, 1).ok());
  }
  // Its retain went with it, and the driver freed the memory made in that context.
  EXPECT_EQ(fake_cuda().primary_retains(0), 0);
  init();
  EXPECT_EQ(iface_.query(as_pointer(address), 1).status().code(), HMR_ENOENT);
}

TEST_F(CudaMemoryTest, ThreadsRacingForTheContextLeaveOneRetain) {
  init();
  const unsigned long long device = alloc(1, 1 << 20);
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      unsigned char byte = static_cast<unsigned char>(t);
      void* target = const_cast<void*>(as_pointer(device + t));
      for (int i = 0; i < 20; ++i) failures[t] += !iface_.copy_to_device(target, &byte, 1).ok();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int count : failures) EXPECT_EQ(count, 0);
  EXPECT_EQ(fake_cuda().primary_retains(1), 1);
}

TEST_F(CudaMemoryTest, HostRegistrationIsRecordedAndOverlapsAreRefused) {
  init();
  std::vector<char> buffer(4 * 4096);
  ASSERT_TRUE(iface_.host_register(buffer.data(), 2 * 4096).ok());
  EXPECT_EQ(fake_cuda().host_registration_count(), 1);
  Result<PointerInfo> info = iface_.query(buffer.data() + 100, 64);
  ASSERT_TRUE(info.ok()) << info.status().reason();
  EXPECT_EQ(info->kind, MemoryKind::host_alloc);  // registered: pinned and known to CUDA

  Status overlap = iface_.host_register(buffer.data() + 4096, 2 * 4096);
  EXPECT_EQ(overlap.code(), HMR_EALREADY);
  EXPECT_NE(overlap.reason().find("already registered"), std::string::npos) << overlap.reason();
  EXPECT_TRUE(iface_.host_register(buffer.data() + 2 * 4096, 2 * 4096).ok());  // disjoint
  EXPECT_EQ(fake_cuda().host_registration_count(), 2);

  ASSERT_TRUE(iface_.host_unregister(buffer.data()).ok());
  ASSERT_TRUE(iface_.host_unregister(buffer.data() + 2 * 4096).ok());
  EXPECT_EQ(fake_cuda().host_registration_count(), 0);
  EXPECT_EQ(iface_.query(buffer.data(), 64).status().code(), HMR_ENOENT);
  Status again = iface_.host_unregister(buffer.data());
  EXPECT_EQ(again.code(), HMR_EINVAL);
  EXPECT_NE(again.reason().find("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"), std::string::npos)
      << again.reason();
  EXPECT_EQ(fake_cuda().current_context_device(), -1);
}

TEST_F(CudaMemoryTest, BadHostRegistrationsCallNothing) {
  init();
  char byte = 0;
  EXPECT_EQ(iface_.host_register(nullptr, 4096).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.host_register(&byte, 0).code(), HMR_EINVAL);
  EXPECT_EQ(iface_.host_register(&byte, SIZE_MAX).code(), HMR_EINVAL);  // wraps
  EXPECT_EQ(iface_.host_unregister(nullptr).code(), HMR_EINVAL);
  EXPECT_EQ(fake_cuda().call_count("cuMemHostRegister_v2"), 0);
  EXPECT_EQ(fake_cuda().call_count("cuMemHostUnregister"), 0);
}

TEST_F(CudaMemoryTest, EveryOperationFailsBeforeInit) {
  CudaIface fresh;
  char byte = 0;
  EXPECT_EQ(fresh.copy_to_device(&byte, &byte, 1).code(), HMR_EINVAL);
  EXPECT_EQ(fresh.copy_from_device(&byte, &byte, 1).code(), HMR_EINVAL);
  EXPECT_EQ(fresh.host_register(&byte, 1).code(), HMR_EINVAL);
  EXPECT_EQ(fresh.host_unregister(&byte).code(), HMR_EINVAL);
  EXPECT_EQ(fresh.mem_alloc(DeviceId{0}, 1, MemoryKind::device_only).status().code(), HMR_EINVAL);
  EXPECT_EQ(fresh.mem_free(&byte).code(), HMR_EINVAL);
}

}  // namespace
}  // namespace hmr::cuda
